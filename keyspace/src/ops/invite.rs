//! Invites (`relay-tool invite`): stored by the hash of their code in `enrolments`
//! (`0x03 ++ sha256`), issued here and redeemed by a new enrolment (`ops::enrol`). The rules are
//! relay-store's `rules::invite`.

use crate::codec;
use crate::parts::Part;
use crate::reader::Reader;
use crate::writer::Tx;
use relay_store::rules::invite::{admits, expired};
use relay_store::{log_text, Invite, InviteHash, InviteOutcome, Result};

use super::oplog;

/// Store an invite after pruning the expired ones, unless `max` unexpired ones are stored.
pub(crate) fn put_invite(tx: &mut Tx<'_>, invite: &Invite, max: u64) -> Result<InviteOutcome> {
    // Every issue prunes and refuses at `max`, so at most `max` rows are stored: one bounded scan.
    let limit = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
    let rows = tx.prefix(Part::Enrolments, &codec::INVITE_PREFIX, limit)?;
    let mut unexpired = 0u64;
    let mut pruned = Vec::new();
    for (k, v) in &rows {
        let stored: Invite = codec::dec(v, "invite")?;
        if expired(&stored, tx.now_ms) {
            pruned.push(k.clone());
        } else if stored.hash != invite.hash {
            unexpired += 1;
        }
    }
    for k in &pruned {
        tx.del(Part::Enrolments, k);
    }
    if !admits(unexpired, max) {
        return Ok(InviteOutcome::Full);
    }
    tx.put(
        Part::Enrolments,
        &codec::invite_key(&invite.hash),
        codec::enc(invite),
    );
    let pruned = u64::try_from(pruned.len()).unwrap_or(u64::MAX);
    oplog::append(tx, "invite", &log_text::invite_issued(invite, pruned))?;
    Ok(InviteOutcome::Issued)
}

/// The stored invite of `hash`, if any.
pub(crate) fn get(r: &impl Reader, hash: &InviteHash) -> Result<Option<Invite>> {
    r.get(Part::Enrolments, &codec::invite_key(hash))?
        .map(|v| codec::dec(&v, "invite"))
        .transpose()
}

/// Redeem (delete) the invite of `hash` for the new enrolment of `key`, logged.
pub(crate) fn redeem(tx: &mut Tx<'_>, hash: &InviteHash, key: &relay_store::Key32) -> Result<()> {
    tx.del(Part::Enrolments, &codec::invite_key(hash));
    oplog::append(tx, "invite-redeemed", &log_text::invite_redeemed(hash, key))
}
