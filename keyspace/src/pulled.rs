//! What an ack needs to know of the items a receiver has pulled — sender, item id, account, size
//! and expiry — kept from the pull so that the ack does not read the items' wire bytes back.
//!
//! With key-value separation an item's record lives in a blob file; reading it back only to
//! learn these fields was about a third of the relay's CPU during a drain (the writer
//! thread: blob reads and block-cache inserts for data read once). The pull has just decoded
//! the same records, so it leaves these hints for the ack.
//!
//! Only a hint: the ack still lists the queued keys itself (so an item deleted since its pull is
//! not counted), and reads the record of any item without a hint. A hint is never stale: an
//! item's record is written once under `(target, seq)` and only ever deleted, and a target's
//! seqs are never reused (its head seq is never deleted, `queue::alloc_seq`). Bounded: when full
//! the hints are dropped wholesale, which costs only the reads they would have saved.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use relay_store::Key32;

/// Most hints held at once (about 150 bytes each). Receivers pull at most `max_pull` (500)
/// items a page, so this covers 64 receivers with a page each in flight.
const MAX_HINTS: usize = 32_768;

/// The fields of a queued item's record that an ack moves usage, expiry and dedup-horizon rows by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ItemHint {
    pub sender: Key32,
    /// With the sender, names the item's dedup row (its horizon starts at the ack).
    pub item_id: Box<str>,
    pub account: Option<Box<str>>,
    pub bytes: u64,
    pub expires_at_ms: u64,
}

/// Hints by target, then seq.
#[derive(Default)]
pub(crate) struct PulledHints {
    inner: Mutex<Hints>,
}

#[derive(Default)]
struct Hints {
    by_target: HashMap<Key32, BTreeMap<u64, ItemHint>>,
    len: usize,
}

impl PulledHints {
    /// Remember the hints of one pulled page of `target`.
    pub(crate) fn note(&self, target: &Key32, page: Vec<(u64, ItemHint)>) {
        if page.is_empty() {
            return;
        }
        let Ok(mut h) = self.inner.lock() else {
            return;
        };
        if h.len + page.len() > MAX_HINTS {
            h.by_target.clear();
            h.len = 0;
        }
        let queue = h.by_target.entry(*target).or_default();
        let before = queue.len();
        queue.extend(page);
        let added = queue.len() - before;
        h.len += added;
    }

    /// Take out every hint of `target` with a seq up to `through` (an ack through `through`
    /// deletes those items, or they were already gone).
    pub(crate) fn take_through(&self, target: &Key32, through: u64) -> BTreeMap<u64, ItemHint> {
        let Ok(mut h) = self.inner.lock() else {
            return BTreeMap::new();
        };
        let Some(queue) = h.by_target.get_mut(target) else {
            return BTreeMap::new();
        };
        let later = match through.checked_add(1) {
            Some(next) => queue.split_off(&next),
            None => BTreeMap::new(),
        };
        let taken = std::mem::replace(queue, later);
        if queue.is_empty() {
            h.by_target.remove(target);
        }
        h.len -= taken.len();
        taken
    }

    /// Number of hints held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map(|h| h.len).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(n: u64) -> ItemHint {
        ItemHint {
            sender: [n as u8; 32],
            item_id: format!("id-{n}").into(),
            account: n.is_multiple_of(2).then(|| format!("acct-{n}").into()),
            bytes: n * 10,
            expires_at_ms: n * 1000,
        }
    }

    fn page(seqs: std::ops::RangeInclusive<u64>) -> Vec<(u64, ItemHint)> {
        seqs.map(|s| (s, hint(s))).collect()
    }

    #[test]
    fn take_through_takes_that_target_up_to_the_seq_only() {
        let h = PulledHints::default();
        let (a, b) = ([1u8; 32], [2u8; 32]);
        h.note(&a, page(1..=10));
        h.note(&b, page(1..=10));
        let taken = h.take_through(&a, 4);
        assert_eq!(taken.keys().copied().collect::<Vec<_>>(), vec![1, 2, 3, 4]);
        assert_eq!(taken[&3], hint(3));
        assert_eq!(h.len(), 16);
        // Taken hints are gone; later ones and other targets stay.
        assert!(h.take_through(&a, 4).is_empty());
        assert_eq!(h.take_through(&a, u64::MAX).len(), 6);
        assert_eq!(h.take_through(&b, 10).len(), 10);
        assert_eq!(h.len(), 0);
        assert!(h.take_through(&[9u8; 32], 100).is_empty());
    }

    #[test]
    fn pulling_a_page_again_counts_its_hints_once() {
        let h = PulledHints::default();
        let t = [7u8; 32];
        h.note(&t, page(1..=5));
        h.note(&t, page(3..=8));
        assert_eq!(h.len(), 8);
        assert_eq!(h.take_through(&t, 100).len(), 8);
        assert_eq!(h.len(), 0);
    }

    #[test]
    fn a_full_set_of_hints_is_dropped_before_more_are_noted() {
        let h = PulledHints::default();
        let per_target = 500u64;
        let targets = (MAX_HINTS as u64).div_ceil(per_target);
        for t in 0..targets {
            h.note(&[t as u8; 32], page(1..=per_target));
        }
        // The page that would pass the bound dropped everything before it was noted.
        assert!(h.len() <= MAX_HINTS);
        assert!(h.len() < (targets * per_target) as usize);
        let last = [(targets - 1) as u8; 32];
        assert_eq!(h.take_through(&last, u64::MAX).len(), per_target as usize);
        assert!(h.take_through(&[0u8; 32], u64::MAX).is_empty());
    }
}
