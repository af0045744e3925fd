//! Fencing: the store uses a connection only to the current primary of the newest timeline,
//! checked when the pool makes it and again when an operation takes it from the pool once
//! its last check is older than [`RECHECK_AFTER`] (a primary cut off from its standby and
//! its monitor stays up, and its pooled connections stay open, while the standby is promoted
//! beside it). A node is refused, for reads as for writes, when it is a standby; when its
//! timeline is older than the newest this store has seen (an old primary restarted beside a
//! promoted standby); when it requires a synchronous standby and none has received its
//! whole WAL (an old primary the keeper restarted after its standby left to be promoted, or
//! one cut off from its standby: what only it holds may never reach the standby, and must not
//! be served or built on; and once the standby is promoted, what it lacks is newer). A pull
//! also asks, in its own flight, whether a synchronous standby streams from the node at that
//! moment ([`SERVABLE_NOW`]), and so does a cursor read, closing the second between two checks.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use deadpool_postgres::ObjectId;

use crate::op_error::OpResult;
use crate::stats::{PoolStats, STATS};

/// How long a new connection waits for a synchronous standby to hold the node's WAL up to
/// the moment it connected: a healthy standby does within milliseconds.
const STANDBY_CATCH_UP: Duration = Duration::from_secs(2);
/// Pause between two looks at `pg_stat_replication` while waiting.
const POLL: Duration = Duration::from_millis(25);
/// At most one refusal logged per this long (a failover refuses every attempt for a while).
const LOG_EVERY: Duration = Duration::from_secs(2);
/// A pooled connection whose last check is older than this is checked again before an
/// operation uses it: one or two round trips per connection per second at most.
pub(crate) const RECHECK_AFTER: Duration = Duration::from_secs(1);
/// Most connections whose last check is remembered (the pool holds 16 at a time; older
/// entries belong to connections gone since, and a forgotten one is simply checked again).
const MAX_REMEMBERED: usize = 64;

/// What the node says about itself, in one round trip. The timeline is the one the primary
/// writes WAL on now (the first eight hex digits of its current WAL file's name).
const SELF_SQL: &str = "SELECT pg_is_in_recovery(), \
     CASE WHEN NOT pg_is_in_recovery() THEN \
       ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint END, \
     current_setting('synchronous_standby_names') <> '', \
     CASE WHEN NOT pg_is_in_recovery() THEN pg_current_wal_flush_lsn()::text END, \
     coalesce(host(inet_server_addr()), 'socket') || ':' || current_setting('port')";

/// Standbys the node streams to: how many, how many it hides the state of (a role without
/// `pg_read_all_stats`), and whether a synchronous one has flushed WAL up to `$1`.
const STANDBY_SQL: &str = "SELECT count(*), count(*) FILTER (WHERE sync_state IS NULL), \
     coalesce(bool_or(sync_state IN ('sync', 'quorum') AND flush_lsn >= $1::text::pg_lsn), false) \
     FROM pg_stat_replication";

/// Whether a read's answer may be served, asked in the read's own flight after its snapshot:
/// true unless the node requires a synchronous standby and none streams from it now (one
/// whose role hides the standbys' state counts as streaming, as in [`Fence::check`]). A
/// standby is promoted only once it stopped streaming, and takes writes only after that, so
/// a snapshot taken while it still streamed lacks none of its writes: this closes the second
/// between two checks of a pooled connection, in which an old primary kept running beside
/// its just promoted standby would answer its older state (the likeliest cause of a drill's
/// receiver given a `head_seq` below the cursor it had just acked on the promoted node).
pub(crate) const SERVABLE_NOW: &str = "SELECT current_setting('synchronous_standby_names') = '' \
     OR EXISTS (SELECT 1 FROM pg_stat_replication \
       WHERE sync_state IN ('sync', 'quorum') OR sync_state IS NULL)";

/// [`SERVABLE_NOW`]'s row as the read's verdict: `Err` refuses the read (counted as a
/// refusal), or carries the statement's own error.
pub(crate) fn servable(
    row: std::result::Result<tokio_postgres::Row, tokio_postgres::Error>,
) -> OpResult<()> {
    if row?.get::<_, bool>(0) {
        return Ok(());
    }
    PoolStats::add(&STATS.fenced, 1);
    Err(relay_store::StoreError::Engine(
        "postgres: refusing the node: it requires a synchronous standby and none streams from \
         it now (promoted, or gone)"
            .into(),
    )
    .into())
}

/// The newest timeline this store has connected to; shared by the pool's connection hook.
#[derive(Clone, Default)]
pub(crate) struct Fence(Arc<State>);

#[derive(Default)]
struct State {
    newest_timeline: AtomicU32,
    /// When each pooled connection last passed the check.
    checked: Mutex<HashMap<ObjectId, Instant>>,
    /// Milliseconds since `epoch` of the last refusal logged, plus one (0: none yet).
    last_logged: AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
    /// The node (address, timeline, whether it required a synchronous standby) the last
    /// admitted connection went to: a change is logged, so an operator (and a failed drill)
    /// can tell which node served when.
    last_node: Mutex<Option<(String, u32, bool)>>,
}

impl Fence {
    /// Check the node `client` is connected to; `Err` says why it is refused.
    pub(crate) async fn admit(&self, client: &tokio_postgres::Client) -> Result<(), String> {
        let verdict = self.check(client).await;
        if let Err(why) = &verdict {
            PoolStats::add(&STATS.fenced, 1);
            self.log_refusal(why);
        }
        verdict
    }

    /// Check a pooled connection again before an operation uses it, unless it passed within
    /// [`RECHECK_AFTER`] (`created`: when the pool made it, and checked it). `Err`: the
    /// connection must leave the pool.
    pub(crate) async fn recheck(
        &self,
        id: ObjectId,
        created: Instant,
        client: &tokio_postgres::Client,
    ) -> Result<(), String> {
        let fresh = |t: Instant| t.elapsed() < RECHECK_AFTER;
        let last = self.checked().get(&id).copied();
        if last.map_or(fresh(created), fresh) {
            return Ok(());
        }
        let verdict = self.admit(client).await;
        let mut checked = self.checked();
        match verdict {
            Ok(()) => {
                if checked.len() >= MAX_REMEMBERED {
                    checked.retain(|_, t| t.elapsed() < RECHECK_AFTER);
                }
                checked.insert(id, Instant::now());
            }
            Err(_) => {
                checked.remove(&id);
            }
        }
        verdict
    }

    fn checked(&self) -> MutexGuard<'_, HashMap<ObjectId, Instant>> {
        locked(&self.0.checked)
    }

    async fn check(&self, client: &tokio_postgres::Client) -> Result<(), String> {
        let row = client
            .query_one(SELF_SQL, &[])
            .await
            .map_err(|e| e.to_string())?;
        let standby: bool = row.get(0);
        if standby {
            return Err("the node is a standby (in recovery), not the primary".into());
        }
        let timeline = row
            .get::<_, Option<i64>>(1)
            .and_then(|t| u32::try_from(t).ok())
            .ok_or("the node did not name its timeline")?;
        let newest = self.0.newest_timeline.load(Ordering::SeqCst);
        if timeline < newest {
            return Err(format!(
                "the node is on timeline {timeline}, older than timeline {newest} seen before (a \
                 primary that was replaced)"
            ));
        }
        let wants_standby: bool = row.get(2);
        if wants_standby {
            let flushed: String = row.get::<_, Option<String>>(3).unwrap_or_default();
            self.standby_holds(client, &flushed).await?;
        }
        self.0.newest_timeline.fetch_max(timeline, Ordering::SeqCst);
        let node: String = row.get(4);
        tracing::debug!(node = %node, timeline, wants_standby, "postgres: admitted a connection");
        self.note_node(node, timeline, wants_standby);
        Ok(())
    }

    /// Log the node a connection was admitted to when it is not the one before (once per
    /// change, so at most a few lines per failover).
    fn note_node(&self, node: String, timeline: u32, wants_standby: bool) {
        let mut last = locked(&self.0.last_node);
        if last
            .as_ref()
            .is_some_and(|(n, t, w)| *n == node && *t == timeline && *w == wants_standby)
        {
            return;
        }
        tracing::info!(
            node = %node,
            timeline,
            synchronous_standby_required = wants_standby,
            "postgres: using this node as the primary"
        );
        *last = Some((node, timeline, wants_standby));
    }

    /// Wait (bounded) until a synchronous standby has flushed the node's WAL up to `flushed`.
    /// A role that may not see the standbys' state cannot tell: admitted (docs/scale-out.md
    /// asks for `pg_monitor`).
    async fn standby_holds(
        &self,
        client: &tokio_postgres::Client,
        flushed: &str,
    ) -> Result<(), String> {
        let until = Instant::now() + STANDBY_CATCH_UP;
        loop {
            let row = client
                .query_one(STANDBY_SQL, &[&flushed])
                .await
                .map_err(|e| e.to_string())?;
            let (streams, hidden, holds): (i64, i64, bool) = (row.get(0), row.get(1), row.get(2));
            if holds || (streams > 0 && hidden == streams) {
                tracing::debug!(
                    streams,
                    hidden,
                    holds,
                    flushed,
                    "postgres: a synchronous standby holds the node's WAL"
                );
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(format!(
                    "the node requires a synchronous standby and none of its {streams} \
                     streaming standbys holds its WAL up to {flushed} (an old primary whose \
                     standby left, or one waiting for a standby it does not have)"
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn log_refusal(&self, why: &str) {
        let epoch = *self.0.epoch.get_or_init(Instant::now);
        let now = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.0.last_logged.load(Ordering::Relaxed);
        let every = u64::try_from(LOG_EVERY.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < every {
            return;
        }
        if self
            .0
            .last_logged
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            tracing::warn!(reason = %why, "postgres: refusing a node that is not the current primary");
        }
    }
}

/// The guarded state, even if a thread panicked holding it (what it guards stays consistent:
/// a remembered check time or the last node logged).
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
