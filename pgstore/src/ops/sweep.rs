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
use crate::ops::queue::{add_queue_usage, add_usage, lock_queue, start_dedup_horizon};
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
    let mut targets: Vec<Key32> = due.iter().map(|(t, _)| *t).collect();
    targets.sort_unstable();
    targets.dedup();
    for target in &targets {
        lock_queue(t, target).await?;
    }
    due.sort_unstable();
    for (target, seq) in due {
        let gone = t
            .query_opt(
                "DELETE FROM items WHERE target = $1 AND seq = $2 AND expires_at_ms <= $3 \
                 RETURNING kind, item_id, sender, account, bytes, accepted_at_ms, expires_at_ms",
                &[&target.as_slice(), &seq, &i(a.now_ms)],
            )
            .await?;
        let Some(r) = gone else { continue };
        let sender = key32(r.get::<_, &[u8]>(2), "item sender")?;
        let account: Option<String> = r.get(3);
        let bytes: i64 = r.get(4);
        start_dedup_horizon(t, &target, &sender, r.get(1), a.now_ms).await?;
        add_queue_usage(t, &target, -1, -bytes).await?;
        add_usage(t, &target, &sender, account.as_deref(), -1, -bytes).await?;
        report.expired += 1;
        let expired = ExpiredItem {
            target,
            seq: u(seq),
            kind: kind_of(r.get(0))?,
            item_id: r.get(1),
            sender,
            accepted_at_ms: u(r.get(5)),
            expires_at_ms: u(r.get(6)),
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
    for r in rows.iter().take(take(a.max)) {
        let (target, sender, item_id): (&[u8], &[u8], &str) = (r.get(0), r.get(1), r.get(2));
        if rules::sweep::prune(r.get::<_, bool>(3)) == Prune::Keep {
            t.execute(
                "UPDATE dedup SET gone_at_ms = NULL \
                 WHERE target = $1 AND sender = $2 AND item_id = $3",
                &[&target, &sender, &item_id],
            )
            .await?;
            continue;
        }
        report.dedup_pruned += t
            .execute(
                "DELETE FROM dedup WHERE target = $1 AND sender = $2 AND item_id = $3",
                &[&target, &sender, &item_id],
            )
            .await?;
    }
    Ok(())
}
