//! Open enrolment challenges: bounded, expiring, single-use, one per key (docs/protocol.md §3).

use std::collections::HashMap;
use std::sync::Mutex;

use relay_store::{ChallengeBook, ChallengeIssue, Key32, Pending};
use subtle::ConstantTimeEq;

struct Open {
    challenge: String,
    expires_ms: u64,
}

/// The open challenges of this process, keyed by host key: the relay's book when its store is
/// one process's own (`RelayStore::shared_challenges` is `None`).
#[derive(Default)]
pub(crate) struct Challenges {
    inner: Mutex<HashMap<Key32, Open>>,
}

impl Challenges {
    /// Open challenges held (expired ones included until swept).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
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
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(&key) && map.len() >= max {
            map.retain(|_, o| o.expires_ms > now_ms);
            if map.len() >= max {
                return Pending::ready(Ok(ChallengeIssue::Full));
            }
        }
        map.insert(
            key,
            Open {
                challenge,
                expires_ms: now_ms.saturating_add(lifetime_ms),
            },
        );
        Pending::ready(Ok(ChallengeIssue::Issued))
    }

    fn pending(&self, key: &Key32, now_ms: u64) -> Pending<Option<String>> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Pending::ready(Ok(map
            .get(key)
            .filter(|o| o.expires_ms > now_ms)
            .map(|o| o.challenge.clone())))
    }

    fn consume(&self, key: &Key32, challenge: &str) -> Pending<()> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let same = map
            .get(key)
            .is_some_and(|o| bool::from(o.challenge.as_bytes().ct_eq(challenge.as_bytes())));
        if same {
            map.remove(key);
        }
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
