//! A hand-written SVG of `bench --latency`: push-to-receive p50, p99 and max per receiver kind,
//! as horizontal bars on a log scale (sub-millisecond long-poll beside second-long polling).

use std::fmt::Write;

use relay_bench::chart::esc;

/// One receiver kind's percentiles, in milliseconds.
pub(super) struct Bars {
    pub label: String,
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

const W: f64 = 720.0;
const LEFT: f64 = 170.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 60.0;
const ROW: f64 = 22.0;
const GAP: f64 = 16.0;
/// The axis: 0.1 ms to 10 s.
const LO_EXP: i32 = -1;
const HI_EXP: i32 = 4;

/// x of `ms` on the log axis (clamped to it).
fn x(ms: f64) -> f64 {
    let (lo, hi) = (f64::from(LO_EXP), f64::from(HI_EXP));
    let e = ms.max(1e-9).log10().clamp(lo, hi);
    LEFT + (e - lo) / (hi - lo) * (W - LEFT - RIGHT)
}

/// The chart as an SVG document; `footer` says when and from what it was measured
/// (`super::svg::provenance`).
pub(super) fn render(title: &str, kinds: &[Bars], footer: &str) -> String {
    let group = 3.0 * ROW + GAP;
    let h = TOP + group * kinds.len() as f64 + 50.0;
    let mut s = String::new();
    let _ = write!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2.0,
        esc(title)
    );
    let bottom = h - 50.0;
    for e in LO_EXP..=HI_EXP {
        let ms = 10f64.powi(e);
        let gx = x(ms);
        let label = if ms < 1.0 {
            format!("{ms} ms")
        } else if ms < 1000.0 {
            format!("{ms:.0} ms")
        } else {
            format!("{:.0} s", ms / 1000.0)
        };
        let _ = write!(
            s,
            "<line x1=\"{gx:.1}\" y1=\"{TOP}\" x2=\"{gx:.1}\" y2=\"{bottom}\" stroke=\"#ddd\"/>\n\
             <text x=\"{gx:.1}\" y=\"{}\" text-anchor=\"middle\">{label}</text>\n",
            bottom + 16.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">push answer → pull answer holding the item (log scale)</text>",
        LEFT + (W - LEFT - RIGHT) / 2.0,
        bottom + 36.0
    );
    for (i, k) in kinds.iter().enumerate() {
        let y0 = TOP + group * i as f64;
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" font-weight=\"bold\">{}</text>",
            LEFT - 10.0,
            y0 + 1.5 * ROW + 4.0,
            esc(&k.label)
        );
        for (j, (name, v, color)) in [
            ("p50", k.p50, "#2b6cb0"),
            ("p99", k.p99, "#dd6b20"),
            ("max", k.max, "#a0aec0"),
        ]
        .into_iter()
        .enumerate()
        {
            let y = y0 + ROW * j as f64;
            let x0 = x(10f64.powi(LO_EXP));
            let _ = write!(
                s,
                "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"/>\n\
                 <text x=\"{:.1}\" y=\"{:.1}\">{name} {v:.2} ms</text>\n",
                y + 2.0,
                (x(v) - x0).max(1.0),
                ROW - 4.0,
                x(v) + 4.0,
                y + ROW - 7.0
            );
        }
    }
    let _ = writeln!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"10\" fill=\"#666\">{}</text>",
        W - 8.0,
        h - 4.0,
        esc(footer)
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_sit_on_a_log_axis_and_text_is_escaped() {
        assert!(
            (x(1.0) - x(0.1) - (x(10.0) - x(1.0))).abs() < 1e-9,
            "one decade, one width"
        );
        assert_eq!(x(1e9), x(1e4), "clamped");
        let svg = render(
            "a < b",
            &[Bars {
                label: "long-poll".into(),
                p50: 0.5,
                p99: 5.0,
                max: 50.0,
            }],
            "measured 2026-12-02, commit abc",
        );
        assert!(svg.contains("measured 2026-12-02, commit abc"));
        assert!(svg.contains("a &lt; b") && svg.contains("p99 5.00 ms"));
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }
}
