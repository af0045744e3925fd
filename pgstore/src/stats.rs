//! What the connection pool saw, as plain counters of this process (summed over every
//! `PgStore` it opened): the server registers them as metrics (`mbx_relay_pg_*` on
//! `--metrics-listen`), so the backend carries no metrics types. Counted in `db`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The counters; see [`PoolFigures`] for what each counts.
pub(crate) struct PoolStats {
    opened: AtomicBool,
    pub(crate) gets: AtomicU64,
    pub(crate) waits: AtomicU64,
    pub(crate) get_micros: AtomicU64,
    pub(crate) connect_errors: AtomicU64,
    pub(crate) lost: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) reruns: AtomicU64,
    pub(crate) commit_unknown: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) cancels: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) insert_groups: AtomicU64,
    pub(crate) grouped_pushes: AtomicU64,
    pub(crate) insert_flights: AtomicU64,
    pub(crate) insert_flights_missed: AtomicU64,
    pub(crate) listen_lost: AtomicU64,
    pub(crate) watch_dropped: AtomicU64,
    /// A connection was lost or could not be made since the last operation that succeeded:
    /// the next success is a reconnect (a failover, or the server back after a restart).
    pub(crate) degraded: AtomicBool,
}

pub(crate) static STATS: PoolStats = PoolStats {
    opened: AtomicBool::new(false),
    gets: AtomicU64::new(0),
    waits: AtomicU64::new(0),
    get_micros: AtomicU64::new(0),
    connect_errors: AtomicU64::new(0),
    lost: AtomicU64::new(0),
    reconnects: AtomicU64::new(0),
    reruns: AtomicU64::new(0),
    commit_unknown: AtomicU64::new(0),
    timeouts: AtomicU64::new(0),
    cancels: AtomicU64::new(0),
    fenced: AtomicU64::new(0),
    insert_groups: AtomicU64::new(0),
    grouped_pushes: AtomicU64::new(0),
    insert_flights: AtomicU64::new(0),
    insert_flights_missed: AtomicU64::new(0),
    listen_lost: AtomicU64::new(0),
    watch_dropped: AtomicU64::new(0),
    degraded: AtomicBool::new(false),
};

impl PoolStats {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn mark_opened(&self) {
        self.opened.store(true, Ordering::Relaxed);
    }

    /// A connection lost or not made: the pool is degraded until an operation succeeds.
    pub(crate) fn degrade(&self) {
        self.degraded.store(true, Ordering::Relaxed);
    }

    /// An operation succeeded: count a reconnect if the pool was degraded.
    pub(crate) fn succeeded(&self) {
        if self.degraded.load(Ordering::Relaxed) && self.degraded.swap(false, Ordering::Relaxed) {
            Self::add(&self.reconnects, 1);
        }
    }
}

/// A snapshot of the pool's counters since the process started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolFigures {
    /// Connections taken from the pool.
    pub gets: u64,
    /// Takes that found no idle connection and waited (for one returned or newly made).
    pub waits: u64,
    /// Time spent taking connections, microseconds (waits and connects included).
    pub get_micros: u64,
    /// Takes that failed: no server reachable and writable, or the wait timed out.
    pub connect_errors: u64,
    /// Connections discarded as lost (closed, broken, server shutting down, read-only).
    pub lost: u64,
    /// Operations that succeeded after connections were lost or could not be made: the
    /// database (a promoted standby, or the restarted server) answering again.
    pub reconnects: u64,
    /// Operations run again on a new connection after theirs was lost before COMMIT.
    pub reruns: u64,
    /// Connections lost during COMMIT: the outcome unknown, answered as an error (503).
    pub commit_unknown: u64,
    /// Operations abandoned at the operation deadline (answered as an error, 503).
    pub timeouts: u64,
    /// Cancel requests sent for the backends of abandoned operations.
    pub cancels: u64,
    /// New connections refused because the node was not the current primary of the newest
    /// timeline (`fence`).
    pub fenced: u64,
    /// Insert transactions run for grouped pushes (`combine`).
    pub insert_groups: u64,
    /// Pushes answered by those transactions (over `insert_groups`: the mean group size).
    pub grouped_pushes: u64,
    /// Insert transactions sent in one round trip, decided from a guess of their rows
    /// (`ops/insert_flight.rs`); the others (`insert_groups` less these, plus the misses) took
    /// two.
    pub insert_flights: u64,
    /// Of those, the ones whose guess was wrong: nothing written, run again in two round trips.
    pub insert_flights_missed: u64,
    /// Listening connections (`watch`) that ended or could not be made.
    pub listen_lost: u64,
    /// Other processes' notifications dropped because the relay had not taken the earlier
    /// ones (its one-second poll finds what they said).
    pub watch_dropped: u64,
}

/// The pool's counters, or `None` when this process opened no PostgreSQL store.
pub fn pool_figures() -> Option<PoolFigures> {
    let s = &STATS;
    if !s.opened.load(Ordering::Relaxed) {
        return None;
    }
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    Some(PoolFigures {
        gets: get(&s.gets),
        waits: get(&s.waits),
        get_micros: get(&s.get_micros),
        connect_errors: get(&s.connect_errors),
        lost: get(&s.lost),
        reconnects: get(&s.reconnects),
        reruns: get(&s.reruns),
        commit_unknown: get(&s.commit_unknown),
        timeouts: get(&s.timeouts),
        cancels: get(&s.cancels),
        fenced: get(&s.fenced),
        insert_groups: get(&s.insert_groups),
        grouped_pushes: get(&s.grouped_pushes),
        insert_flights: get(&s.insert_flights),
        insert_flights_missed: get(&s.insert_flights_missed),
        listen_lost: get(&s.listen_lost),
        watch_dropped: get(&s.watch_dropped),
    })
}
