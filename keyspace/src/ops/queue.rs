//! Queue rows and everything that moves with them: the item, its expiry row, its usage
//! counters (target, sender x target, the charged account), dedup rows and seq heads.
//! Every insert, ack, delete, sweep and rebind goes through these, so counters can only move
//! in the same operation as the items they count, and a dedup row's horizon starts in the same
//! operation as its item leaves the queue.

use crate::codec::{self, ItemRecord, UsageScope};
use crate::parts::Part;
use crate::reader;
use crate::writer::Tx;
use relay_store::{DedupRow, Key32, Result, Usage};

/// The usage scopes an item is charged to.
pub(crate) fn scopes(target: &Key32, sender: &Key32, account: Option<&str>) -> Vec<UsageScope> {
    let mut s = vec![
        UsageScope::Target(*target),
        UsageScope::Sender {
            target: *target,
            sender: *sender,
        },
    ];
    if let Some(a) = account {
        s.push(UsageScope::Account(a.to_string()));
    }
    s
}

/// Move the counters of every scope of an item by (`items`, `bytes`).
pub(crate) fn add_usage(
    tx: &mut Tx<'_>,
    target: &Key32,
    sender: &Key32,
    account: Option<&str>,
    items: i64,
    bytes: i64,
) -> Result<()> {
    for scope in scopes(target, sender, account) {
        let u = reader::usage(tx, &scope)?;
        let n = Usage {
            items: u.items.saturating_add_signed(items),
            bytes: u.bytes.saturating_add_signed(bytes),
        };
        let key = codec::usage_key(&scope);
        if n == Usage::default() {
            tx.del(Part::Usage, &key);
        } else {
            tx.put(Part::Usage, &key, codec::enc(&n));
        }
    }
    Ok(())
}

fn signed(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Queue an item: the row, its expiry row and its usage.
pub(crate) fn put_item(tx: &mut Tx<'_>, target: &Key32, seq: u64, rec: &ItemRecord) -> Result<()> {
    tx.put(
        Part::Items,
        &codec::item_key(target, seq),
        codec::enc_item(rec),
    );
    tx.put(
        Part::Expiry,
        &codec::expiry_item_key(rec.expires_at_ms, target, seq),
        Vec::new(),
    );
    add_usage(
        tx,
        target,
        &rec.sender,
        rec.account.as_deref(),
        1,
        signed(rec.bytes),
    )
}

/// Dequeue an item for good (expired, purged, deleted): the row, its expiry row and its usage.
/// Its dedup row stays as a tombstone, and its dedup horizon starts now.
pub(crate) fn remove_item(
    tx: &mut Tx<'_>,
    target: &Key32,
    seq: u64,
    rec: &ItemRecord,
) -> Result<()> {
    take_item(tx, target, seq, rec)?;
    start_dedup_horizon(tx, &codec::dedup_key(target, &rec.sender, &rec.item_id));
    Ok(())
}

/// Dequeue an item that lives on elsewhere (a rotation re-queues it under the new key): the row,
/// its expiry row and its usage; its dedup row is the caller's.
pub(crate) fn take_item(tx: &mut Tx<'_>, target: &Key32, seq: u64, rec: &ItemRecord) -> Result<()> {
    unlink_item(tx, target, seq, rec.expires_at_ms);
    add_usage(
        tx,
        target,
        &rec.sender,
        rec.account.as_deref(),
        -1,
        -signed(rec.bytes),
    )
}

/// Delete an item's row and expiry row (found by its `expires_at_ms`) only; the caller moves its
/// usage (ack does it once per sender for a whole range).
pub(crate) fn unlink_item(tx: &mut Tx<'_>, target: &Key32, seq: u64, expires_at_ms: u64) {
    tx.del(Part::Items, &codec::item_key(target, seq));
    tx.del(
        Part::Expiry,
        &codec::expiry_item_key(expires_at_ms, target, seq),
    );
}

/// Allocate the next seq of a target: `max(head + 1, now_ms)`, never reused.
pub(crate) fn alloc_seq(tx: &mut Tx<'_>, target: &Key32) -> Result<u64> {
    let head = reader::head(tx, target)?;
    let seq = relay_store::rules::seq::next(head, tx.now_ms);
    tx.put(Part::Seqs, target, codec::enc(&seq));
    Ok(seq)
}

/// Write the dedup row of a queued item. It gets no prune-index row: while its item is queued
/// the row is never pruned (spec §2: the horizon counts from ack or expiry).
pub(crate) fn put_dedup(tx: &mut Tx<'_>, dkey: &[u8], row: &DedupRow) {
    tx.put(Part::Dedup, dkey, codec::enc(row));
}

/// The item of dedup row `dkey` left its queue now (acked, expired, purged, deleted): index the
/// row for pruning once now is past the dedup horizon (retention + 7 days, the sweep's cutoff).
/// Called in the same batch as the item's deletion.
pub(crate) fn start_dedup_horizon(tx: &mut Tx<'_>, dkey: &[u8]) {
    let gone_at = tx.now_ms;
    tx.put(
        Part::DedupExpiry,
        &codec::expiry_dedup_key(gone_at, dkey),
        Vec::new(),
    );
}
