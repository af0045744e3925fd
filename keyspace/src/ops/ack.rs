//! Ack (delete a target's items through a seq, start their dedup horizons, record
//! acked_through) and single-item delete.

use std::ops::Bound;

use crate::codec::{self, ItemView};
use crate::parts::Part;
use crate::pulled::PulledHints;
use crate::reader;
use crate::writer::Tx;
use relay_store::rules;
use relay_store::{AckOutcome, Key32, Result, StoreError};

use super::queue;

/// Delete one queued item (and its usage and expiry rows); `false` if it was not queued.
pub(crate) fn delete_item(tx: &mut Tx<'_>, target: &Key32, seq: u64) -> Result<bool> {
    match reader::item(tx, target, seq)? {
        Some(rec) => {
            queue::remove_item(tx, target, seq, &rec)?;
            Ok(true)
        }
        None => Ok(false),
    }
}

/// Delete the target's items with seq <= through and record acked_through.
pub(crate) fn ack(
    tx: &mut Tx<'_>,
    target: &Key32,
    through: u64,
    pulled: &PulledHints,
) -> Result<AckOutcome> {
    let head = reader::head(tx, target)?;
    let old = reader::acked_through(tx, target)?;
    let old = match rules::ack::decide(head, old, through) {
        rules::ack::Step::Answer(outcome) => return Ok(outcome),
        rules::ack::Step::Delete { after, .. } => after,
    };
    // IMPORTANT: range from the acked cursor, not the queue start: acked items leave
    // tombstones that would make every ack rescan them.
    let lo = codec::item_key(target, old);
    let hi = codec::item_key(target, through);
    // Items pulled by this process left hints of what is needed here: their records (wire
    // bytes in blob files) are not read back. Only keys still queued are listed, so an item
    // deleted since its pull is not counted.
    let hints = pulled.take_through(target, through);
    let rows = tx.range_with(
        Part::Items,
        Bound::Excluded(&lo),
        Bound::Included(&hi),
        usize::MAX,
        |k| !codec::item_key_parse(k).is_some_and(|(_, seq)| hints.contains_key(&seq)),
    )?;
    // Usage moves once per (sender, account) of the range, not once per item. The rows are
    // read in place: an ack copies no wire bytes, ids or account names.
    let mut freed = rules::ack::Freed::<(Key32, Option<&str>)>::default();
    for (k, v) in &rows {
        let Some((_, seq)) = codec::item_key_parse(k) else {
            continue;
        };
        let (sender, item_id, account, bytes, expires_at_ms) = match (v, hints.get(&seq)) {
            (Some(v), _) => {
                let rec: ItemView = codec::dec(v, "item")?;
                (
                    rec.sender,
                    rec.item_id,
                    rec.account,
                    rec.bytes,
                    rec.expires_at_ms,
                )
            }
            (None, Some(h)) => (
                h.sender,
                &*h.item_id,
                h.account.as_deref(),
                h.bytes,
                h.expires_at_ms,
            ),
            (None, None) => {
                return Err(StoreError::Corrupt(
                    "an item listed without its record or a hint".into(),
                ))
            }
        };
        queue::unlink_item(tx, target, seq, expires_at_ms);
        // The item is delivered: its dedup row's horizon starts now, in this batch (spec §2).
        queue::start_dedup_horizon(tx, &codec::dedup_key(target, &sender, item_id));
        freed.add((sender, account), bytes);
    }
    let outcome = freed.outcome(through, head);
    for ((sender, account), (items, bytes)) in freed.by_scope {
        queue::add_usage(tx, target, &sender, account, items, bytes)?;
    }
    tx.put(Part::Acked, target, codec::enc(&through));
    Ok(outcome)
}
