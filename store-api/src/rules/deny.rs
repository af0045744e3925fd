//! The deny list (spec §8 "Revocation"): an entry refuses its subject until it expires; it is
//! kept at least [`MIN_DENY_MS`] (the longest account-token lifetime, so every token issued
//! before the revocation has expired when the entry goes); adding one first prunes the expired
//! ones, and at most `max` unexpired entries are stored.

use crate::types::DenyEntry;

/// The shortest life of an entry: the longest token lifetime (15 minutes).
pub const MIN_DENY_MS: u64 = 15 * 60 * 1000;

/// The expiry an entry is stored with: as asked, but at least [`MIN_DENY_MS`] after it was added.
pub fn kept_until(entry: &DenyEntry) -> u64 {
    entry
        .expires_ms
        .max(entry.added_ms.saturating_add(MIN_DENY_MS))
}

/// Whether `entry` has expired at `now_ms`.
pub fn expired(entry: &DenyEntry, now_ms: u64) -> bool {
    now_ms >= entry.expires_ms
}

/// Whether another entry may be stored beside `unexpired` unexpired ones.
pub fn admits(unexpired: u64, max: u64) -> bool {
    unexpired < max
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DenySubject;

    fn entry(added_ms: u64, expires_ms: u64) -> DenyEntry {
        DenyEntry {
            subject: DenySubject::Client("c".into()),
            added_ms,
            expires_ms,
            note: String::new(),
        }
    }

    #[test]
    fn an_entry_is_kept_at_least_the_longest_token_lifetime() {
        assert_eq!(kept_until(&entry(1_000, 2_000)), 1_000 + MIN_DENY_MS);
        assert_eq!(kept_until(&entry(0, MIN_DENY_MS * 4)), MIN_DENY_MS * 4);
    }

    #[test]
    fn an_entry_refuses_until_its_expiry() {
        assert!(!expired(&entry(0, 10), 9));
        assert!(expired(&entry(0, 10), 10));
        assert!(admits(9, 10) && !admits(10, 10));
    }
}
