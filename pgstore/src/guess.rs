//! What the next push will read, guessed from what this process's own inserts left: the rows
//! of the keys each insert read (enrolments, queue heads and usage, sender shares, accounts)
//! as it left them. A push whose every row is known is decided from the guess and sent in one
//! flight (`ops/insert_flight.rs`), whose guard refuses to write unless the rows, read under
//! the push's locks, equal the guess; so a guess only ever saves a round trip, and a wrong one
//! costs one flight before the two round trips (`ops/insert.rs`). No dedup row is guessed: a
//! new item has none, and the guard checks that.
//!
//! Another process's writes, and this one's acks and expiries, change rows behind the guess:
//! the operations that move a queue forget it ([`Guesses::forget_target`]). The tables are
//! bounded ([`MAX_KEYS`]): when one is full, all are cleared and learnt again.

use std::collections::HashMap;
use std::sync::Mutex;

use relay_store::rules::insert::rows::{QueueState, Rows};
use relay_store::{Key32, Usage};

use crate::ops::insert_keys::Keys;

/// Most keys one table holds (about 100 bytes each).
const MAX_KEYS: usize = 16_384;

/// A key's enrolment as last read: not live, or live with its proven account.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Live {
    No,
    Yes(Option<String>),
}

#[derive(Default)]
struct Known {
    live: HashMap<Key32, Live>,
    queues: HashMap<Key32, QueueState>,
    /// Sender shares by target, then sender (so a target's are forgotten together).
    shares: HashMap<Key32, HashMap<Key32, Usage>>,
    accounts: HashMap<String, Usage>,
    /// Sender shares held, over every target.
    share_count: usize,
}

impl Known {
    fn full(&self) -> bool {
        self.live.len() > MAX_KEYS
            || self.queues.len() > MAX_KEYS
            || self.share_count > MAX_KEYS
            || self.accounts.len() > MAX_KEYS
    }

    /// Forget a target's sender shares.
    fn forget_shares(&mut self, target: &Key32) {
        if let Some(gone) = self.shares.remove(target) {
            self.share_count = self.share_count.saturating_sub(gone.len());
        }
    }
}

/// The rows this process's inserts left, by key.
#[derive(Default)]
pub(crate) struct Guesses {
    known: Mutex<Known>,
}

impl Guesses {
    /// The rows a push of `keys` will read, when every one is known: the enrolments, the live
    /// targets' queue rows, sender shares and accounts; no dedup rows.
    pub(crate) fn guess(&self, keys: &Keys<'_>) -> Option<Rows> {
        let k = self.known.lock().ok()?;
        let mut rows = Rows::default();
        for key in &keys.enrolled {
            if let Live::Yes(account) = k.live.get(*key)? {
                rows.live.insert(**key, account.clone());
            }
        }
        for t in keys.targets.iter().filter(|t| rows.live.contains_key(**t)) {
            rows.queues.insert(**t, *k.queues.get(*t)?);
            if let Some(Some(a)) = rows.live.get(*t) {
                rows.accounts.insert(a.clone(), *k.accounts.get(a)?);
            }
        }
        for (t, s) in keys
            .shares
            .iter()
            .filter(|(t, _)| rows.live.contains_key(*t))
        {
            rows.senders.insert((**t, **s), *k.shares.get(*t)?.get(*s)?);
        }
        Some(rows)
    }

    /// `after`: the rows as a push of `keys` left them (a flight once committed; a
    /// two-round-trip push once decided, under its locks, so the flights guessing from it lock
    /// after it).
    pub(crate) fn learn(&self, keys: &Keys<'_>, after: &Rows) {
        let Ok(mut k) = self.known.lock() else { return };
        if k.full() {
            *k = Known::default();
        }
        for key in &keys.enrolled {
            let live = after
                .live
                .get(*key)
                .map_or(Live::No, |a| Live::Yes(a.clone()));
            k.live.insert(**key, live);
        }
        for t in &keys.targets {
            let Some(account) = after.live.get(*t) else {
                continue;
            };
            match after.queues.get(*t) {
                Some(q) => k.queues.insert(**t, *q),
                None => k.queues.remove(*t),
            };
            if let Some(a) = account {
                let usage = after.accounts.get(a).copied().unwrap_or_default();
                k.accounts.insert(a.clone(), usage);
            }
        }
        for (t, s) in keys
            .shares
            .iter()
            .filter(|(t, _)| after.live.contains_key(*t))
        {
            let usage = after.senders.get(&(**t, **s)).copied().unwrap_or_default();
            if k.shares
                .entry(**t)
                .or_default()
                .insert(**s, usage)
                .is_none()
            {
                k.share_count += 1;
            }
        }
    }

    /// Forget the rows of `keys`: a guess of them was wrong, the push failed, or a push of them
    /// is about to read them in two round trips (the pushes beside it must not guess what it
    /// is changing; it teaches them once it has decided: [`Guesses::learn`]).
    pub(crate) fn forget(&self, keys: &Keys<'_>) {
        let Ok(mut k) = self.known.lock() else { return };
        for key in &keys.enrolled {
            if let Some(Live::Yes(Some(a))) = k.live.remove(*key) {
                k.accounts.remove(&a);
            }
        }
        for t in &keys.targets {
            k.queues.remove(*t);
        }
        for (t, s) in &keys.shares {
            if let Some(shares) = k.shares.get_mut(*t) {
                if shares.remove(*s).is_some() {
                    k.share_count = k.share_count.saturating_sub(1);
                }
            }
        }
    }

    /// Forget a target's queue row and sender shares: an ack, a delete or an expiry moved them.
    pub(crate) fn forget_target(&self, target: &Key32) {
        let Ok(mut k) = self.known.lock() else { return };
        k.queues.remove(target);
        k.forget_shares(target);
        if let Some(Live::Yes(Some(a))) = k.live.get(target) {
            let a = a.clone();
            k.accounts.remove(&a);
        }
    }
}

#[cfg(test)]
mod tests {
    use relay_store::{InsertRequest, ItemKind, NewItem, NewTarget, Quotas};

    use super::*;

    fn req(sender: u8, target: u8) -> InsertRequest {
        InsertRequest {
            item: NewItem {
                kind: ItemKind::Envelope,
                item_id: "i".into(),
                sender: [sender; 32],
                targets: vec![NewTarget {
                    target: [target; 32],
                    wire: vec![0; 4],
                    wire_hash: [0; 32],
                }],
            },
            quotas: Quotas::all(10),
            retention_ms: 1,
            require_live_sender: true,
        }
    }

    /// The rows after a push of 1 to 2: both live, 2's queue at head 7 with one item.
    fn after() -> Rows {
        let mut r = Rows::default();
        r.live.insert([1; 32], None);
        r.live.insert([2; 32], Some("acct".into()));
        let usage = Usage { items: 1, bytes: 4 };
        r.queues.insert([2; 32], QueueState { head: 7, usage });
        r.senders.insert(([2; 32], [1; 32]), usage);
        r.accounts.insert("acct".into(), usage);
        r
    }

    #[test]
    fn nothing_is_guessed_before_a_push_of_the_same_keys_taught_it() {
        let g = Guesses::default();
        let reqs = [req(1, 2)];
        assert!(g.guess(&Keys::of(&reqs)).is_none());
        g.learn(&Keys::of(&reqs), &after());
        let rows = g.guess(&Keys::of(&reqs)).expect("learnt");
        assert_eq!(rows.queues[&[2; 32]].head, 7);
        assert_eq!(rows.accounts["acct"].items, 1);
        assert_eq!(rows.senders[&([2; 32], [1; 32])].bytes, 4);
        assert!(rows.dedup.is_empty(), "a dedup row is never guessed");
        // Another sender to the same target: its share is unknown.
        assert!(g.guess(&Keys::of(&[req(3, 2)])).is_none());
    }

    #[test]
    fn a_moved_queue_or_a_miss_is_forgotten() {
        let g = Guesses::default();
        let reqs = [req(1, 2)];
        g.learn(&Keys::of(&reqs), &after());
        g.forget_target(&[2; 32]);
        assert!(g.guess(&Keys::of(&reqs)).is_none());
        g.learn(&Keys::of(&reqs), &after());
        g.forget(&Keys::of(&reqs));
        assert!(g.guess(&Keys::of(&reqs)).is_none());
    }

    #[test]
    fn a_key_known_not_live_is_guessed_not_live() {
        let g = Guesses::default();
        let reqs = [req(1, 2)];
        let mut rows = after();
        rows.live.remove(&[2; 32]);
        g.learn(&Keys::of(&reqs), &rows);
        let guess = g.guess(&Keys::of(&reqs)).expect("learnt");
        assert!(!guess.live.contains_key(&[2; 32]));
        assert!(guess.queues.is_empty());
    }

    #[test]
    fn the_tables_stay_bounded() {
        let g = Guesses::default();
        for n in 0..(MAX_KEYS as u32 + 10) {
            let mut t = [0; 32];
            t[..4].copy_from_slice(&n.to_be_bytes());
            let mut r = req(1, 0);
            r.item.targets[0].target = t;
            let mut rows = after();
            rows.live.insert(t, None);
            rows.senders.insert((t, [1; 32]), Usage::default());
            g.learn(&Keys::of(&[r]), &rows);
        }
        let k = g.known.lock().unwrap();
        assert!(k.live.len() <= MAX_KEYS + 1 && k.share_count <= MAX_KEYS + 1);
    }
}
