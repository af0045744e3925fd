//! Fixed one-minute rate windows per key (client address or sender key), in a hard-capped table.
//! When the table is full even after dropping finished windows, new keys are refused (fail closed),
//! so memory stays bounded whatever the traffic.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;

const WINDOW_MS: u64 = 60_000;

/// Per-key counters over one-minute windows.
pub struct RateTable<K> {
    limit: u32,
    cap: usize,
    inner: Mutex<HashMap<K, (u64, u32)>>,
}

impl<K: Hash + Eq + Clone> RateTable<K> {
    /// A table allowing `limit` hits per key per minute, holding at most `cap` keys.
    pub fn new(limit: u32, cap: usize) -> Self {
        RateTable {
            limit,
            cap: cap.max(1),
            inner: Mutex::new(HashMap::new()),
        }
    }

    /// Count one hit for `key` at `now_ms`; false when over the limit (or the table is full).
    pub fn hit(&self, key: &K, now_ms: u64) -> bool {
        let mut map = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((start, n)) = map.get_mut(key) {
            if now_ms.saturating_sub(*start) >= WINDOW_MS {
                *start = now_ms;
                *n = 0;
            }
            if *n >= self.limit {
                return false;
            }
            *n += 1;
            return true;
        }
        if map.len() >= self.cap {
            map.retain(|_, (start, _)| now_ms.saturating_sub(*start) < WINDOW_MS);
            if map.len() >= self.cap {
                return false;
            }
        }
        map.insert(key.clone(), (now_ms, 1));
        true
    }

    /// Keys currently held (for metrics and tests).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_limits_and_resets() {
        let t = RateTable::new(2, 10);
        assert!(t.hit(&"a", 0));
        assert!(t.hit(&"a", 1));
        assert!(!t.hit(&"a", 2));
        assert!(t.hit(&"b", 2));
        assert!(t.hit(&"a", 60_000));
    }

    #[test]
    fn table_is_hard_capped() {
        let t = RateTable::new(5, 2);
        assert!(t.hit(&1, 0));
        assert!(t.hit(&2, 0));
        assert!(!t.hit(&3, 10), "full table refuses new keys");
        assert_eq!(t.len(), 2);
        assert!(
            t.hit(&3, 60_000),
            "finished windows are dropped to make room"
        );
        assert!(t.len() <= 2);
    }
}
