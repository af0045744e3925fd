//! A hand-written SVG chart of a sweep: accepted items/s (left axis, solid line) and p99 push
//! latency (right axis, dashed line) against the number of concurrent senders (evenly spaced,
//! half a step in from each axis so point labels never sit on the axis ticks), with a legend
//! and a footer naming when and from which commit it was measured.

use std::fmt::Write;

use relay_bench::chart::{esc, nice_ceiling};

/// One sweep point: senders, items/s, p99 ms.
pub(super) struct Point {
    pub senders: usize,
    pub items_per_s: f64,
    pub p99_ms: f64,
}

const W: f64 = 640.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 70.0;
const BOTTOM: f64 = 76.0;

/// The chart as an SVG document; `footer` says when and from what it was measured
/// ([`provenance`]).
pub(super) fn render(title: &str, points: &[Point], footer: &str) -> String {
    let pw = W - LEFT - RIGHT;
    let ph = H - TOP - BOTTOM;
    let tmax = nice_ceiling(points.iter().map(|p| p.items_per_s).fold(0.0, f64::max));
    let lmax = nice_ceiling(points.iter().map(|p| p.p99_ms).fold(0.0, f64::max));
    // Each point in the middle of its own slot: none on an axis, under its tick labels.
    let x = |i: usize| LEFT + pw * (i as f64 + 0.5) / points.len().max(1) as f64;
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
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#1f77b4" {HALO}>{:.0}/s</text>"##,
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
            r##"<text x="{cx:.1}" y="{:.1}" text-anchor="middle" fill="#d62728" {HALO}>{} ms</text>"##,
            ly + 18.0,
            fmt_ms(p.p99_ms)
        );
    }
    legend(&mut s);
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="10" fill="#666">{}</text>"##,
        W - 8.0,
        H - 4.0,
        esc(footer)
    );
    s.push_str("</svg>\n");
    s
}

/// A white outline under point labels, so a label crossing a grid line or the other series
/// stays readable.
const HALO: &str = r#"stroke="white" stroke-width="3" paint-order="stroke""#;

/// The two series' key, above the plot area (clear of every point and tick label).
fn legend(s: &mut String) {
    let y = TOP - 22.0;
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#1f77b4" stroke-width="2"/><circle cx="{:.1}" cy="{y:.1}" r="4" fill="#1f77b4"/><text x="{:.1}" y="{:.1}">accepted items/s (left axis)</text>"##,
        LEFT + 28.0,
        LEFT + 14.0,
        LEFT + 34.0,
        y + 4.0
    );
    let x2 = LEFT + 250.0;
    let _ = writeln!(
        s,
        r##"<line x1="{x2:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#d62728" stroke-width="2" stroke-dasharray="6 4"/><rect x="{:.1}" y="{:.1}" width="8" height="8" fill="#d62728"/><text x="{:.1}" y="{:.1}">p99 push latency, ms (right axis)</text>"##,
        x2 + 28.0,
        x2 + 10.0,
        y - 4.0,
        x2 + 34.0,
        y + 4.0
    );
}

/// `measured YYYY-MM-DD, mbx-relay VERSION, commit HASH`: the commit from `git` where the bench
/// runs inside a checkout, else `MBX_BENCH_COMMIT`, else "commit unknown".
pub(super) fn provenance() -> String {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    let day: String = relay_wire::time::iso_ms(now_ms).chars().take(10).collect();
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .or_else(|| std::env::var("MBX_BENCH_COMMIT").ok())
        .filter(|c| !c.is_empty())
        .map_or_else(|| "commit unknown".to_string(), |c| format!("commit {c}"));
    format!(
        "measured {day}, mbx-relay {}, {commit}",
        env!("CARGO_PKG_VERSION")
    )
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
        let svg = render("a <b> & c", &pts, "measured 2026-12-02, commit abc");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        // One marker per point (the legend's sample is on its own `<line` row).
        assert_eq!(svg.lines().filter(|l| l.starts_with("<circle")).count(), 3);
        assert!(svg.contains("a &lt;b&gt; &amp; c"));
        assert!(svg.contains(">64<"));
        assert!(!render("one", &pts[..1], "").contains("NaN"));
        // The footer and a legend naming both series.
        assert!(svg.contains("measured 2026-12-02, commit abc"));
        assert!(svg.contains("accepted items/s (left axis)") && svg.contains("(right axis)"));
    }

    /// No point (nor its label) sits on either y axis, where the tick labels are.
    #[test]
    fn points_stay_clear_of_the_axes() {
        let pts: Vec<Point> = [1, 8, 64]
            .iter()
            .map(|&n| Point {
                senders: n,
                items_per_s: 100.0 * n as f64,
                p99_ms: n as f64,
            })
            .collect();
        let svg = render("t", &pts, "f");
        for line in svg.lines().filter(|l| l.starts_with("<circle")) {
            let cx: f64 = line
                .split("cx=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .and_then(|v| v.parse().ok())
                .expect("cx");
            assert!(cx > LEFT + 30.0 && cx < W - RIGHT - 30.0, "{line}");
        }
    }
}
