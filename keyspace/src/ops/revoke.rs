//! An admin's revocation and purge of one key: revoked as a rotation revokes the old key (enc
//! ads gone, out of other targets' allowlists, its own list gone), its queue deleted with an
//! expiry notice for each envelope's sender, and a relay-log entry, all in one batch.

use std::ops::Bound;

use crate::api::{
    log_text, ExpiredItem, NoticeFn, Pending, Result, RevokeOutcome, RevokeReport, RevokeRequest,
    MAX_PURGE_ITEMS,
};
use crate::codec::{self, ItemRecord, UsageScope};
use crate::parts::Part;
use crate::reader::{self, Reader};
use crate::writer::Tx;
use crate::Store;

use super::{lists, oplog, queue, rebind, sweep};

/// Items read per range call while purging (bounds the wire bytes held at once, not the batch).
const PURGE_CHUNK: usize = 256;

impl Store {
    /// Revoke (`req.revoke`) and/or purge (`req.purge`) one key in one atomic batch, recorded
    /// in the relay log with the admin's uid, the reason and the counts. Revoking runs first,
    /// so a notice for mail the key sent itself is not queued for a revoked key. Dedup rows stay
    /// as tombstones (a retried push of a purged item stays a duplicate).
    pub fn revoke_key(&self, req: RevokeRequest, notice: NoticeFn) -> Pending<RevokeOutcome> {
        self.submit(move |tx| revoke_key(tx, &req, &notice))
    }
}

fn revoke_key(tx: &mut Tx<'_>, req: &RevokeRequest, notice: &NoticeFn) -> Result<RevokeOutcome> {
    let Some(e) = reader::enrolment(tx, &req.key)? else {
        return Ok(RevokeOutcome::UnknownKey);
    };
    let mut report = RevokeReport {
        already_revoked: e.revoked_at_ms.is_some(),
        ..RevokeReport::default()
    };
    if req.purge {
        let queued = reader::usage(tx, &UsageScope::Target(req.key))?.items;
        if queued > MAX_PURGE_ITEMS {
            return Ok(RevokeOutcome::QueueTooLarge { items: queued });
        }
    }
    if req.revoke && e.revoked_at_ms.is_none() {
        report.lists_changed = lists::replace_sender(tx, &req.key, None, rebind::MAX_LISTS)?;
        lists::write_list(tx, &req.key, None)?;
        rebind::revoke_key(tx, &e)?;
        report.revoked = true;
    }
    if req.purge {
        purge(tx, req, notice, &mut report)?;
    }
    oplog::append(
        tx,
        if req.revoke { "revoke" } else { "purge" },
        &log_text::revoked(req, &report),
    )?;
    Ok(RevokeOutcome::Done(report))
}

/// Delete the key's queue from its acked cursor to its head, each envelope's sender told.
fn purge(
    tx: &mut Tx<'_>,
    req: &RevokeRequest,
    notice: &NoticeFn,
    report: &mut RevokeReport,
) -> Result<()> {
    let key = &req.key;
    let mut lo = codec::item_key(key, reader::acked_through(tx, key)?).to_vec();
    // Up to the head as it is now: a notice for mail the key sent itself (purge without
    // revoke) is queued behind it and stays.
    let hi = codec::item_key(key, reader::head(tx, key)?);
    // Bounded: the queue was counted against MAX_PURGE_ITEMS, and every round removes what it read.
    loop {
        let rows = tx.range(
            Part::Items,
            Bound::Excluded(&lo),
            Bound::Included(&hi),
            PURGE_CHUNK,
        )?;
        let Some((last, _)) = rows.last() else {
            break;
        };
        lo = last.to_vec();
        for (k, v) in rows {
            let Some((_, seq)) = codec::item_key_parse(&k) else {
                continue;
            };
            let rec: ItemRecord = codec::dec(&v, "item")?;
            queue::remove_item(tx, key, seq, &rec)?;
            report.purged_items += 1;
            report.purged_bytes += rec.bytes;
            // Crash window for tests: part of the queue is staged for deletion, nothing is
            // committed.
            relay_os::failpoint::hit("revoke-mid-purge");
            let gone = ExpiredItem {
                target: *key,
                seq,
                kind: rec.kind,
                item_id: rec.item_id,
                sender: rec.sender,
                accepted_at_ms: rec.accepted_at_ms,
                expires_at_ms: rec.expires_at_ms,
            };
            if sweep::notify(tx, &gone, notice, req.quotas, req.retention_ms, tx.now_ms)? {
                report.notices += 1;
            }
        }
    }
    Ok(())
}
