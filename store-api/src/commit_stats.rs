//! What a backend's commit path reports for `/metrics`: operations per durable commit and
//! commit (fsync) latency, as cumulative buckets.

/// Upper bounds of the group-size buckets (operations per commit group).
pub const GROUP_SIZE_BOUNDS: [u64; 10] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1024];
/// Upper bounds of the fsync-latency buckets, in microseconds.
pub const FSYNC_US_BOUNDS: [u64; 11] = [
    500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000, 100_000, 250_000, 1_000_000, 5_000_000,
];

/// A point-in-time copy of the writer's counters. Buckets are cumulative (Prometheus style):
/// `(bound, observations <= bound)`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommitStats {
    /// Groups that wrote something and were made durable.
    pub groups: u64,
    /// Operations answered by those groups.
    pub ops: u64,
    /// Groups whose commit or fsync failed (their operations were answered with an error).
    pub failed_groups: u64,
    /// Commit-group sizes: (upper bound, groups at most that size), cumulative.
    pub group_size_buckets: Vec<(u64, u64)>,
    /// Fsync durations: (upper bound in µs, fsyncs at most that long), cumulative.
    pub fsync_us_buckets: Vec<(u64, u64)>,
    /// Sum of fsync durations, microseconds.
    pub fsync_us_sum: u64,
    /// Number of fsyncs timed.
    pub fsyncs: u64,
    /// Stored rows the writer's operations read through range scans (ordered reads inside a
    /// commit, e.g. a rotation's look-up of the lists naming a key): what such an operation
    /// costs grows with this, not with the store.
    pub rows_scanned: u64,
}
