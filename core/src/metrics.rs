//! In-process counters for `/metrics`: item outcomes by status and reason, store-write latency
//! as seen by the relay, items per commit submission, and the health of the last store write.
//! Everything is bounded: rejections are counted by [`Reason`] label, a closed set.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::capacity::CapWatch;
use super::reason::Reason;

/// A fixed-bucket histogram (Prometheus `_bucket`, `_sum`, `_count`).
pub(crate) struct Histogram {
    bounds: &'static [f64],
    counts: Vec<AtomicU64>,
    sum_micros: AtomicU64,
    count: AtomicU64,
}

impl Histogram {
    /// A histogram with the given upper bounds (ascending); `+Inf` is implied.
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: (0..bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_micros: AtomicU64::new(0),
            count: AtomicU64::new(0),
        }
    }

    /// Record one observation.
    pub fn observe(&self, v: f64) {
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            if v <= *b {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.sum_micros
            .fetch_add((v * 1e6) as u64, Ordering::Relaxed);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Append this histogram in Prometheus text format.
    pub fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(
                out,
                "{name}_bucket{{le=\"{b}\"}} {}",
                c.load(Ordering::Relaxed)
            );
        }
        let n = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {n}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {n}");
    }
}

const LATENCY_BOUNDS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
const SIZE_BOUNDS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// The relay's counters.
pub struct Metrics {
    pub accepted: AtomicU64,
    pub duplicate: AtomicU64,
    /// Keyed by [`Reason::as_wire_str`]: never more entries than reasons.
    rejected: Mutex<BTreeMap<&'static str, u64>>,
    /// Wall time of each awaited store write (submit to durable answer), seconds.
    pub(crate) store_write: Histogram,
    /// Items handed to the store in one insert submission (one push request).
    pub(crate) items_per_submit: Histogram,
    last_write_ok_ms: AtomicU64,
    write_failed: AtomicBool,
    /// Live enrolments against `--max-enrolments` (warns on crossing 90 %).
    pub(crate) enrolment_cap: CapWatch,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            accepted: AtomicU64::new(0),
            duplicate: AtomicU64::new(0),
            rejected: Mutex::new(BTreeMap::new()),
            store_write: Histogram::new(LATENCY_BOUNDS),
            items_per_submit: Histogram::new(SIZE_BOUNDS),
            last_write_ok_ms: AtomicU64::new(0),
            write_failed: AtomicBool::new(false),
            enrolment_cap: CapWatch::default(),
        }
    }
}

impl Metrics {
    /// Count a rejected item under its reason's fixed text (free parts never become labels).
    pub fn rejected(&self, reason: &Reason) {
        let mut m = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(reason.as_wire_str()).or_insert(0) += 1;
    }

    /// A store write succeeded at `now_ms`.
    pub(crate) fn note_write_ok(&self, now_ms: u64) {
        self.last_write_ok_ms.store(now_ms, Ordering::Relaxed);
        self.write_failed.store(false, Ordering::Relaxed);
    }

    /// A store write failed.
    pub(crate) fn note_write_failed(&self) {
        self.write_failed.store(true, Ordering::Relaxed);
    }

    /// When the last store write succeeded and whether one failed since.
    pub fn write_health(&self) -> (u64, bool) {
        (
            self.last_write_ok_ms.load(Ordering::Relaxed),
            self.write_failed.load(Ordering::Relaxed),
        )
    }

    /// Append the item and store counters in Prometheus text format.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP mbx_relay_items_total Pushed items by outcome and rejection reason.\n# TYPE mbx_relay_items_total counter"
        );
        let _ = writeln!(
            out,
            "mbx_relay_items_total{{status=\"accepted\",reason=\"\"}} {}",
            self.accepted.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "mbx_relay_items_total{{status=\"duplicate\",reason=\"\"}} {}",
            self.duplicate.load(Ordering::Relaxed)
        );
        let m = self.rejected.lock().unwrap_or_else(|p| p.into_inner());
        for (reason, n) in m.iter() {
            let _ = writeln!(
                out,
                "mbx_relay_items_total{{status=\"rejected\",reason=\"{}\"}} {n}",
                escape_label(reason)
            );
        }
        drop(m);
        self.store_write.render(
            out,
            "mbx_relay_store_write_seconds",
            "Time from submitting a write to the store until it is durable (group commit wait + fsync), measured by the relay.",
        );
        self.items_per_submit.render(
            out,
            "mbx_relay_items_per_store_submit",
            "Items submitted to the store together by one push request (the store may group several submissions into one commit).",
        );
    }
}

/// Append one cumulative histogram given as `(bound, count <= bound)` pairs.
fn render_buckets(
    out: &mut String,
    name: &str,
    help: &str,
    buckets: &[(u64, u64)],
    scale: f64,
    sum: f64,
    count: u64,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
    for (b, c) in buckets {
        let _ = writeln!(out, "{name}_bucket{{le=\"{}\"}} {c}", *b as f64 * scale);
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
    let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
}

/// Append the store's group-commit figures: operations per commit group and fsync latency.
pub fn render_commit_stats(out: &mut String, s: &relay_store::CommitStats) {
    render_buckets(
        out,
        "mbx_relay_commit_group_ops",
        "Operations made durable by one group commit (one fsync).",
        &s.group_size_buckets,
        1.0,
        s.ops as f64,
        s.groups,
    );
    render_buckets(
        out,
        "mbx_relay_fsync_seconds",
        "Duration of each group commit's fsync.",
        &s.fsync_us_buckets,
        1e-6,
        s.fsync_us_sum as f64 / 1e6,
        s.fsyncs,
    );
    let _ = writeln!(
        out,
        "# HELP mbx_relay_commit_groups_failed_total Commit groups whose write or fsync failed (answered with errors).\n# TYPE mbx_relay_commit_groups_failed_total counter\nmbx_relay_commit_groups_failed_total {}",
        s.failed_groups
    );
}

/// Escape a Prometheus label value.
pub fn escape_label(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_and_reasons_render() {
        let m = Metrics::default();
        m.store_write.observe(0.003);
        m.rejected(&Reason::Rate);
        m.rejected(&Reason::Rate);
        let mut s = String::new();
        m.render(&mut s);
        assert!(s.contains("mbx_relay_items_total{status=\"rejected\",reason=\"rate\"} 2"));
        assert!(s.contains("mbx_relay_store_write_seconds_bucket{le=\"0.005\"} 1"));
        assert!(s.contains("mbx_relay_store_write_seconds_bucket{le=\"0.002\"} 0"));
        assert!(s.contains("mbx_relay_store_write_seconds_count 1"));
    }

    #[test]
    fn reasons_with_free_text_count_under_their_fixed_label() {
        let m = Metrics::default();
        for i in 0..100 {
            m.rejected(&Reason::RecipientHostNotEnrolled(format!("made-up-{i}")));
            m.rejected(&Reason::BadEnvelope(format!("why {i}")));
        }
        let labels: Vec<&str> = m.rejected.lock().unwrap().keys().copied().collect();
        assert_eq!(labels, ["bad envelope", "recipient host not enrolled"]);
    }
}
