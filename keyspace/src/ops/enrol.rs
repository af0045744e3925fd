//! Enrolments: by key, a case-insensitive name index of live keys, and O(1) live/revoked counters.
//!
//! The rules are relay-store's (`rules::enrol`); this file reads the stored row, the live counter
//! and the same-name rows, and writes what the rule decided. A first enrolment and a
//! re-enrolment that changes anything are recorded in the relay log.

use crate::codec::{self, meta_key};
use crate::parts::Part;
use crate::reader::{self, meta_u64};
use crate::writer::Tx;
use relay_store::rules::{self, enrol::Step};
use relay_store::{log_text, EnrolOutcome, EnrolRequest, Enrolment, Key32, Result};

use super::{deny, invite, oplog};

/// Enrol (idempotent; never clears a revocation; a weaker authority never overwrites a
/// stronger one's account; name unique only inside a proven account).
pub(crate) fn enrol(tx: &mut Tx<'_>, req: EnrolRequest) -> Result<EnrolOutcome> {
    // In the enrolment's commit: a deny entry added before it refuses it (the writer is one
    // thread, so no entry lands between this read and the write).
    if deny::denied(tx, &req.denied_if, tx.now_ms)? {
        return Ok(EnrolOutcome::Denied);
    }
    let stored = reader::enrolment(tx, &req.host_pubkey)?;
    let max_live = req.max_live;
    let invite = match &req.invite {
        relay_store::InviteClaim::Presented(hash) => invite::get(tx, hash)?,
        _ => None,
    };
    let live = live_count(tx)?;
    let (new, first, redeem) =
        match rules::enrol::decide(stored.as_ref(), req, live, invite.as_ref(), tx.now_ms) {
            Step::Answer(outcome) => return Ok(outcome),
            Step::Write { new, first, redeem } => (new, first, redeem),
        };
    // Without a proven account no name is taken: the index is read only when it can matter.
    if new.account.is_some() {
        let limit = rules::enrol::name_rows_limit(max_live);
        let same_name = reader::live_by_name(tx, &new.host_name, limit)?;
        if rules::enrol::name_taken(&new, &same_name) {
            return Ok(EnrolOutcome::NameTaken);
        }
    }
    write(tx, &new, stored.as_ref());
    if let Some(hash) = &redeem {
        invite::redeem(tx, hash, &new.host_pubkey)?;
    }
    match &stored {
        Some(old) => oplog::append(tx, "re-enrol", &log_text::re_enrolled(old, &new))?,
        None => {
            bump(tx, meta_key::LIVE_ENROLMENTS, 1)?;
            oplog::append(tx, "enrol", &log_text::enrolled(&new))?;
        }
    }
    Ok(Step::outcome_after_write(first))
}

/// Live enrolments (O(1) counter).
pub(crate) fn live_count(r: &impl reader::Reader) -> Result<u64> {
    Ok(meta_u64(r, meta_key::LIVE_ENROLMENTS)?.unwrap_or(0))
}

/// Add `delta` to a meta counter.
pub(crate) fn bump(tx: &mut Tx<'_>, key: &[u8], delta: i64) -> Result<()> {
    let v = meta_u64(tx, key)?.unwrap_or(0).saturating_add_signed(delta);
    tx.put(Part::Meta, key, codec::enc(&v));
    Ok(())
}

/// Write an enrolment and keep its name index row in step (live keys only).
pub(crate) fn write(tx: &mut Tx<'_>, new: &Enrolment, old: Option<&Enrolment>) {
    if let Some(o) = old {
        if o.revoked_at_ms.is_none() {
            tx.del(
                Part::Enrolments,
                &codec::name_key(&o.host_name, &o.host_pubkey),
            );
        }
    }
    if new.revoked_at_ms.is_none() {
        tx.put(
            Part::Enrolments,
            &codec::name_key(&new.host_name, &new.host_pubkey),
            Vec::new(),
        );
    }
    tx.put(
        Part::Enrolments,
        &codec::enrol_key(&new.host_pubkey),
        codec::enc(new),
    );
}

/// Revoke a live enrolment (`rules::revoke::revoked`; counters move with it).
pub(crate) fn revoke(tx: &mut Tx<'_>, e: &Enrolment) -> Result<()> {
    write(tx, &rules::revoke::revoked(e, tx.now_ms), Some(e));
    bump(tx, meta_key::LIVE_ENROLMENTS, -1)?;
    bump(tx, meta_key::REVOKED_ENROLMENTS, 1)
}

/// `Some(account)` when `pk` has a live enrolment: [`live`] decoded in place (the insert rule
/// asks this twice per item).
pub(crate) fn live_account(r: &impl reader::Reader, pk: &Key32) -> Result<Option<Option<String>>> {
    let Some(v) = r.get(Part::Enrolments, &codec::enrol_key(pk))? else {
        return Ok(None);
    };
    let e: codec::EnrolmentView<'_> = codec::dec(&v, "enrolment")?;
    Ok(e.revoked_at_ms
        .is_none()
        .then(|| e.account.map(str::to_owned)))
}

/// The enrolment of `pk` if it is live.
pub(crate) fn live(r: &impl reader::Reader, pk: &Key32) -> Result<Option<Enrolment>> {
    Ok(reader::enrolment(r, pk)?.filter(|e| e.revoked_at_ms.is_none()))
}
