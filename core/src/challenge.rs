//! Open enrolment challenges: bounded, expiring, single-use, one per key (docs/protocol.md §3).

use std::sync::Mutex;

use relay_store::rules::challenge_book::Book;
use relay_store::{ChallengeBook, ChallengeIssue, Key32, Pending};

/// The open challenges of this process, keyed by host key: the relay's book when its store is
/// one process's own (`RelayStore::shared_challenges` is `None`). The rules are relay-store's
/// ([`Book`]); this is the lock around it.
#[derive(Default)]
pub(crate) struct Challenges {
    inner: Mutex<Book>,
}

impl Challenges {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Open challenges held (expired ones included until swept).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.book().len()
    }
}

impl ChallengeBook for Challenges {
    fn issue(
        &self,
        key: Key32,
        challenge: String,
        now_ms: u64,
        lifetime_ms: u64,
        max: u64,
    ) -> Pending<ChallengeIssue> {
        let issued = self.book().issue(key, challenge, now_ms, lifetime_ms, max);
        Pending::ready(Ok(issued))
    }

    fn pending(&self, key: &Key32, now_ms: u64) -> Pending<Option<String>> {
        Pending::ready(Ok(self.book().pending(key, now_ms).map(str::to_string)))
    }

    fn consume(&self, key: &Key32, challenge: &str) -> Pending<()> {
        self.book().consume(key, challenge);
        Pending::ready(Ok(()))
    }
}

/// 16 random bytes, base64url without padding (docs/protocol.md §1).
pub(crate) fn new_challenge() -> String {
    use base64::Engine as _;
    let bytes: [u8; 16] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIFE: u64 = 1_000;

    fn issue(c: &Challenges, key: u8, now: u64, max: u64) -> Result<String, ChallengeIssue> {
        let challenge = new_challenge();
        match c.issue([key; 32], challenge.clone(), now, LIFE, max).wait() {
            Ok(ChallengeIssue::Issued) => Ok(challenge),
            Ok(other) => Err(other),
            Err(e) => panic!("{e}"),
        }
    }

    fn pending(c: &Challenges, key: u8, now: u64) -> Option<String> {
        c.pending(&[key; 32], now).wait().unwrap()
    }

    #[test]
    fn one_per_key_expiring_single_use() {
        let c = Challenges::default();
        let a = issue(&c, 1, 0, 2).unwrap();
        assert_eq!(a.len(), 22);
        let a2 = issue(&c, 1, 10, 2).unwrap();
        assert_ne!(a, a2);
        assert_eq!(c.len(), 1, "a new challenge replaces the open one");
        assert_eq!(pending(&c, 1, 20).as_deref(), Some(a2.as_str()));
        assert_eq!(pending(&c, 1, 1_010), None, "expired");
        c.consume(&[1; 32], &a).wait().unwrap();
        assert!(
            pending(&c, 1, 20).is_some(),
            "an old challenge does not consume the new"
        );
        c.consume(&[1; 32], &a2).wait().unwrap();
        assert_eq!(pending(&c, 1, 20), None);
    }

    #[test]
    fn capped() {
        let c = Challenges::default();
        issue(&c, 1, 0, 2).unwrap();
        issue(&c, 2, 0, 2).unwrap();
        assert_eq!(issue(&c, 3, 10, 2), Err(ChallengeIssue::Full));
        assert!(issue(&c, 1, 10, 2).is_ok(), "replacing is always allowed");
        assert!(issue(&c, 3, 1_000, 2).is_ok(), "expired ones make room");
        assert!(c.len() <= 2);
    }
}
