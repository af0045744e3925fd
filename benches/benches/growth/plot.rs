//! The growth plot, hand-written SVG (no plotting dependency): accepted items/s (left axis,
//! solid) and relay CPU µs per item (right axis, dashed) against the store's size on disk, one
//! point per round, the empty-store baseline as hollow markers at its own size.

use std::fmt::Write;

use relay_bench::chart::nice_ceiling;

use crate::run::{Doc, Round};

const W: f64 = 720.0;
const H: f64 = 420.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 80.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 80.0;

/// One series as a polyline with a marker per point.
fn series(s: &mut String, pts: &[(f64, f64)], color: &str, dashed: bool, hollow: bool) {
    if pts.len() > 1 && !hollow {
        let path: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let dash = if dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
            path.join(" ")
        );
    }
    let fill = if hollow { "white" } else { color };
    for (x, y) in pts {
        let _ = writeln!(
            s,
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="4" fill="{fill}" stroke="{color}" stroke-width="2"/>"#
        );
    }
}

/// The chart of one store's run.
pub(crate) fn render(d: &Doc) -> String {
    let rounds: &[Round] = &d.growth.rounds;
    let base: &[Round] = d.baseline.as_ref().map_or(&[], |b| &b.rounds);
    let all = || rounds.iter().chain(base);
    let gb = |r: &Round| r.store_bytes as f64 / 1e9;
    let xmax = nice_ceiling(all().map(gb).fold(0.0, f64::max));
    let tmax = nice_ceiling(all().map(|r| r.items_per_s).fold(0.0, f64::max));
    let cmax = nice_ceiling(all().map(|r| r.relay_cpu_us).fold(0.0, f64::max));
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x = |v: f64| LEFT + pw * v / xmax;
    let yt = |v: f64| TOP + ph * (1.0 - v / tmax);
    let yc = |v: f64| TOP + ph * (1.0 - v / cmax);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">mbx-relay growth ({}): batches of {} x 1 KiB, {} senders, {} hosts</text>"#,
        W / 2.0,
        d.store,
        d.batch,
        d.senders,
        d.growth.hosts
    );
    for i in 0..=5 {
        let f = f64::from(i) / 5.0;
        let y = TOP + ph * (1.0 - f);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
            LEFT + pw
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{:.0}</text>"#,
            LEFT - 6.0,
            y + 4.0,
            tmax * f
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{:.0}</text>"#,
            LEFT + pw + 6.0,
            y + 4.0,
            cmax * f
        );
        let xv = LEFT + pw * f;
        let _ = writeln!(
            s,
            r#"<text x="{xv:.1}" y="{:.1}" text-anchor="middle">{:.1}</text>"#,
            TOP + ph + 18.0,
            xmax * f
        );
    }
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">store size on disk (GB)</text>"#,
        LEFT + pw / 2.0,
        TOP + ph + 38.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle" fill="#1f5fa8">accepted items/s</text>"##,
        TOP + ph / 2.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate({:.1} {:.1}) rotate(90)" text-anchor="middle" fill="#b5412b">relay CPU µs per item</text>"##,
        W - 18.0,
        TOP + ph / 2.0
    );
    let pts = |rs: &[Round], y: &dyn Fn(&Round) -> f64| -> Vec<(f64, f64)> {
        rs.iter().map(|r| (x(gb(r)), y(r))).collect()
    };
    series(
        &mut s,
        &pts(rounds, &|r| yt(r.items_per_s)),
        "#1f5fa8",
        false,
        false,
    );
    series(
        &mut s,
        &pts(rounds, &|r| yc(r.relay_cpu_us)),
        "#b5412b",
        true,
        false,
    );
    series(
        &mut s,
        &pts(base, &|r| yt(r.items_per_s)),
        "#1f5fa8",
        false,
        true,
    );
    series(
        &mut s,
        &pts(base, &|r| yc(r.relay_cpu_us)),
        "#b5412b",
        true,
        true,
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{:.1}" font-size="11">solid: items/s; dashed: CPU µs/item; hollow: empty-store baseline. Commit {}, {} cores shared with the load generator.</text>"#,
        H - 14.0,
        d.commit,
        d.cores
    );
    s.push_str("</svg>\n");
    s
}
