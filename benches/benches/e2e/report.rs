//! What the e2e bench reports besides its figures: the commit and the machine they were
//! measured on (every figure depends on both), each fjall figure against its target (met, not
//! met, or not applicable at the size run), and an SVG of the figures against the targets. Pure
//! functions of the medians, so `benches/tests/e2e_report.rs` checks them without a bench run.

use std::fmt::Write as _;
use std::path::Path;

use relay_bench::chart::esc;

/// The medians of one store the targets are about.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Medians {
    pub(crate) single_ips: f64,
    pub(crate) single_p99_ms: f64,
    pub(crate) batch_ips: f64,
    pub(crate) drain_ips: f64,
    pub(crate) rss_pushed_mib: f64,
    pub(crate) rss_restarted_mib: f64,
    pub(crate) startup_queued_ms: f64,
    /// Items queued before the restart and the drain.
    pub(crate) queued: f64,
    /// Failed requests over all phases and rounds.
    pub(crate) errors: f64,
}

/// Items queued the memory and start-up targets are stated for.
pub(crate) const TARGET_QUEUED: f64 = 1_000_000.0;

/// Printed under the table when a verdict is not applicable.
pub(crate) const NOT_APPLICABLE_NOTE: &str =
    "n/a: the memory and start-up targets are for 1,000,000 \
     queued items (MBX_BENCH_DRAIN_ITEMS=1000000)";

/// A figure against its target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    Met,
    NotMet,
    /// The run cannot say (why).
    NotApplicable(String),
}

impl Verdict {
    fn of(ok: bool) -> Verdict {
        if ok {
            Verdict::Met
        } else {
            Verdict::NotMet
        }
    }

    /// The table's text.
    pub(crate) fn text(&self) -> String {
        match self {
            Verdict::Met => "met".into(),
            Verdict::NotMet => "NOT met".into(),
            Verdict::NotApplicable(why) => format!("n/a ({why})"),
        }
    }
}

/// What each table row is held to: `(target text, verdict)`, in the table's row order
/// (single pushes, its CPU, batches, its CPU, drain, its CPU, RSS, start-up, errors); CPU rows
/// have no target.
pub(crate) fn targets(m: &Medians) -> Vec<Option<(String, Verdict)>> {
    let at_size = |ok: bool| {
        if m.queued >= TARGET_QUEUED {
            Verdict::of(ok)
        } else {
            Verdict::NotApplicable(format!("{:.0} queued", m.queued))
        }
    };
    vec![
        Some((
            ">= 5,000 items/s, p99 < 50 ms".into(),
            Verdict::of(m.single_ips >= 5_000.0 && m.single_p99_ms < 50.0),
        )),
        None,
        Some((
            ">= 40,000 items/s".into(),
            Verdict::of(m.batch_ips >= 40_000.0),
        )),
        None,
        Some((
            ">= 100,000 items/s".into(),
            Verdict::of(m.drain_ips >= 100_000.0),
        )),
        None,
        Some((
            "< 64 MiB with 1,000,000 queued".into(),
            at_size(m.rss_pushed_mib < 64.0 && m.rss_restarted_mib < 64.0),
        )),
        Some((
            "< 200 ms with 1,000,000 queued".into(),
            at_size(m.startup_queued_ms < 200.0),
        )),
        Some(("0".into(), Verdict::of(m.errors == 0.0))),
    ]
}

/// The first line of `BIN --version` (`mbx-relay 0.1.0 (commit abc123def456)`): the commit of
/// the binary measured, which may differ from the checkout's.
pub(crate) fn binary_version(bin: &Path) -> String {
    std::process::Command::new(bin)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_owned))
        .unwrap_or_else(|| format!("{} (version unknown)", bin.display()))
}

/// The machine: CPU model, cores, memory and kernel, from `/proc` (what cannot be read is left
/// out).
pub(crate) fn machine() -> String {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_owned());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kib| kib / 1024.0 / 1024.0);
    let kernel = read("/proc/sys/kernel/osrelease").trim().to_owned();
    let mut parts = Vec::new();
    parts.extend(model);
    parts.push(format!("{cores} cores"));
    parts.extend(mem_gib.map(|g| format!("{g:.1} GiB")));
    if !kernel.is_empty() {
        parts.push(format!("Linux {kernel}"));
    }
    parts.join(", ")
}

/// One group of the plot: a measurement, its unit, the target (and whether higher is better),
/// and one bar per store.
pub(crate) struct Group {
    pub(crate) title: String,
    pub(crate) unit: &'static str,
    pub(crate) target: Option<f64>,
    pub(crate) higher_is_better: bool,
    pub(crate) bars: Vec<(String, f64)>,
}

const W: f64 = 760.0;
const LEFT: f64 = 150.0;
const RIGHT: f64 = 120.0;
const TOP: f64 = 50.0;
const BAR: f64 = 18.0;
const GAP: f64 = 34.0;

fn number(v: f64) -> String {
    if v >= 100.0 {
        let s = format!("{v:.0}");
        let mut out = String::new();
        for (i, c) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(c);
        }
        out
    } else {
        format!("{v:.1}")
    }
}

/// The plot as an SVG document: each group its own linear scale from 0, its target a dashed
/// line, each bar green when it meets the target and red when not (grey without one);
/// `footer` lines say what was measured where.
pub(crate) fn svg(title: &str, groups: &[Group], footer: &[String]) -> String {
    let rows: f64 = groups.iter().map(|g| g.bars.len() as f64).sum();
    let h = TOP + rows * BAR + groups.len() as f64 * GAP + 20.0 + footer.len() as f64 * 16.0;
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
    let span = W - LEFT - RIGHT;
    let mut y = TOP;
    for g in groups {
        let top = g
            .bars
            .iter()
            .map(|b| b.1)
            .chain(g.target)
            .fold(0.0, f64::max)
            .max(f64::MIN_POSITIVE)
            * 1.1;
        let target_text = g
            .target
            .map(|t| {
                let sign = if g.higher_is_better { ">=" } else { "<" };
                format!(" (target {sign} {} {})", number(t), g.unit)
            })
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{}\" font-weight=\"bold\">{}</text>",
            y + 12.0,
            esc(&format!("{}{target_text}", g.title))
        );
        y += 18.0;
        let first = y;
        for (label, v) in &g.bars {
            let len = (v / top * span).max(1.0);
            let colour = match g.target {
                Some(t) if (*v >= t) == g.higher_is_better => "#3a9d4a",
                Some(_) => "#c8423b",
                None => "#888888",
            };
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
                 <rect x=\"{LEFT}\" y=\"{}\" width=\"{len:.1}\" height=\"{}\" fill=\"{colour}\"/>\n\
                 <text x=\"{:.1}\" y=\"{}\">{} {}</text>",
                LEFT - 8.0,
                y + BAR * 0.7,
                esc(label),
                y + 2.0,
                BAR - 4.0,
                LEFT + len + 6.0,
                y + BAR * 0.7,
                number(*v),
                g.unit
            );
            y += BAR;
        }
        if let Some(t) = g.target {
            let x = LEFT + t / top * span;
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\" \
                 stroke-dasharray=\"4 3\"/>",
                first - 2.0,
                y + 2.0
            );
        }
        y += GAP - 18.0;
    }
    y += 10.0;
    for line in footer {
        let _ = writeln!(
            s,
            "<text x=\"10\" y=\"{y}\" font-size=\"11\" fill=\"#555555\">{}</text>",
            esc(line)
        );
        y += 16.0;
    }
    s.push_str("</svg>\n");
    s
}
