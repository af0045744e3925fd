//! In-process metrics of the relay rules for `/metrics`, as prometheus-client metrics: pushed
//! item outcomes by status (a rejection also by reason), items delivered by pulls, acked and
//! expired, store-write and pull-read latency as seen by the relay, items per commit
//! submission, and the health of the last store write. Everything is bounded: rejections are
//! labelled by [`Reason`]'s fixed text, a closed set. The server registers them
//! ([`Metrics::register`]) beside its own and encodes the text.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeMetric as _, LabelSetEncoder,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use super::capacity::CapWatch;
use super::reason::Reason;

/// Upper bounds of every latency histogram, seconds (written as decimal literals, so the `le`
/// labels read `0.05`, never float noise).
pub(crate) const LATENCY_BOUNDS: [f64; 13] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];
const SIZE_BOUNDS: [f64; 9] = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0];

/// The labels of `mbx_relay_items_total`: the outcome and, for a rejection only, its fixed
/// reason text (`{status="accepted"}`, `{status="rejected",reason="rate"}`: no empty label).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct ItemLabels {
    status: &'static str,
    reason: Option<&'static str>,
}

impl EncodeLabelSet for ItemLabels {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> std::fmt::Result {
        match self.reason {
            Some(reason) => [("status", self.status), ("reason", reason)].encode(encoder),
            None => [("status", self.status)].encode(encoder),
        }
    }
}

/// A latency histogram with [`LATENCY_BOUNDS`].
pub fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BOUNDS)
}

/// The relay's counters.
pub struct Metrics {
    /// Keyed by outcome and [`Reason::as_wire_str`]: never more entries than reasons + 2.
    items: Family<ItemLabels, Counter>,
    /// Items handed to their target in pull answers (an item pulled again counts again).
    delivered: Counter,
    /// Items an ack removed from their target's queue.
    acked: Counter,
    /// Items this process's retention sweeps removed unacked.
    expired: Counter,
    /// Wall time of each awaited store write (submit to durable answer), seconds.
    pub(crate) store_write: Histogram,
    /// Wall time of each pull's page read (blocking-thread wait included), seconds.
    pub(crate) store_read: Histogram,
    /// Items handed to the store in one insert submission (one push request).
    pub(crate) items_per_submit: Histogram,
    last_write_ok_ms: AtomicU64,
    write_failed: AtomicBool,
    /// Live enrolments against `--max-enrolments` (warns on crossing 90 %).
    pub(crate) enrolment_cap: CapWatch,
}

const ACCEPTED: ItemLabels = ItemLabels {
    status: "accepted",
    reason: None,
};
const DUPLICATE: ItemLabels = ItemLabels {
    status: "duplicate",
    reason: None,
};

impl Default for Metrics {
    fn default() -> Self {
        let items = Family::default();
        // Both outcomes are shown from the start, at 0.
        let _ = items.get_or_create(&ACCEPTED);
        let _ = items.get_or_create(&DUPLICATE);
        Metrics {
            items,
            delivered: Counter::default(),
            acked: Counter::default(),
            expired: Counter::default(),
            store_write: latency_histogram(),
            store_read: latency_histogram(),
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
        let labels = ItemLabels {
            status: "rejected",
            reason: Some(reason.as_wire_str()),
        };
        self.items.get_or_create(&labels).inc();
    }

    /// Count `n` items handed out in a pull answer.
    pub(crate) fn delivered(&self, n: usize) {
        self.delivered.inc_by(n as u64);
    }

    /// Count `n` items an ack removed.
    pub(crate) fn acked(&self, n: u64) {
        self.acked.inc_by(n);
    }

    /// Count `n` items a retention sweep removed.
    pub(crate) fn expired(&self, n: u64) {
        self.expired.inc_by(n);
    }

    /// Count a stored item: a duplicate when every target had it already.
    pub(crate) fn stored(&self, duplicate: bool) {
        let labels = if duplicate { &DUPLICATE } else { &ACCEPTED };
        self.items.get_or_create(labels).inc();
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

    /// Register the item and store metrics in `registry` (names without the `mbx_relay_`
    /// prefix, which the server's registry adds; counters get `_total` from the encoder).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "items",
            "Pushed items by outcome and rejection reason",
            self.items.clone(),
        );
        registry.register(
            "items_delivered",
            "Items handed to their target in pull answers, v2 and v1 (an item pulled again counts again)",
            self.delivered.clone(),
        );
        registry.register(
            "items_acked",
            "Items removed from their target's queue by its ack",
            self.acked.clone(),
        );
        registry.register(
            "items_expired",
            "Items removed unacked past the retention by this process's sweeps",
            self.expired.clone(),
        );
        registry.register(
            "store_write_seconds",
            "Time from submitting a write to the store until it is durable (group commit wait + fsync), measured by the relay",
            self.store_write.clone(),
        );
        registry.register(
            "store_read_seconds",
            "Time of each pull's page read from the store, measured by the relay (waiting for a blocking thread included)",
            self.store_read.clone(),
        );
        registry.register(
            "items_per_store_submit",
            "Items submitted to the store together by one push request (the store may group several submissions into one commit)",
            self.items_per_submit.clone(),
        );
    }
}

/// One histogram from cumulative `(bound, count <= bound)` pairs, bounds divided by `divisor`
/// (a power of ten, so `50000 us / 1e6` is exactly the shortest `0.05`).
struct Buckets<'a> {
    buckets: &'a [(u64, u64)],
    divisor: f64,
    sum: f64,
    count: u64,
}

impl Buckets<'_> {
    fn encode(&self, encoder: &mut DescriptorEncoder, name: &str, help: &str) -> std::fmt::Result {
        let mut per_bucket = Vec::with_capacity(self.buckets.len() + 1);
        let mut below = 0;
        for &(bound, cumulative) in self.buckets {
            per_bucket.push((
                bound as f64 / self.divisor,
                cumulative.saturating_sub(below),
            ));
            below = cumulative;
        }
        per_bucket.push((f64::INFINITY, self.count.saturating_sub(below)));
        let mut m = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
        m.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum,
            self.count,
            &per_bucket,
            None,
        )
    }
}

/// Encode the store's group-commit figures: operations per commit group, fsync latency and
/// failed groups (for a [`prometheus_client::collector::Collector`] reading them per scrape).
///
/// # Errors
/// The writer's.
pub fn encode_commit_stats(
    encoder: &mut DescriptorEncoder,
    s: &relay_store::CommitStats,
) -> std::fmt::Result {
    Buckets {
        buckets: &s.group_size_buckets,
        divisor: 1.0,
        sum: s.ops as f64,
        count: s.groups,
    }
    .encode(
        encoder,
        "commit_group_ops",
        "Operations made durable by one group commit (one fsync)",
    )?;
    Buckets {
        buckets: &s.fsync_us_buckets,
        divisor: 1e6,
        sum: s.fsync_us_sum as f64 / 1e6,
        count: s.fsyncs,
    }
    .encode(
        encoder,
        "fsync_seconds",
        "Duration of each group commit's fsync",
    )?;
    let failed = ConstCounter::new(s.failed_groups);
    failed.encode(encoder.encode_descriptor(
        "commit_groups_failed",
        "Commit groups whose write or fsync failed (answered with errors)",
        None,
        failed.metric_type(),
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(m: &Metrics) -> String {
        let mut r = Registry::with_prefix("mbx_relay");
        m.register(&mut r);
        let mut s = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut s, &r).unwrap();
        s
    }

    #[test]
    fn histograms_reasons_and_item_counters_render_with_no_empty_label() {
        let m = Metrics::default();
        m.store_write.observe(0.003);
        m.rejected(&Reason::Rate);
        m.rejected(&Reason::Rate);
        let s = text(&m);
        assert!(s.contains("mbx_relay_items_total{status=\"rejected\",reason=\"rate\"} 2"));
        assert!(
            s.contains("mbx_relay_items_total{status=\"accepted\"} 0\n"),
            "{s}"
        );
        assert!(
            s.contains("mbx_relay_items_total{status=\"duplicate\"} 0\n"),
            "{s}"
        );
        assert!(!s.contains("reason=\"\""), "no empty reason label: {s}");
        for name in ["delivered", "acked", "expired"] {
            assert!(
                s.contains(&format!("mbx_relay_items_{name}_total 0\n")),
                "{s}"
            );
        }
        assert!(s.contains("mbx_relay_store_write_seconds_bucket{le=\"0.005\"} 1"));
        assert!(s.contains("mbx_relay_store_write_seconds_bucket{le=\"0.002\"} 0"));
        assert!(s.contains("mbx_relay_store_write_seconds_bucket{le=\"0.05\"} 1"));
        assert!(s.contains("mbx_relay_store_write_seconds_count 1"));
    }

    #[test]
    fn reasons_with_free_text_count_under_their_fixed_label() {
        let m = Metrics::default();
        for i in 0..100 {
            m.rejected(&Reason::RecipientHostNotEnrolled(format!("made-up-{i}")));
            m.rejected(&Reason::BadEnvelope(format!("why {i}")));
        }
        let s = text(&m);
        let labels: Vec<&str> = s
            .lines()
            .filter(|l| l.contains("status=\"rejected\""))
            .collect();
        assert_eq!(labels.len(), 2, "{s}");
        assert!(!s.contains("made-up"), "{s}");
    }

    #[derive(Debug)]
    struct Commit(relay_store::CommitStats);

    impl prometheus_client::collector::Collector for Commit {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            encode_commit_stats(&mut e, &self.0)
        }
    }

    #[test]
    fn commit_stats_have_clean_bounds() {
        let stats = relay_store::CommitStats {
            groups: 3,
            ops: 7,
            fsyncs: 3,
            fsync_us_sum: 60_000,
            fsync_us_buckets: vec![(50_000, 2), (100_000, 3)],
            group_size_buckets: vec![(1, 1), (5, 3)],
            ..Default::default()
        };
        let mut r = Registry::with_prefix("mbx_relay");
        r.register_collector(Box::new(Commit(stats)));
        let mut s = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut s, &r).unwrap();
        assert!(
            s.contains("mbx_relay_fsync_seconds_bucket{le=\"0.05\"} 2\n"),
            "{s}"
        );
        assert!(
            s.contains("mbx_relay_fsync_seconds_bucket{le=\"0.1\"} 3\n"),
            "{s}"
        );
        assert!(
            s.contains("mbx_relay_fsync_seconds_bucket{le=\"+Inf\"} 3\n"),
            "{s}"
        );
        assert!(s.contains("mbx_relay_fsync_seconds_sum 0.06\n"), "{s}");
        assert!(
            s.contains("mbx_relay_commit_group_ops_bucket{le=\"5\"} 3\n"),
            "{s}"
        );
        assert!(
            s.contains("mbx_relay_commit_groups_failed_total 0\n"),
            "{s}"
        );
    }
}
