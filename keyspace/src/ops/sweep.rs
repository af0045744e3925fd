//! The retention sweep (its decisions are relay-store's `rules::sweep`, the notice rule
//! `relay_store::notice`): expire items through the `expiry` index (each deletion in the same
//! operation as the sender's notice), then prune dedup rows whose item left its queue (acked,
//! expired, purged) before the horizon.
//!
//! A run (calls until `more` is false) is linear in the rows it touches: each call resumes after
//! the last row the previous one handled (`crate::sweep_from::SweepFrom`), not at the start of the index, where
//! the deletions of the run lie as tombstones until compaction (re-reading them made a run of
//! N rows cost N² / max: 48 % of the relay's CPU late in a 200,000-item sweep, growth bench).

use std::ops::Bound;

use fjall::Slice;

use crate::codec::{self, EXPIRY_DEDUP, EXPIRY_ITEM};
use crate::parts::Part;
use crate::reader::{self, Reader};
use crate::writer::Tx;
use relay_store::rules::{self, sweep::Prune};
use relay_store::{ExpiredItem, NoticeFn, Quotas, Result, SweepReport};

use super::{insert, queue};
use crate::sweep_from::{from, SweepFrom};

/// Parameters of one sweep call.
pub(crate) struct SweepArgs {
    pub(crate) now_ms: u64,
    pub(crate) dedup_horizon_ms: u64,
    pub(crate) quotas: Quotas,
    pub(crate) retention_ms: u64,
    /// Items at most (at least one).
    pub(crate) max: usize,
}

/// Expire items with expires_at <= now (through the `expiry` index), each deletion in the
/// same batch as its notice (built by `notice`, inserted with dedup and quotas, skipped when
/// the sender is not enrolled, its queue is full or it was already told), and prune dedup rows
/// whose item left its queue (acked, expired, purged, deleted) before `dedup_horizon_ms`; a
/// queued item's dedup row is never pruned. At most `max` items per call (`more` says whether
/// to call again).
pub(crate) fn sweep(tx: &mut Tx<'_>, a: &SweepArgs, notice: &NoticeFn) -> Result<SweepReport> {
    let mut report = SweepReport::default();
    let mut at = tx.sweep_from.clone();
    expire(tx, a, notice, &mut report, &mut at.expiry)?;
    prune_dedup(tx, a, &mut report, &mut at.dedup)?;
    // Set last, so a call that fails leaves the position alone; the run's end resets it.
    tx.sweep_from = if report.more {
        at
    } else {
        SweepFrom::default()
    };
    // Not in the relay log: expiring mail is mail, and one entry per sweep would let ordinary
    // traffic push the audit entries out through the log's count cap.
    Ok(report)
}

fn expire(
    tx: &mut Tx<'_>,
    a: &SweepArgs,
    notice: &NoticeFn,
    report: &mut SweepReport,
    last: &mut Option<Slice>,
) -> Result<()> {
    let lo = [EXPIRY_ITEM];
    // Every row with an expiry time `rules::sweep::due` at now: through now, inclusive.
    let mut hi = vec![EXPIRY_ITEM];
    hi.extend_from_slice(&a.now_ms.to_be_bytes());
    hi.extend_from_slice(&[0xff; 40]);
    // One extra row tells whether to call again.
    let rows = tx.range(
        Part::Expiry,
        from(last, &lo),
        Bound::Included(&hi[..]),
        a.max + 1,
    )?;
    report.more |= rules::sweep::more(rows.len(), a.max);
    for (k, _) in rows.into_iter().take(a.max) {
        *last = Some(k.clone());
        let Some((_, target, seq)) = codec::expiry_item_parse(&k) else {
            tx.del(Part::Expiry, &k);
            continue;
        };
        let Some(rec) = reader::item(tx, &target, seq)? else {
            tx.del(Part::Expiry, &k); // stale index row
            continue;
        };
        queue::remove_item(tx, &target, seq, &rec)?;
        report.expired += 1;
        let expired = ExpiredItem {
            target,
            seq,
            kind: rec.kind,
            item_id: rec.item_id,
            sender: rec.sender,
            accepted_at_ms: rec.accepted_at_ms,
            expires_at_ms: rec.expires_at_ms,
        };
        if notify(tx, &expired, notice, a.quotas, a.retention_ms, a.now_ms)? {
            report.notices += 1;
        }
    }
    Ok(())
}

/// Queue the expiry notice `notice` builds for an item that left its queue undelivered (the
/// sweep's expiries and an admin's purge). True when a new notice was queued.
pub(crate) fn notify(
    tx: &mut Tx<'_>,
    gone: &ExpiredItem,
    notice: &NoticeFn,
    quotas: Quotas,
    retention_ms: u64,
    now_ms: u64,
) -> Result<bool> {
    // The rule (sender only; enrolment, quotas and dedup as any insert) is relay-store's.
    let Some(req) = relay_store::notice::notice_request(gone, notice, quotas, retention_ms, now_ms)
    else {
        return Ok(false);
    };
    Ok(relay_store::notice::notice_queued(&insert::insert_one(
        tx, req,
    )?))
}

/// Prune dedup rows whose item left its queue before `dedup_horizon_ms` (the index holds a row
/// only from the item's ack, expiry, purge or deletion on).
fn prune_dedup(
    tx: &mut Tx<'_>,
    a: &SweepArgs,
    report: &mut SweepReport,
    last: &mut Option<Slice>,
) -> Result<()> {
    let lo = [EXPIRY_DEDUP];
    // The rows `rules::sweep::past_horizon`: gone before the horizon, excluded.
    let mut hi = vec![EXPIRY_DEDUP];
    hi.extend_from_slice(&a.dedup_horizon_ms.to_be_bytes());
    let rows = tx.range(
        Part::DedupExpiry,
        from(last, &lo),
        Bound::Excluded(&hi[..]),
        a.max + 1,
    )?;
    report.more |= rules::sweep::more(rows.len(), a.max);
    for (k, _) in rows.into_iter().take(a.max) {
        *last = Some(k.clone());
        tx.del(Part::DedupExpiry, &k);
        let Some((_, dkey)) = codec::expiry_dedup_parse(&k) else {
            continue;
        };
        // A stale index row (a rotation moved the dedup row) goes alone.
        let Some(row) = reader::dedup_row(tx, dkey)? else {
            continue;
        };
        let Some((target, _, _)) = codec::dedup_key_parse(dkey) else {
            continue;
        };
        // A queued item's row stays (`rules::sweep::prune`); its index row goes: the item's ack
        // or expiry starts its horizon again.
        let queued = tx
            .get(Part::Items, &codec::item_key(&target, row.seq))?
            .is_some();
        if rules::sweep::prune(queued) == Prune::Delete {
            tx.del(Part::Dedup, dkey);
            report.dedup_pruned += 1;
        }
    }
    Ok(())
}
