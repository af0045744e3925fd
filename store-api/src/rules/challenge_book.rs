//! The challenge book's rules (docs/protocol.md §3): one open challenge per key, expiring, single
//! use, at most `max` open; issuing to a key that has one replaces it (always allowed); a
//! challenge is taken only by the same string, compared in constant time. [`Book`] is the book
//! as plain state (the relay keeps one in memory for a single-process store); a shared store's
//! book (PostgreSQL's table) applies the same functions to its rows.

use std::collections::HashMap;

use subtle::ConstantTimeEq;

use crate::{ChallengeIssue, Key32};

/// When a challenge issued at `now_ms` for `lifetime_ms` expires.
pub fn expires_at(now_ms: u64, lifetime_ms: u64) -> u64 {
    now_ms.saturating_add(lifetime_ms)
}

/// A challenge expiring at `expires_ms` is still open at `now_ms`.
pub fn is_open(expires_ms: u64, now_ms: u64) -> bool {
    expires_ms > now_ms
}

/// A new challenge for a key may be issued while fewer than `max` other keys hold open ones
/// (the key's own, if any, is replaced and not counted).
pub fn admits(others_open: u64, max: u64) -> bool {
    others_open < max
}

/// `given` is the stored challenge (constant time: the compare leaks no prefix length).
pub fn same(stored: &str, given: &str) -> bool {
    bool::from(stored.as_bytes().ct_eq(given.as_bytes()))
}

/// One open challenge.
struct Open {
    challenge: String,
    expires_ms: u64,
}

/// Open challenges by key, as plain state (bounded: at most `max` of [`Book::issue`]).
#[derive(Default)]
pub struct Book {
    open: HashMap<Key32, Open>,
}

impl Book {
    /// Make `challenge` `key`'s open challenge until `now_ms + lifetime_ms`, unless `max`
    /// other keys hold open ones. Expired challenges are dropped when the book is full.
    pub fn issue(
        &mut self,
        key: Key32,
        challenge: String,
        now_ms: u64,
        lifetime_ms: u64,
        max: u64,
    ) -> ChallengeIssue {
        if !self.open.contains_key(&key) && !admits(self.len_u64(), max) {
            self.open.retain(|_, o| is_open(o.expires_ms, now_ms));
            if !admits(self.len_u64(), max) {
                return ChallengeIssue::Full;
            }
        }
        self.open.insert(
            key,
            Open {
                challenge,
                expires_ms: expires_at(now_ms, lifetime_ms),
            },
        );
        ChallengeIssue::Issued
    }

    /// `key`'s open, unexpired challenge.
    pub fn pending(&self, key: &Key32, now_ms: u64) -> Option<&str> {
        self.open
            .get(key)
            .filter(|o| is_open(o.expires_ms, now_ms))
            .map(|o| o.challenge.as_str())
    }

    /// Take `key`'s challenge if it is `challenge` (single use); another string takes nothing.
    pub fn consume(&mut self, key: &Key32, challenge: &str) {
        if self
            .open
            .get(key)
            .is_some_and(|o| same(&o.challenge, challenge))
        {
            self.open.remove(key);
        }
    }

    /// Challenges held (expired ones included until dropped).
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// No challenge held.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }

    fn len_u64(&self) -> u64 {
        u64::try_from(self.open.len()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFE: u64 = 1_000;

    fn issue(b: &mut Book, key: u8, c: &str, now: u64, max: u64) -> ChallengeIssue {
        b.issue([key; 32], c.to_string(), now, LIFE, max)
    }

    #[test]
    fn one_challenge_per_key_a_new_one_replaces_it() {
        let mut b = Book::default();
        issue(&mut b, 1, "a", 0, 2);
        issue(&mut b, 1, "b", 10, 2);
        assert_eq!(b.len(), 1);
        assert_eq!(b.pending(&[1; 32], 20), Some("b"));
    }

    #[test]
    fn a_challenge_expires_after_its_lifetime() {
        let mut b = Book::default();
        issue(&mut b, 1, "a", 0, 2);
        assert_eq!(b.pending(&[1; 32], LIFE - 1), Some("a"));
        assert_eq!(b.pending(&[1; 32], LIFE), None);
        assert!(is_open(LIFE, LIFE - 1) && !is_open(LIFE, LIFE));
    }

    #[test]
    fn a_challenge_is_single_use_and_taken_only_by_itself() {
        let mut b = Book::default();
        issue(&mut b, 1, "a", 0, 2);
        b.consume(&[1; 32], "x");
        assert_eq!(
            b.pending(&[1; 32], 1),
            Some("a"),
            "another string takes nothing"
        );
        b.consume(&[1; 32], "a");
        assert_eq!(b.pending(&[1; 32], 1), None);
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }

    #[test]
    fn the_book_is_capped_replacing_is_always_allowed_expired_make_room() {
        let mut b = Book::default();
        issue(&mut b, 1, "a", 0, 2);
        issue(&mut b, 2, "b", 0, 2);
        assert_eq!(issue(&mut b, 3, "c", 10, 2), ChallengeIssue::Full);
        assert_eq!(issue(&mut b, 1, "a2", 10, 2), ChallengeIssue::Issued);
        assert_eq!(issue(&mut b, 3, "c", LIFE, 2), ChallengeIssue::Issued);
        assert!(b.len() <= 2);
        assert!(admits(1, 2) && !admits(2, 2));
    }
}
