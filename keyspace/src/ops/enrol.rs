//! Enrolments: by key, a case-insensitive name index of live keys, and O(1) live/revoked counters.
//!
//! Rules (docs/protocol.md "Enrolment"): re-enrolling is idempotent; a revoked key stays revoked; a
//! weaker authority never overwrites what a stronger one recorded; a name is unique only inside
//! a proven account; at most `max_live` live enrolments. A first enrolment and a re-enrolment
//! that changes anything are recorded in the relay log.

use crate::api::{log_text, EnrolOutcome, EnrolRequest, Enrolment, Key32, Pending, Result};
use crate::codec::{self, meta_key};
use crate::parts::Part;
use crate::reader::{self, meta_u64};
use crate::writer::Tx;
use crate::Store;

use super::oplog;

impl Store {
    /// Enrol (idempotent; never clears a revocation; a weaker authority never overwrites a
    /// stronger one's account; name unique only inside a proven account).
    pub fn enrol(&self, req: EnrolRequest) -> Pending<EnrolOutcome> {
        self.submit(move |tx| enrol(tx, req))
    }
}

fn enrol(tx: &mut Tx<'_>, req: EnrolRequest) -> Result<EnrolOutcome> {
    let pk = req.host_pubkey;
    match reader::enrolment(tx, &pk)? {
        Some(e) if e.revoked_at_ms.is_some() => Ok(EnrolOutcome::Revoked),
        Some(e) => {
            if req.authority_rank < e.authority_rank {
                return Ok(EnrolOutcome::AlreadyEnrolled);
            }
            let updated = Enrolment {
                host_name: req.host_name,
                owner_fp: req.owner_fp,
                account: req.account,
                authorized_by: req.authorized_by,
                authority_rank: req.authority_rank,
                ..e.clone()
            };
            if updated == e {
                return Ok(EnrolOutcome::AlreadyEnrolled);
            }
            if name_taken(tx, &updated, req.max_live)? {
                return Ok(EnrolOutcome::NameTaken);
            }
            write(tx, &updated, Some(&e));
            oplog::append(tx, "re-enrol", &log_text::re_enrolled(&e, &updated))?;
            Ok(EnrolOutcome::AlreadyEnrolled)
        }
        None => {
            if live_count(tx)? >= req.max_live {
                return Ok(EnrolOutcome::Capacity);
            }
            let e = Enrolment {
                host_pubkey: pk,
                host_name: req.host_name,
                owner_fp: req.owner_fp,
                account: req.account,
                authorized_by: req.authorized_by,
                authority_rank: req.authority_rank,
                enrolled_at_ms: tx.now_ms,
                revoked_at_ms: None,
            };
            if name_taken(tx, &e, req.max_live)? {
                return Ok(EnrolOutcome::NameTaken);
            }
            write(tx, &e, None);
            bump(tx, meta_key::LIVE_ENROLMENTS, 1)?;
            oplog::append(tx, "enrol", &log_text::enrolled(&e))?;
            Ok(EnrolOutcome::Enrolled)
        }
    }
}

/// Another live key carries `e`'s name inside `e`'s proven account.
fn name_taken(tx: &Tx<'_>, e: &Enrolment, max_live: u64) -> Result<bool> {
    let Some(account) = &e.account else {
        return Ok(false);
    };
    let limit = usize::try_from(max_live.saturating_add(1)).unwrap_or(usize::MAX);
    Ok(reader::live_by_name(tx, &e.host_name, limit)?
        .iter()
        .any(|o| o.host_pubkey != e.host_pubkey && o.account.as_deref() == Some(account)))
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

/// Revoke a live enrolment (counters move with it).
pub(crate) fn revoke(tx: &mut Tx<'_>, e: &Enrolment) -> Result<()> {
    let revoked = Enrolment {
        revoked_at_ms: Some(tx.now_ms),
        ..e.clone()
    };
    write(tx, &revoked, Some(e));
    bump(tx, meta_key::LIVE_ENROLMENTS, -1)?;
    bump(tx, meta_key::REVOKED_ENROLMENTS, 1)
}

/// The enrolment of `pk` if it is live.
pub(crate) fn live(r: &impl reader::Reader, pk: &Key32) -> Result<Option<Enrolment>> {
    Ok(reader::enrolment(r, pk)?.filter(|e| e.revoked_at_ms.is_none()))
}
