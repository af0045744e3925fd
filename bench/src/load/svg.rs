//! A hand-written SVG chart of a sweep: accepted items/s (left axis, solid line) and p99 push
//! latency (right axis, dashed line) against the number of concurrent senders (evenly spaced).

use std::fmt::Write;

/// One sweep point: senders, items/s, p99 ms.
pub struct Point {
    pub senders: usize,
    pub items_per_s: f64,
    pub p99_ms: f64,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

/// A "nice" axis top at or above `v` (1, 2 or 5 times a power of ten).
fn nice_ceiling(v: f64) -> f64 {
    if !v.is_finite() || v <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * p)
}

/// Text safe inside SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as an SVG document.
pub fn render(title: &str, points: &[Point]) -> String {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let tmax = nice_ceiling(points.iter().map(|p| p.items_per_s).fold(0.0, f64::max));
    let lmax = nice_ceiling(points.iter().map(|p| p.p99_ms).fold(0.0, f64::max));
    let x = |i: usize| {
        if points.len() <= 1 {
            LEFT + pw / 2.0
        } else {
            LEFT + pw * i as f64 / (points.len() - 1) as f64
        }
    };
    let yt = |v: f64| TOP + ph * (1.0 - v / tmax);
    let yl = |v: f64| TOP + ph * (1.0 - v / lmax);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    for k in 0..=5 {
        let f = f64::from(k) / 5.0;
        let y = TOP + ph * (1.0 - f);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            W - RIGHT
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#1f77b4">{:.0}</text>"##,
            LEFT - 6.0,
            y + 4.0,
            tmax * f
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" fill="#d62728">{}</text>"##,
            W - RIGHT + 6.0,
            y + 4.0,
            fmt_ms(lmax * f)
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/>"##,
        TOP + ph
    );
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        TOP + ph,
        W - RIGHT,
        TOP + ph
    );
    let _ = writeln!(
        s,
        r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#333"/>"##,
        W - RIGHT,
        TOP + ph
    );
    for (i, p) in points.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x(i),
            TOP + ph + 18.0,
            p.senders
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">concurrent senders</text>"#,
        LEFT + pw / 2.0,
        H - 18.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle" fill="#1f77b4">accepted items/s</text>"##,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate({:.1},{:.1}) rotate(90)" text-anchor="middle" fill="#d62728">p99 push latency (ms)</text>"##,
        W - 14.0,
        TOP + ph / 2.0
    );
    let line = |ys: &dyn Fn(&Point) -> f64| -> String {
        points
            .iter()
            .enumerate()
            .map(|(i, p)| format!("{:.1},{:.1}", x(i), ys(p)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let _ = writeln!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#1f77b4" stroke-width="2"/>"##,
        line(&|p| yt(p.items_per_s))
    );
    let _ = writeln!(
        s,
        r##"<polyline points="{}" fill="none" stroke="#d62728" stroke-width="2" stroke-dasharray="6 4"/>"##,
        line(&|p| yl(p.p99_ms))
    );
    for (i, p) in points.iter().enumerate() {
        let (cx, ty, ly) = (x(i), yt(p.items_per_s), yl(p.p99_ms));
        let _ = writeln!(
            s,
            r##"<circle cx="{cx:.1}" cy="{ty:.1}" r="4" fill="#1f77b4"/>"##
        );
        let _ = writeln!(
            s,
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#1f77b4">{:.0}/s</text>"##,
            ty - 8.0,
            p.items_per_s
        );
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="8" height="8" fill="#d62728"/>"##,
            cx - 4.0,
            ly - 4.0
        );
        let _ = writeln!(
            s,
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#d62728">{} ms</text>"##,
            ly + 18.0,
            fmt_ms(p.p99_ms)
        );
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_ms(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_axis_tops() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(5001.0), 10000.0);
        assert_eq!(nice_ceiling(200.0), 200.0);
    }

    #[test]
    fn chart_has_one_marker_per_point_and_escapes_text() {
        let pts = [
            Point {
                senders: 1,
                items_per_s: 900.0,
                p99_ms: 2.0,
            },
            Point {
                senders: 8,
                items_per_s: 4000.0,
                p99_ms: 9.5,
            },
            Point {
                senders: 64,
                items_per_s: 6000.0,
                p99_ms: 40.0,
            },
        ];
        let svg = render("a <b> & c", &pts);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains(">64<"));
        assert!(!render("one", &pts[..1]).contains("NaN"));
    }
}
