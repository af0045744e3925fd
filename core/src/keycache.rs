//! A bounded memo of decoded public keys for hop verification.
//!
//! Decoding an Ed25519 public key decompresses a curve point (a field square root), and every
//! authenticated call used to pay it again for the same few enrolled keys. The decoded point is
//! a pure function of the 32 key bytes, so the memo holds no authorisation state: enrolment and
//! revocation are still read from the store on every call, and the same strict verification
//! runs either way (`wire::strict_stream`, which also keeps the key's small-order check). It is process-wide (one set of keys per relay)
//! and cleared whole when full, which keeps it bounded without bookkeeping.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use relay_wire::strict_stream::HopKey;

/// Most decoded keys held (about 200 bytes each plus the table).
const CAPACITY: usize = 4096;

/// Decoded keys by their raw bytes, capped at `cap` entries.
pub(crate) struct KeyCache {
    cap: usize,
    map: Mutex<HashMap<[u8; 32], HopKey>>,
}

impl KeyCache {
    /// An empty cache holding at most `cap` keys (at least one).
    pub(crate) fn new(cap: usize) -> Self {
        KeyCache {
            cap: cap.max(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// The decoded key for `pk`, from the memo or decoded now; `None` when `pk` is not a curve
    /// point (never memoised, so junk keys cannot fill the table).
    pub(crate) fn get(&self, pk: &[u8; 32]) -> Option<HopKey> {
        if let Some(k) = self.lock().get(pk) {
            return Some(*k);
        }
        // Decode outside the lock: it is the slow part.
        let key = HopKey::decode(pk)?;
        let mut map = self.lock();
        if map.len() >= self.cap {
            map.clear();
        }
        map.insert(*pk, key);
        Some(key)
    }

    /// Keys currently held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no key is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], HopKey>> {
        // The map stays consistent even if a holder panicked: every write is one insert/clear.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The relay's process-wide cache.
pub(crate) fn shared() -> &'static KeyCache {
    static CACHE: OnceLock<KeyCache> = OnceLock::new();
    CACHE.get_or_init(|| KeyCache::new(CAPACITY))
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::hop::{sign_hop, verify_hop_with};
    use relay_wire::keys::SigningKey;

    #[test]
    fn memoises_valid_keys_and_stays_bounded() {
        let cache = KeyCache::new(3);
        let keys: Vec<SigningKey> = (0u8..5).map(|i| SigningKey::from_seed(&[i; 32])).collect();
        for (n, k) in keys.iter().enumerate() {
            let decoded = cache.get(&k.public()).expect("a real key decodes");
            assert_eq!(decoded.to_bytes(), k.public());
            assert!(
                cache.len() <= 3,
                "after {n} keys the cache holds {}",
                cache.len()
            );
            // the memoised key verifies exactly like a fresh one
            let sig = sign_hop(k, "POST", "/v2/relay/items", "1", "{}");
            let again = cache.get(&k.public()).expect("memoised");
            assert!(verify_hop_with(
                &again,
                "POST",
                "/v2/relay/items",
                "1",
                "{}",
                &sig
            ));
            assert!(!verify_hop_with(
                &again,
                "POST",
                "/v2/relay/items",
                "2",
                "{}",
                &sig
            ));
        }
        assert!(!cache.is_empty());
    }

    #[test]
    fn non_points_are_refused_and_not_stored() {
        let cache = KeyCache::new(8);
        let mut off_curve = [0u8; 32];
        off_curve[0] = 2;
        assert!(cache.get(&off_curve).is_none());
        assert!(cache.is_empty());
    }
}
