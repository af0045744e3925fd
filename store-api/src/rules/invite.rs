//! Enrolment invites (`relay-tool invite`, the invite authority): an invite admits one new key
//! until it expires; issuing one first prunes the expired ones, and at most `max` unexpired
//! invites are stored.

use crate::types::Invite;

/// Whether `invite` has expired at `now_ms` (its last valid millisecond is `expires_ms - 1`).
pub fn expired(invite: &Invite, now_ms: u64) -> bool {
    now_ms >= invite.expires_ms
}

/// Whether the stored row of a presented invite may be redeemed at `now_ms`: stored (not
/// redeemed already, never made up) and not expired.
pub fn redeemable(invite: Option<&Invite>, now_ms: u64) -> bool {
    invite.is_some_and(|i| !expired(i, now_ms))
}

/// Whether another invite may be stored beside `unexpired` unexpired ones.
pub fn admits(unexpired: u64, max: u64) -> bool {
    unexpired < max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn invite(expires_ms: u64) -> Invite {
        Invite {
            hash: [1; 32],
            created_ms: 0,
            expires_ms,
            note: String::new(),
        }
    }

    #[test]
    fn an_invite_is_redeemable_until_its_expiry_and_only_when_stored() {
        assert!(redeemable(Some(&invite(10)), 9));
        assert!(!redeemable(Some(&invite(10)), 10));
        assert!(!redeemable(None, 0));
        assert!(expired(&invite(10), 10) && !expired(&invite(10), 9));
    }

    #[test]
    fn the_cap_is_inclusive_of_max_stored_invites() {
        assert!(admits(9, 10));
        assert!(!admits(10, 10));
        assert!(!admits(0, 0));
    }
}
