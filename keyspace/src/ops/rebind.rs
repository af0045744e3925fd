//! Key rotation (rebind): the new key takes over the old one's name, authority and queue. The
//! rules (who may rotate, the new enrolment, the winning list, where dedup rows land) are
//! relay-store's `rules::rotation`; this file moves the rows.

use std::collections::{HashMap, HashSet};
use std::ops::Bound;

use crate::codec::{self, meta_key, ItemRecord};
use crate::parts::Part;
use crate::reader::{self, Reader};
use crate::writer::Tx;
use relay_store::rules::rotation;
use relay_store::{log_text, DedupRow, Enrolment, Key32, RebindOutcome, Result};

use super::{enrol, lists, oplog, queue, seen};

/// Most sender lists a rotation or revocation rewrites (one list per target; targets are
/// bounded by enrolments).
pub(crate) const MAX_LISTS: usize = 1_000_000;

/// Key rotation: the new key takes the old one's name, account and authority; the old queue
/// is re-sequenced in order after the new key's own items (dedup rows and usage move); the old
/// enc ad goes; its sender list moves; other lists swap old for new; the old key is revoked.
///
/// An old item whose (sender, item_id) the new key already holds a dedup row for is not
/// moved (the new key has that item already) and is dropped with the old queue.
pub(crate) fn rebind(tx: &mut Tx<'_>, old: &Key32, new: &Key32) -> Result<RebindOutcome> {
    let n = reader::enrolment(tx, new)?;
    let o = match rotation::check(old, new, reader::enrolment(tx, old)?, n.as_ref()) {
        Ok(o) => o,
        Err(outcome) => return Ok(outcome),
    };
    enrol::write(
        tx,
        &rotation::taken_over(&o, new, n.as_ref(), tx.now_ms),
        n.as_ref(),
    );
    if n.is_none() {
        enrol::bump(tx, meta_key::LIVE_ENROLMENTS, 1)?;
    }
    let moved = move_queue(tx, old, new)?;
    move_lists(tx, old, new)?;
    revoke_key(tx, &o)?;
    // Last seen moves with the key: the rotation is a sighting of the new key.
    seen::del(tx, old);
    seen::put(tx, new, relay_store::utc_day(tx.now_ms));
    oplog::append(tx, "rotate-key", &log_text::rotated(old, new, moved))?;
    Ok(RebindOutcome::Moved { moved })
}

/// Revoke a live key as a rotation revokes the old one: both enc ads (the v1 pair and the v2
/// ad) go and the enrolment is marked revoked (name index and counters move with it). Shared
/// by rotation and the admin's revocation.
pub(crate) fn revoke_key(tx: &mut Tx<'_>, e: &Enrolment) -> Result<()> {
    tx.del(Part::EncAds, &e.host_pubkey);
    tx.del(Part::EncAds, &codec::enc_ad_v2_key(&e.host_pubkey)); // the v2 ad goes with the v1 pair
    enrol::revoke(tx, e)
}

/// Move the old queue (in order, after the new key's head) and the old dedup rows.
fn move_queue(tx: &mut Tx<'_>, old: &Key32, new: &Key32) -> Result<u64> {
    // Dedup rows of the old key, and which of them the new key already holds.
    let rows = tx.prefix(Part::Dedup, old, usize::MAX)?;
    let mut held = HashSet::new();
    let mut dedup = Vec::with_capacity(rows.len());
    for (k, v) in rows {
        let Some((_, sender, item_id)) = codec::dedup_key_parse(&k) else {
            continue;
        };
        let row: DedupRow = codec::dec(&v, "dedup")?;
        if tx
            .get(Part::Dedup, &codec::dedup_key(new, &sender, &item_id))?
            .is_some()
        {
            held.insert((sender, item_id.clone()));
        }
        dedup.push((k, sender, item_id, row));
    }
    // The queue, in seq order, from the acked cursor.
    let acked = reader::acked_through(tx, old)?;
    let lo = codec::item_key(old, acked);
    let hi = codec::item_key(old, u64::MAX);
    let items = tx.range(
        Part::Items,
        Bound::Excluded(&lo),
        Bound::Included(&hi),
        usize::MAX,
    )?;
    let mut new_seq_of = HashMap::new();
    let mut moved = 0;
    for (k, v) in items {
        let Some((_, seq)) = codec::item_key_parse(&k) else {
            continue;
        };
        let rec: ItemRecord = codec::dec(&v, "item")?;
        queue::take_item(tx, old, seq, &rec)?;
        if held.contains(&(rec.sender, rec.item_id.clone())) {
            continue;
        }
        let s = queue::alloc_seq(tx, new)?;
        new_seq_of.insert(seq, s);
        queue::put_item(tx, new, s, &rec)?;
        moved += 1;
    }
    for (k, sender, item_id, row) in dedup {
        // The old row's prune-index row, if its item was gone, is left for the sweep (which drops
        // index rows without a dedup row): its time is not stored anywhere else.
        tx.del(Part::Dedup, &k);
        if held.contains(&(sender, item_id.clone())) {
            continue;
        }
        let new_key = codec::dedup_key(new, &sender, &item_id);
        let (seq, restart) = rotation::moved_dedup(row.seq, new_seq_of.get(&row.seq).copied());
        queue::put_dedup(tx, &new_key, &DedupRow { seq, ..row });
        if restart {
            queue::start_dedup_horizon(tx, &new_key);
        }
    }
    Ok(moved)
}

/// The old key's allowlist moves to the new key (unless the new key has a newer one); other
/// lists swap old for new. The lists naming the old key are found through `sender_index`, so
/// the cost follows how many lists name it, not how many lists are stored.
fn move_lists(tx: &mut Tx<'_>, old: &Key32, new: &Key32) -> Result<()> {
    lists::replace_sender(tx, old, Some(new), MAX_LISTS)?;
    let from_old = reader::sender_list(tx, old)?;
    let at_new = reader::sender_list(tx, new)?;
    lists::write_list(tx, old, None)?;
    if let Some(list) = rotation::moved_list(old, new, from_old, at_new) {
        lists::write_list(tx, new, Some(&list))?;
    }
    Ok(())
}
