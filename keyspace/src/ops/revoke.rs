//! An admin's revocation and purge of one key (the decisions are relay-store's
//! `rules::revoke`): revoked as a rotation revokes the old key (enc ads gone, out of other
//! targets' allowlists, its own list gone), its queue deleted with an expiry notice for each
//! envelope's sender, and a relay-log entry, all in one batch.

use std::ops::Bound;

use crate::codec::{self, ItemRecord, UsageScope};
use crate::parts::Part;
use crate::reader::{self, Reader};
use crate::writer::Tx;
use relay_store::rules::revoke::Revocation;
use relay_store::{ExpiredItem, NoticeFn, Result, RevokeOutcome, RevokeRequest};

use super::{lists, oplog, queue, rebind, sweep};

/// Items read per range call while purging (bounds the wire bytes held at once, not the batch).
const PURGE_CHUNK: usize = 256;

/// Revoke (`req.revoke`) and/or purge (`req.purge`) one key in one atomic batch, recorded
/// in the relay log with the admin's uid, the reason and the counts (in the order
/// `rules::revoke::Revocation` gives).
pub(crate) fn revoke_key(
    tx: &mut Tx<'_>,
    req: &RevokeRequest,
    notice: &NoticeFn,
) -> Result<RevokeOutcome> {
    let mut rev = match Revocation::start(req, reader::enrolment(tx, &req.key)?) {
        Ok(rev) => rev,
        Err(outcome) => return Ok(outcome),
    };
    let queued = reader::usage(tx, &UsageScope::Target(req.key))?.items;
    if let Err(outcome) = rev.check_queue(queued) {
        return Ok(outcome);
    }
    if let Some(e) = rev.to_revoke().cloned() {
        let changed = lists::replace_sender(tx, &req.key, None, rebind::MAX_LISTS)?;
        lists::write_list(tx, &req.key, None)?;
        rebind::revoke_key(tx, &e)?;
        rev.revoked(changed);
    }
    let range = rev.purge_range(
        reader::acked_through(tx, &req.key)?,
        reader::head(tx, &req.key)?,
    );
    if let Some((after, through)) = range {
        purge(tx, req, notice, &mut rev, after, through)?;
    }
    let (entry, outcome) = rev.finish();
    oplog::append(tx, entry.kind, &entry.detail)?;
    Ok(outcome)
}

/// Delete the key's queue after `after` through `through`, each envelope's sender told.
fn purge(
    tx: &mut Tx<'_>,
    req: &RevokeRequest,
    notice: &NoticeFn,
    rev: &mut Revocation<'_>,
    after: u64,
    through: u64,
) -> Result<()> {
    let key = &req.key;
    let mut lo = codec::item_key(key, after).to_vec();
    let hi = codec::item_key(key, through);
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
            let bytes = rec.bytes;
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
            let noticed =
                sweep::notify(tx, &gone, notice, req.quotas, req.retention_ms, tx.now_ms)?;
            rev.purged(bytes, noticed);
        }
    }
    Ok(())
}
