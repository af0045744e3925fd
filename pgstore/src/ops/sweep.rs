//! The retention sweep (relay-store's `rules::sweep` and `notice`): expire items past their time,
//! each deletion in the same transaction as its sender's notice (inserted with dedup, quotas and
//! the enrolment check like any insert; only to the sender), in runs of items that leave
//! together (`ops/leave.rs`), then prune dedup rows whose item left its queue (acked, expired,
//! purged, deleted) before the horizon, in one statement. At most `max` items per call, at most
//! [`MAX_PER_CALL`] and [`MAX_RUNS_PER_CALL`] runs.

use std::sync::{Arc, Mutex};

use deadpool_postgres::Transaction;
use relay_store::rules::{self, sweep::Prune};
use relay_store::{Key32, NoticeFn, Quotas, SweepReport};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use crate::db::{i, u, OpResult};
use crate::ops::leave::{due_from, leave_in_runs, select_due, Due, SharedNotice, Telling};
use crate::ops::queue::lock_queues;
use crate::ops::Answer;

/// Most items one call expires, whatever the caller asks (the relay asks 1,000).
const MAX_PER_CALL: usize = 1_000;

/// Most runs (`leave::runs`) one call takes out: each is a few statements (a round trip each) in one
/// transaction that holds its targets' queue locks against pushes, so a call of many short runs
/// is bounded as the 200 items one by one (six to eight statements each) were bounded before;
/// 1,000 items one by one overran the store's 10 s deadline at load 20-30 (growth bench,
/// docs/performance.md). `more` then says to call again, so a sweep run still finishes.
const MAX_RUNS_PER_CALL: usize = 100;

/// Parameters of one sweep call.
#[derive(Clone, Copy)]
struct SweepArgs {
    now_ms: u64,
    dedup_horizon_ms: u64,
    quotas: Quotas,
    retention_ms: u64,
    max: i64,
}

/// Rows one step handles (`max` as a count).
fn take(max: i64) -> usize {
    usize::try_from(max).unwrap_or(usize::MAX)
}

/// One sweep call (see the module doc); `more` says whether to call again.
pub(crate) fn sweep(
    ctx: &Ctx,
    now_ms: u64,
    dedup_horizon_ms: u64,
    quotas: Quotas,
    retention_ms: u64,
    max: usize,
    notice: NoticeFn,
) -> Answer<SweepReport> {
    let a = SweepArgs {
        now_ms,
        dedup_horizon_ms,
        quotas,
        retention_ms,
        max: i64::try_from(max.clamp(1, MAX_PER_CALL)).unwrap_or(1),
    };
    let notice: SharedNotice = Arc::new(Mutex::new(notice));
    ctx.write(notice, move |t, notice, _| {
        Box::pin(async move {
            let mut report = SweepReport::default();
            expire(t, a, notice, &mut report).await?;
            prune_dedup(t, a, &mut report).await?;
            Ok(report)
        })
    })
}

async fn expire(
    t: &Transaction<'_>,
    a: SweepArgs,
    notice: &SharedNotice,
    report: &mut SweepReport,
) -> OpResult<()> {
    // `rules::sweep::due` in SQL (`expires_at_ms <= now`): the index finds the due rows, and
    // LEAVE states it again so a row changed since is left alone.
    let due = t
        .query_cached(
            select_due!(
                "WHERE it.expires_at_ms <= $1 ORDER BY it.expires_at_ms, it.target, it.seq \
                 LIMIT $2"
            ),
            &[&i(a.now_ms), &(a.max + 1)],
        )
        .await?;
    report.more |= rules::sweep::more(due.len(), take(a.max));
    let mut due: Vec<Due> = due
        .iter()
        .take(take(a.max))
        .map(due_from)
        .collect::<relay_store::Result<_>>()?;
    // Queue rows locked in key order, as inserts do; the items leave in that order.
    let targets: Vec<Key32> = due.iter().map(|d| d.target).collect();
    lock_queues(t, &targets).await?;
    due.sort_unstable_by_key(|d| (d.target, d.seq));
    let tell = Telling {
        notice,
        quotas: a.quotas,
        retention_ms: a.retention_ms,
        now: a.now_ms,
    };
    let (left, runs_left) =
        leave_in_runs(t, &due, Some(a.now_ms), MAX_RUNS_PER_CALL, &tell).await?;
    report.more |= runs_left;
    report.expired += left.len() as u64;
    report.notices += left.iter().filter(|(_, told)| *told).count() as u64;
    Ok(())
}

/// The pruning decided for dedup rows ($1 target, $2 sender, $3 item id): a row kept
/// ($4 true: its item is queued again) has its horizon cleared, the others are deleted; one
/// statement for all. Answers how many were deleted.
const PRUNE: &str = "WITH k AS (\
        SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::bool[]) \
            AS k(target, sender, item_id, keep)), \
    kept AS (UPDATE dedup d SET gone_at_ms = NULL FROM k \
        WHERE k.keep AND d.target = k.target AND d.sender = k.sender AND d.item_id = k.item_id), \
    gone AS (DELETE FROM dedup d USING k \
        WHERE NOT k.keep AND d.target = k.target AND d.sender = k.sender \
            AND d.item_id = k.item_id RETURNING 1) \
    SELECT count(*) FROM gone";

async fn prune_dedup(t: &Transaction<'_>, a: SweepArgs, report: &mut SweepReport) -> OpResult<()> {
    // Rows whose item left its queue before the horizon (`rules::sweep::past_horizon` in SQL,
    // `gone_at_ms < horizon`: the index finds them). What becomes of each is
    // `rules::sweep::prune`: a queued item's row (a rotation re-queued its item) is kept with its
    // horizon cleared, to start again when the item leaves.
    let rows = t
        .query(
            "SELECT d.target, d.sender, d.item_id, EXISTS \
                 (SELECT 1 FROM items it WHERE it.target = d.target AND it.seq = d.seq) \
             FROM dedup d WHERE d.gone_at_ms IS NOT NULL AND d.gone_at_ms < $1 \
             ORDER BY d.gone_at_ms LIMIT $2 FOR UPDATE OF d SKIP LOCKED",
            &[&i(a.dedup_horizon_ms), &(a.max + 1)],
        )
        .await?;
    report.more |= rules::sweep::more(rows.len(), take(a.max));
    let rows = &rows[..rows.len().min(take(a.max))];
    let keep: Vec<bool> = rows
        .iter()
        .map(|r| rules::sweep::prune(r.get::<_, bool>(3)) == Prune::Keep)
        .collect();
    let col = |n: usize| -> Vec<&[u8]> { rows.iter().map(|r| r.get::<_, &[u8]>(n)).collect() };
    let item_ids: Vec<&str> = rows.iter().map(|r| r.get::<_, &str>(2)).collect();
    let pruned: i64 = t
        .query_one_cached(PRUNE, &[&col(0), &col(1), &item_ids, &keep])
        .await?
        .get(0);
    report.dedup_pruned += u(pruned);
    Ok(())
}
