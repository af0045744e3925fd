//! Turning measurements into what the user reads: a text table (default) or one JSON document
//! (`--json`, for scripts and the e2e bench). MB means 10^6 bytes of decoded wire bytes.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

use serde::Serialize;

use super::stats::{percentiles, Errors, Percentiles};

/// One timed phase (push or drain) of a sweep point.
#[derive(Serialize, Clone, Debug)]
pub(super) struct Phase {
    pub items: u64,
    pub requests: u64,
    pub seconds: f64,
    pub items_per_s: f64,
    pub mb_per_s: f64,
    pub latency_ms: Percentiles,
    pub errors: BTreeMap<String, u64>,
    /// CPU the load generator itself used inside the timed window(s), in seconds.
    pub client_cpu_s: f64,
}

impl Phase {
    /// Rates from what was done in `timed`.
    pub(super) fn new(
        items: u64,
        bytes: u64,
        requests: u64,
        (timed, client_cpu): (Duration, Duration),
        lat_us: &mut [u32],
        errors: &Errors,
    ) -> Self {
        let secs = timed.as_secs_f64();
        let rate = |x: u64| if secs > 0.0 { x as f64 / secs } else { 0.0 };
        Phase {
            items,
            requests,
            seconds: secs,
            items_per_s: rate(items),
            mb_per_s: rate(bytes) / 1e6,
            latency_ms: percentiles(lat_us),
            errors: errors.0.clone(),
            client_cpu_s: client_cpu.as_secs_f64(),
        }
    }
}

/// One sweep point.
#[derive(Serialize, Clone, Debug)]
pub(super) struct PointReport {
    pub senders: usize,
    pub items: u64,
    pub push: Phase,
    pub drain: Option<Phase>,
}

/// The whole run.
#[derive(Serialize, Clone, Debug)]
pub(super) struct Report {
    pub url: String,
    pub relay_version: String,
    pub targets: usize,
    pub batch: usize,
    pub item_bytes: usize,
    pub item_bytes_asked: usize,
    pub points: Vec<PointReport>,
}

fn row(out: &mut String, label: &str, p: &Phase) {
    let l = &p.latency_ms;
    let _ = writeln!(
        out,
        "{label:>7} {:>9} {:>9} {:>10.0} {:>7.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>7} {:>8.0}",
        p.items + p.errors.values().sum::<u64>(),
        p.items,
        p.items_per_s,
        p.mb_per_s,
        l.p50,
        l.p90,
        l.p99,
        l.max,
        p.errors.values().sum::<u64>(),
        if p.seconds > 0.0 {
            100.0 * p.client_cpu_s / p.seconds
        } else {
            0.0
        }
    );
}

const HEADER: &str =
    "senders     items      done    items/s    MB/s   p50 ms   p90 ms   p99 ms   max ms  errors  gen cpu%";

/// The text report.
pub(super) fn text(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "relay {} (version {}), {} targets, batches of {}, items of {} bytes (asked {})",
        r.url, r.relay_version, r.targets, r.batch, r.item_bytes, r.item_bytes_asked
    );
    let _ = writeln!(
        out,
        "\npush (done = accepted with a valid accept signature; latency per request;\n gen cpu% = this load generator's own CPU in the timed window, % of one core):\n{HEADER}"
    );
    for p in &r.points {
        row(&mut out, &p.senders.to_string(), &p.push);
    }
    if r.points.iter().any(|p| p.drain.is_some()) {
        let _ = writeln!(
            out,
            "\ndrain (pull + ack by {} receivers; latency per page):\n{HEADER}",
            r.targets
        );
        for p in &r.points {
            if let Some(d) = &p.drain {
                row(&mut out, &p.senders.to_string(), d);
            }
        }
    }
    let mut first = true;
    for p in &r.points {
        for (phase, d) in [("push", Some(&p.push)), ("drain", p.drain.as_ref())] {
            for (kind, n) in d.map(|d| &d.errors).into_iter().flatten() {
                if first {
                    let _ = writeln!(out, "\nerrors by kind:");
                    first = false;
                }
                let _ = writeln!(out, "  {} senders, {phase}: {kind}: {n}", p.senders);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_text() {
        let mut errs = Errors::default();
        errs.add("rejected:rate", 3);
        let mut lat = vec![1000, 3000, 2000];
        let p = Phase::new(
            100,
            2_000_000,
            10,
            (Duration::from_secs(2), Duration::from_millis(500)),
            &mut lat,
            &errs,
        );
        assert_eq!(
            (p.items_per_s, p.mb_per_s, p.latency_ms.max),
            (50.0, 1.0, 3.0)
        );
        let r = Report {
            url: "http://x".into(),
            relay_version: "1".into(),
            targets: 2,
            batch: 1,
            item_bytes: 1000,
            item_bytes_asked: 1024,
            points: vec![PointReport {
                senders: 8,
                items: 103,
                push: p.clone(),
                drain: Some(p),
            }],
        };
        let t = text(&r);
        assert!(t.contains("8 senders, push: rejected:rate: 3"));
        assert!(t.contains("drain (pull + ack"));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["points"][0]["push"]["errors"]["rejected:rate"], 3);
    }
}
