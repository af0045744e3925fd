//! The deny list (`relay-tool deny`, spec §8 "Revocation"): entries in `enrolments` keyed by
//! their subject (`0x04 ++ 0x00 ++ host key`, `0x04 ++ 0x01 ++ client id`), added here and read
//! by enrolment. The rules are relay-store's `rules::deny`.

use crate::codec;
use crate::parts::Part;
use crate::reader::Reader;
use crate::writer::Tx;
use relay_store::rules::deny::{admits, expired, kept_until};
use relay_store::{log_text, DenyEntry, DenyOutcome, DenySubject, Result};

use super::oplog;

/// Store `entry` (kept until `kept_until`) after pruning the expired entries, unless `max`
/// unexpired ones are stored.
pub(crate) fn put_deny(tx: &mut Tx<'_>, entry: &DenyEntry, max: u64) -> Result<DenyOutcome> {
    // Every add prunes and refuses at `max`, so at most `max` rows are stored: one bounded scan.
    let limit = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
    let rows = tx.prefix(Part::Enrolments, &codec::DENY_PREFIX, limit)?;
    let mut unexpired = 0u64;
    let mut pruned = Vec::new();
    for (k, v) in &rows {
        let stored: DenyEntry = codec::dec(v, "deny entry")?;
        if expired(&stored, tx.now_ms) {
            pruned.push(k.clone());
        } else if stored.subject != entry.subject {
            unexpired += 1;
        }
    }
    for k in &pruned {
        tx.del(Part::Enrolments, k);
    }
    if !admits(unexpired, max) {
        return Ok(DenyOutcome::Full);
    }
    let kept = DenyEntry {
        expires_ms: kept_until(entry),
        ..entry.clone()
    };
    tx.put(
        Part::Enrolments,
        &codec::deny_key(&kept.subject),
        codec::enc(&kept),
    );
    let pruned = u64::try_from(pruned.len()).unwrap_or(u64::MAX);
    oplog::append(tx, "deny", &log_text::deny_added(&kept, pruned))?;
    Ok(DenyOutcome::Added)
}

/// Whether an unexpired entry at `now_ms` names one of `subjects`.
pub(crate) fn denied(r: &impl Reader, subjects: &[DenySubject], now_ms: u64) -> Result<bool> {
    for s in subjects {
        if let Some(v) = r.get(Part::Enrolments, &codec::deny_key(s))? {
            let e: DenyEntry = codec::dec(&v, "deny entry")?;
            if !expired(&e, now_ms) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}
