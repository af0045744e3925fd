//! Counters of the group-commit writer (how many operations share one fsync, and how long the
//! fsync takes), so operators can see group commit at work. Lock-free; read at any time.

use std::sync::atomic::{AtomicU64, Ordering};

pub use relay_store::{CommitStats, FSYNC_US_BOUNDS, GROUP_SIZE_BOUNDS};

/// The writer's live counters.
#[derive(Default)]
pub(crate) struct CommitCounters {
    groups: AtomicU64,
    ops: AtomicU64,
    failed_groups: AtomicU64,
    group_size: [AtomicU64; GROUP_SIZE_BOUNDS.len()],
    fsync_us: [AtomicU64; FSYNC_US_BOUNDS.len()],
    fsync_us_sum: AtomicU64,
    fsyncs: AtomicU64,
    rows_scanned: AtomicU64,
}

fn observe(bounds: &[u64], counts: &[AtomicU64], v: u64) {
    for (b, c) in bounds.iter().zip(counts) {
        if v <= *b {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn read(bounds: &[u64], counts: &[AtomicU64]) -> Vec<(u64, u64)> {
    bounds
        .iter()
        .zip(counts)
        .map(|(b, c)| (*b, c.load(Ordering::Relaxed)))
        .collect()
}

impl CommitCounters {
    /// Record one fsync's duration.
    pub(crate) fn fsync(&self, us: u64) {
        observe(&FSYNC_US_BOUNDS, &self.fsync_us, us);
        self.fsync_us_sum.fetch_add(us, Ordering::Relaxed);
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
    }

    /// Record stored rows read by range scans in a group.
    pub(crate) fn scanned(&self, rows: u64) {
        self.rows_scanned.fetch_add(rows, Ordering::Relaxed);
    }

    /// Record a finished group of `ops` operations.
    pub(crate) fn group(&self, ops: u64, ok: bool) {
        if !ok {
            self.failed_groups.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.groups.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(ops, Ordering::Relaxed);
        observe(&GROUP_SIZE_BOUNDS, &self.group_size, ops);
    }

    /// A copy of the counters.
    pub(crate) fn snapshot(&self) -> CommitStats {
        CommitStats {
            groups: self.groups.load(Ordering::Relaxed),
            ops: self.ops.load(Ordering::Relaxed),
            failed_groups: self.failed_groups.load(Ordering::Relaxed),
            group_size_buckets: read(&GROUP_SIZE_BOUNDS, &self.group_size),
            fsync_us_buckets: read(&FSYNC_US_BOUNDS, &self.fsync_us),
            fsync_us_sum: self.fsync_us_sum.load(Ordering::Relaxed),
            fsyncs: self.fsyncs.load(Ordering::Relaxed),
            rows_scanned: self.rows_scanned.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_failures_counted_apart() {
        let c = CommitCounters::default();
        c.group(1, true);
        c.group(7, true);
        c.group(3, false);
        c.fsync(1_500);
        c.scanned(4);
        c.scanned(5);
        let s = c.snapshot();
        assert_eq!(s.rows_scanned, 9);
        assert_eq!((s.groups, s.ops, s.failed_groups), (2, 8, 1));
        assert_eq!(s.group_size_buckets[0], (1, 1));
        assert_eq!(s.group_size_buckets[2], (5, 1));
        assert_eq!(s.group_size_buckets[3], (10, 2));
        assert_eq!(s.fsync_us_buckets[0], (500, 0));
        assert_eq!(s.fsync_us_buckets[2], (2_000, 1));
        assert_eq!((s.fsyncs, s.fsync_us_sum), (1, 1_500));
    }
}
