//! Key rotation (rebind): the new key takes the old one's name, account and authority; its queue
//! is re-sequenced after the new key's head ([`crate::rules::seq::next`]) and an item the new key
//! holds already is dropped; the old allowlist moves unless the new key has a newer one; the
//! old key is revoked.

use crate::types::{Enrolment, Key32, RebindOutcome, SenderList};

/// Whether a rotation from `old_key` to `new_key` proceeds, given their stored enrolments:
/// `Ok(old live enrolment)`, or the outcome to answer (and nothing written). Rotating a key to
/// itself moves nothing.
pub fn check(
    old_key: &Key32,
    new_key: &Key32,
    old: Option<Enrolment>,
    new: Option<&Enrolment>,
) -> Result<Enrolment, RebindOutcome> {
    let Some(o) = old.filter(|e| e.revoked_at_ms.is_none()) else {
        return Err(RebindOutcome::OldNotEnrolled);
    };
    if new.is_some_and(|n| n.revoked_at_ms.is_some()) {
        return Err(RebindOutcome::NewRevoked);
    }
    if old_key == new_key {
        return Err(RebindOutcome::Moved { moved: 0 });
    }
    Ok(o)
}

/// The new key's enrolment: the old one's name, account and authority, enrolled when the new key
/// first was (or now), live.
pub fn taken_over(
    old: &Enrolment,
    new_key: &Key32,
    new: Option<&Enrolment>,
    now_ms: u64,
) -> Enrolment {
    Enrolment {
        host_pubkey: *new_key,
        enrolled_at_ms: new.map_or(now_ms, |n| n.enrolled_at_ms),
        revoked_at_ms: None,
        ..old.clone()
    }
}

/// The allowlist the new key ends with: its own when at least as new as the old key's, else the
/// old key's (now the new key's), never naming the old key.
pub fn moved_list(
    old_key: &Key32,
    new_key: &Key32,
    from_old: Option<SenderList>,
    at_new: Option<SenderList>,
) -> Option<SenderList> {
    let mut winner = match (from_old, at_new) {
        (Some(o), Some(n)) if n.iat_ms >= o.iat_ms => n,
        (Some(o), _) => SenderList {
            target: *new_key,
            ..o
        },
        (None, n) => n?,
    };
    winner.senders.retain(|s| s != old_key);
    Some(winner)
}

/// Where an old dedup row lands under the new key: a moved item's row follows it to its new seq
/// (`Some(new seq)`, queued: no horizon); a row whose item had left the old queue keeps its seq
/// and its horizon restarts now (never ending earlier than it would have): `restart` is true.
pub fn moved_dedup(old_seq: u64, new_seq: Option<u64>) -> (u64, bool) {
    match new_seq {
        Some(seq) => (seq, false),
        None => (old_seq, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::{enrolment, list};

    fn e(key: u8, revoked: bool) -> Enrolment {
        enrolment(key, Some("acct"), 5, 10, revoked)
    }

    #[test]
    fn only_a_live_old_key_rotates_and_never_to_a_revoked_key() {
        let (o, n) = ([1; 32], [2; 32]);
        assert_eq!(
            check(&o, &n, None, None),
            Err(RebindOutcome::OldNotEnrolled)
        );
        assert_eq!(
            check(&o, &n, Some(e(1, true)), None),
            Err(RebindOutcome::OldNotEnrolled)
        );
        assert_eq!(
            check(&o, &n, Some(e(1, false)), Some(&e(2, true))),
            Err(RebindOutcome::NewRevoked)
        );
        assert_eq!(
            check(&o, &n, Some(e(1, false)), Some(&e(2, false))),
            Ok(e(1, false))
        );
    }

    #[test]
    fn rotating_a_key_to_itself_moves_nothing() {
        let k = [1; 32];
        assert_eq!(
            check(&k, &k, Some(e(1, false)), Some(&e(1, false))),
            Err(RebindOutcome::Moved { moved: 0 })
        );
    }

    #[test]
    fn the_new_key_takes_name_account_and_authority() {
        let n = taken_over(&e(1, false), &[2; 32], None, 99);
        assert_eq!(
            (n.host_pubkey, n.enrolled_at_ms, n.revoked_at_ms),
            ([2; 32], 99, None)
        );
        assert_eq!(
            (n.host_name.as_str(), n.account.as_deref(), n.authority_rank),
            ("alice", Some("acct"), 5)
        );
        let mut known = e(2, false);
        known.enrolled_at_ms = 50;
        assert_eq!(
            taken_over(&e(1, false), &[2; 32], Some(&known), 99).enrolled_at_ms,
            50
        );
    }

    #[test]
    fn the_newer_allowlist_wins_and_never_names_the_old_key() {
        let (o, n) = ([1; 32], [2; 32]);
        let got = moved_list(&o, &n, Some(list(1, &[1, 3], 5)), None).unwrap();
        assert_eq!((got.target, got.senders), (n, vec![[3; 32]]));
        let got = moved_list(&o, &n, Some(list(1, &[3], 5)), Some(list(2, &[4], 5))).unwrap();
        assert_eq!(
            got.senders,
            vec![[4; 32]],
            "equal iat: the new key's own stays"
        );
        let got = moved_list(&o, &n, Some(list(1, &[3], 6)), Some(list(2, &[4], 5))).unwrap();
        assert_eq!(got.senders, vec![[3; 32]]);
        assert_eq!(moved_list(&o, &n, None, None), None);
    }

    #[test]
    fn a_moved_dedup_row_follows_its_item_or_restarts_its_horizon() {
        assert_eq!(moved_dedup(7, Some(70)), (70, false));
        assert_eq!(moved_dedup(7, None), (7, true));
    }
}
