//! An item leaves its queue (the sweep's expiry, an admin's purge, a host's delete) in one
//! statement: the item row goes, its dedup row starts its horizon (`gone_at_ms`), and its
//! queue, sender-share and account usage fall by what it held, clamped at zero; a usage row
//! brought to zero is deleted, as no row is kept for nothing. Stepped one row at a time this
//! took six to eight round trips (the sweep then expired 430 items/s on a 500,000-item store).
//!
//! One item per call: the sweep and the purge queue each item's notice right after it leaves,
//! so a notice's quota checks see the usage the items before it gave back and not the ones
//! after (the rule the fjall store keeps).

use deadpool_postgres::Transaction;
use relay_store::Key32;

use crate::db::{i, key32, u, OpResult};

/// Delete the item ($1 target, $2 seq), when it is due by $3 (always when NULL), start its
/// dedup horizon at $4, and take its usage off its queue, sender-share and account rows
/// (`GREATEST(.., 0)`; a row whose items and bytes would both reach zero is deleted). The
/// queue row is the caller's to lock first, as every writer of a target's items does.
const LEAVE: &str = "WITH gone AS (\
        DELETE FROM items WHERE target = $1 AND seq = $2 \
            AND ($3::bigint IS NULL OR expires_at_ms <= $3) \
        RETURNING target, seq, kind, item_id, sender, account, bytes, accepted_at_ms, \
            expires_at_ms), \
    h AS (UPDATE dedup d SET gone_at_ms = $4 FROM gone g \
        WHERE d.target = g.target AND d.sender = g.sender AND d.item_id = g.item_id), \
    q AS (UPDATE queues q SET items = GREATEST(q.items - 1, 0), \
            bytes = GREATEST(q.bytes - g.bytes, 0) \
        FROM gone g WHERE q.target = g.target), \
    sd AS (DELETE FROM usage_sender us USING gone g \
        WHERE us.target = g.target AND us.sender = g.sender \
            AND us.items <= 1 AND us.bytes <= g.bytes), \
    su AS (UPDATE usage_sender us SET items = GREATEST(us.items - 1, 0), \
            bytes = GREATEST(us.bytes - g.bytes, 0) \
        FROM gone g WHERE us.target = g.target AND us.sender = g.sender \
            AND NOT (us.items <= 1 AND us.bytes <= g.bytes)), \
    ad AS (DELETE FROM usage_account ua USING gone g \
        WHERE ua.account = g.account AND ua.items <= 1 AND ua.bytes <= g.bytes), \
    au AS (UPDATE usage_account ua SET items = GREATEST(ua.items - 1, 0), \
            bytes = GREATEST(ua.bytes - g.bytes, 0) \
        FROM gone g WHERE ua.account = g.account \
            AND NOT (ua.items <= 1 AND ua.bytes <= g.bytes)) \
    SELECT kind, item_id, sender, bytes, accepted_at_ms, expires_at_ms FROM gone";

/// An item that left its queue, as its row held it.
pub(crate) struct Left {
    pub(crate) target: Key32,
    pub(crate) seq: u64,
    pub(crate) kind: i16,
    pub(crate) item_id: String,
    pub(crate) sender: Key32,
    pub(crate) bytes: i64,
    pub(crate) accepted_at_ms: u64,
    pub(crate) expires_at_ms: u64,
}

/// Take the item (`target`, `seq`) out of its queue at `now` (see [`LEAVE`]); with `due_by`,
/// only if it expires by then. `None` when it was not there (or not due).
pub(crate) async fn leave(
    t: &Transaction<'_>,
    target: Key32,
    seq: u64,
    due_by: Option<u64>,
    now: u64,
) -> OpResult<Option<Left>> {
    let row = t
        .query_opt(
            &t.prepare_cached(LEAVE).await?,
            &[&target.as_slice(), &i(seq), &due_by.map(i), &i(now)],
        )
        .await?;
    let Some(r) = row else { return Ok(None) };
    Ok(Some(Left {
        target,
        seq,
        kind: r.get(0),
        item_id: r.get(1),
        sender: key32(r.get::<_, &[u8]>(2), "item sender")?,
        bytes: r.get(3),
        accepted_at_ms: u(r.get(4)),
        expires_at_ms: u(r.get(5)),
    }))
}
