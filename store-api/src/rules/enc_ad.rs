//! Enc ads: a v2 (signed, expiring) ad is stored, replacing the key's previous v2 ad whatever
//! its `iat` (senders guard against rollback themselves), only while its key is live at commit
//! time; the v1 pair is left alone.

use crate::types::Enrolment;

/// Whether a (verified) v2 ad of a key whose stored enrolment is `owner` is stored: the key is
/// enrolled and not revoked now (a rotation may have revoked it after the caller was
/// authenticated).
pub fn stores_v2(owner: Option<&Enrolment>) -> bool {
    owner.is_some_and(|e| e.revoked_at_ms.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::enrolment;

    #[test]
    fn a_v2_ad_is_stored_only_for_a_live_key() {
        assert!(stores_v2(Some(&enrolment(1, None, 1, 10, false))));
        assert!(!stores_v2(Some(&enrolment(1, None, 1, 10, true))));
        assert!(!stores_v2(None));
    }
}
