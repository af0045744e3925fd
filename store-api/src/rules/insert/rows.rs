//! The rows an insert reads, held in plain maps: one [`InsertReads`] for every reader that has
//! them in memory (PostgreSQL's batch, read under its locks once, and the rule's unit tests),
//! and [`Rows::apply`], how a stored item changes them for the next item of the same batch.

use std::collections::HashMap;

use super::{InsertReads, NewRow, Scope};
use crate::rules::quota::plus_one;
use crate::types::{DedupRow, InsertRequest, Key32, Result, Usage};

/// (target, sender, item_id) of a dedup row.
pub type DedupKey = (Key32, Key32, String);

/// A target's queue row: the last seq allocated and the queue's own usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueState {
    /// The last seq allocated.
    pub head: u64,
    /// What the queue holds.
    pub usage: Usage,
}

/// The rows an insert depends on (a missing usage row or queue row is zero).
#[derive(Debug, Clone, Default)]
pub struct Rows {
    /// Live (enrolled, not revoked) keys and their proven account.
    pub live: HashMap<Key32, Option<String>>,
    /// Queue rows by target.
    pub queues: HashMap<Key32, QueueState>,
    /// Dedup rows by (target, sender, item_id).
    pub dedup: HashMap<DedupKey, DedupRow>,
    /// (target, sender) → the sender's share of the target's queue.
    pub senders: HashMap<(Key32, Key32), Usage>,
    /// Usage per proven account.
    pub accounts: HashMap<String, Usage>,
}

impl Rows {
    /// The rows after `req`'s new `row` (decided at `now_ms`) is stored: its target's head and
    /// usage, the sender's share, the account's usage and the dedup row move, so the next item
    /// of a batch is decided as if this one had committed before it.
    pub fn apply(&mut self, req: &InsertRequest, row: &NewRow, now_ms: u64) {
        let tg = &req.item.targets[row.target];
        let q = self.queues.entry(tg.target).or_default();
        q.head = row.seq;
        q.usage = plus_one(q.usage, row.bytes);
        let s = self
            .senders
            .entry((tg.target, req.item.sender))
            .or_default();
        *s = plus_one(*s, row.bytes);
        if let Some(a) = &row.account {
            let a = self.accounts.entry(a.clone()).or_default();
            *a = plus_one(*a, row.bytes);
        }
        self.dedup.insert(
            (tg.target, req.item.sender, req.item.item_id.clone()),
            DedupRow {
                wire_hash: tg.wire_hash,
                seq: row.seq,
                accepted_at_ms: now_ms,
            },
        );
    }
}

impl InsertReads for Rows {
    fn live(&self, key: &Key32) -> Result<Option<Option<String>>> {
        Ok(self.live.get(key).cloned())
    }
    fn dedup(&self, target: &Key32, sender: &Key32, item_id: &str) -> Result<Option<DedupRow>> {
        Ok(self
            .dedup
            .get(&(*target, *sender, item_id.to_string()))
            .cloned())
    }
    fn usage(&self, scope: Scope<'_>) -> Result<Usage> {
        Ok(match scope {
            Scope::Target(t) => self.queues.get(t).map(|q| q.usage),
            Scope::Sender { target, sender } => self.senders.get(&(*target, *sender)).copied(),
            Scope::Account(a) => self.accounts.get(a).copied(),
        }
        .unwrap_or_default())
    }
    fn head(&self, target: &Key32) -> Result<u64> {
        Ok(self.queues.get(target).map_or(0, |q| q.head))
    }
}
