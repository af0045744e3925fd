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

use crate::ops::insert::Keys;

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
}

impl Known {
    fn full(&self) -> bool {
        self.live.len() > MAX_KEYS
            || self.queues.len() > MAX_KEYS
            || self.shares.len() > MAX_KEYS
            || self.accounts.len() > MAX_KEYS
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
        for (t, s) in keys.shares.iter().filter(|(t, _)| rows.live.contains_key(*t)) {
            rows.senders.insert((**t, **s), *k.shares.get(*t)?.get(*s)?);
        }
        Some(rows)
    }

    /// `after`: the rows as a push of `keys` left them (committed, or about to be sent in one
    /// flight, as the guess of the pushes behind it).
    pub(crate) fn learn(&self, keys: &Keys<'_>, after: &Rows) {
        let Ok(mut k) = self.known.lock() else { return };
        if k.full() {
            *k = Known::default();
        }
        for key in &keys.enrolled {
            let live = after.live.get(*key).map_or(Live::No, |a| Live::Yes(a.clone()));
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
        for (t, s) in keys.shares.iter().filter(|(t, _)| after.live.contains_key(*t)) {
            let usage = after.senders.get(&(**t, **s)).copied().unwrap_or_default();
            k.shares.entry(**t).or_default().insert(**s, usage);
        }
    }

    /// Forget every row of `keys`: a guess of them was wrong, or the push failed.
    pub(crate) fn forget(&self, keys: &Keys<'_>) {
        let Ok(mut k) = self.known.lock() else { return };
        for key in &keys.enrolled {
            if let Some(Live::Yes(Some(a))) = k.live.remove(*key) {
                k.accounts.remove(&a);
            }
        }
        for t in &keys.targets {
            k.queues.remove(*t);
            k.shares.remove(*t);
        }
    }

    /// Forget a target's queue row and sender shares: an ack, a delete or an expiry moved them.
    pub(crate) fn forget_target(&self, target: &Key32) {
        let Ok(mut k) = self.known.lock() else { return };
        k.queues.remove(target);
        k.shares.remove(target);
        if let Some(Live::Yes(Some(a))) = k.live.get(target) {
            let a = a.clone();
            k.accounts.remove(&a);
        }
    }
}
