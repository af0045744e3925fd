//! Open enrolment challenges: bounded, expiring, single-use, one per key (docs/protocol.md §3).

use std::collections::HashMap;
use std::sync::Mutex;

use relay_keyspace::Key32;
use subtle::ConstantTimeEq;

/// Why a challenge could not be issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueError {
    /// The table holds `max` open challenges.
    Full,
}

struct Open {
    challenge: String,
    expires_ms: u64,
}

/// The open challenges, keyed by host key.
pub struct Challenges {
    max: usize,
    lifetime_ms: u64,
    inner: Mutex<HashMap<Key32, Open>>,
}

impl Challenges {
    /// A table of at most `max` open challenges, each valid for `lifetime_ms`.
    pub fn new(max: usize, lifetime_ms: u64) -> Self {
        Challenges {
            max,
            lifetime_ms,
            inner: Mutex::new(HashMap::new()),
        }
    }

    /// Issue a new challenge for `key`, replacing its open one.
    ///
    /// # Errors
    /// [`IssueError::Full`] when `max` other challenges are open and none has expired.
    pub fn issue(&self, key: Key32, now_ms: u64) -> Result<String, IssueError> {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if !map.contains_key(&key) && map.len() >= self.max {
            map.retain(|_, o| o.expires_ms > now_ms);
            if map.len() >= self.max {
                return Err(IssueError::Full);
            }
        }
        let challenge = new_challenge();
        map.insert(
            key,
            Open {
                challenge: challenge.clone(),
                expires_ms: now_ms + self.lifetime_ms,
            },
        );
        Ok(challenge)
    }

    /// The open, unexpired challenge of `key`.
    pub fn pending(&self, key: &Key32, now_ms: u64) -> Option<String> {
        let map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key)
            .filter(|o| o.expires_ms > now_ms)
            .map(|o| o.challenge.clone())
    }

    /// Consume `key`'s challenge if it is still the one given (single use).
    pub fn consume(&self, key: &Key32, challenge: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let same = map
            .get(key)
            .is_some_and(|o| bool::from(o.challenge.as_bytes().ct_eq(challenge.as_bytes())));
        if same {
            map.remove(key);
        }
    }

    /// Open challenges held (expired ones included until swept).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 16 random bytes, base64url without padding (docs/protocol.md §1).
fn new_challenge() -> String {
    use base64::Engine as _;
    let bytes: [u8; 16] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_per_key_expiring_single_use() {
        let c = Challenges::new(2, 1_000);
        let a = c.issue([1; 32], 0).unwrap();
        assert_eq!(a.len(), 22);
        let a2 = c.issue([1; 32], 10).unwrap();
        assert_ne!(a, a2);
        assert_eq!(c.len(), 1, "a new challenge replaces the open one");
        assert_eq!(c.pending(&[1; 32], 20).as_deref(), Some(a2.as_str()));
        assert_eq!(c.pending(&[1; 32], 1_010), None, "expired");
        c.consume(&[1; 32], &a);
        assert!(
            c.pending(&[1; 32], 20).is_some(),
            "an old challenge does not consume the new"
        );
        c.consume(&[1; 32], &a2);
        assert_eq!(c.pending(&[1; 32], 20), None);
    }

    #[test]
    fn capped() {
        let c = Challenges::new(2, 1_000);
        c.issue([1; 32], 0).unwrap();
        c.issue([2; 32], 0).unwrap();
        assert_eq!(c.issue([3; 32], 10), Err(IssueError::Full));
        assert!(c.issue([1; 32], 10).is_ok(), "replacing is always allowed");
        assert!(c.issue([3; 32], 1_000).is_ok(), "expired ones make room");
        assert!(c.len() <= 2);
    }
}
