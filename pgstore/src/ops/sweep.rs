//! The retention sweep (relay-store's `rules::sweep` and `notice`): expire items past their time,
//! each deletion in the same transaction as its sender's notice (inserted with dedup, quotas and
//! the enrolment check like any insert; only to the sender), then prune dedup rows whose item
//! left its queue (acked, expired, purged, deleted) before the horizon. At most `max` items per
//! call, and at most [`MAX_PER_CALL`].

use std::sync::{Arc, Mutex};

use deadpool_postgres::Transaction;
use relay_store::rules::{self, sweep::Prune};
use relay_store::{ExpiredItem, Key32, NoticeFn, Quotas, SweepReport};

use crate::ctx::Ctx;
use crate::db::{i, key32, u, OpResult};
use crate::ops::insert::insert_batch;
use crate::ops::kind::kind_of;
use crate::ops::leave::leave;
use crate::ops::queue::lock_queues;
use crate::ops::Answer;

/// Most items one call expires, whatever the caller asks: each costs several statements (a round
/// trip each) in one transaction that holds its targets' queue locks against pushes; 1,000 in
/// one call overran the store's 10 s deadline at load 20-30 (growth bench, docs/performance.md).
/// `more` then says to call again, so a sweep run still finishes what is due.
const MAX_PER_CALL: usize = 200;

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

/// The notice builder, callable from the transaction's task (it is `Send`, not `Sync`).
pub(crate) type SharedNotice = Arc<Mutex<NoticeFn>>;

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
    // `rules::sweep::due` in SQL (`expires_at_ms <= now`): the index finds the due rows, and the
    // DELETE below states it again so a row changed since is left alone.
    let due = t
        .query(
            "SELECT target, seq FROM items WHERE expires_at_ms <= $1 \
             ORDER BY expires_at_ms, target, seq LIMIT $2",
            &[&i(a.now_ms), &(a.max + 1)],
        )
        .await?;
    report.more |= rules::sweep::more(due.len(), take(a.max));
    let mut due: Vec<(Key32, i64)> = due
        .iter()
        .take(take(a.max))
        .map(|r| Ok((key32(r.get::<_, &[u8]>(0), "item target")?, r.get(1))))
        .collect::<relay_store::Result<_>>()?;
    // Queue rows locked in key order, as inserts do.
    let targets: Vec<Key32> = due.iter().map(|(t, _)| *t).collect();
    lock_queues(t, &targets).await?;
    due.sort_unstable();
    // One item at a time, each before its own notice: a notice's quota checks see the usage
    // the items before it freed, and not the ones after, whatever the call's size.
    for (target, seq) in due {
        let Some(gone) = leave(t, target, u(seq), Some(a.now_ms), a.now_ms).await? else {
            continue;
        };
        report.expired += 1;
        let expired = ExpiredItem {
            target,
            seq: gone.seq,
            kind: kind_of(gone.kind)?,
            item_id: gone.item_id,
            sender: gone.sender,
            accepted_at_ms: gone.accepted_at_ms,
            expires_at_ms: gone.expires_at_ms,
        };
        if notify(t, &expired, notice, a.quotas, a.retention_ms, a.now_ms).await? {
            report.notices += 1;
        }
    }
    Ok(())
}

/// Queue the notice for an item that left its queue undelivered; true when a new one was
/// queued. Only to the sender, and as any insert (not enrolled, full or told already: none).
pub(crate) async fn notify(
    t: &Transaction<'_>,
    gone: &ExpiredItem,
    notice: &SharedNotice,
    quotas: Quotas,
    retention_ms: u64,
    now_ms: u64,
) -> OpResult<bool> {
    // The rule (sender only; enrolment, quotas and dedup as any insert) is relay-store's.
    let req = {
        let f = notice.lock().unwrap_or_else(|p| p.into_inner());
        relay_store::notice::notice_request(gone, &f, quotas, retention_ms, now_ms)
    };
    let Some(req) = req else { return Ok(false) };
    let outcome = insert_batch(t, std::slice::from_ref(&req), now_ms)
        .await?
        .pop();
    Ok(outcome.is_some_and(|o| relay_store::notice::notice_queued(&o)))
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
        .query_one(
            &t.prepare_cached(PRUNE).await?,
            &[&col(0), &col(1), &item_ids, &keep],
        )
        .await?
        .get(0);
    report.dedup_pruned += u(pruned);
    Ok(())
}
