//! The insert rule (relay-store's `rules::insert::decide`, the one the keyspace runs) applied to
//! a whole batch in memory: from the rows the batch read (and locked) once, decide every item in
//! order as if each ran alone, each seeing the rows the items before it stored, and gather what
//! to write. `ops/insert.rs` reads the rows and writes the plan, one statement per table: no
//! statement per item.

use std::collections::HashMap;

use relay_store::rules::insert::{decide, InsertReads, Scope};
use relay_store::rules::quota::plus_one;
use relay_store::{DedupRow, InsertOutcome, InsertRequest, Key32, Result, Usage};

/// (target, sender, item_id) of a dedup row.
pub(crate) type DedupKey = (Key32, Key32, String);

/// What dedup knows of a key: wire hash, seq, accepted at.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DedupHit {
    pub wire_hash: Key32,
    pub seq: u64,
    pub accepted_at_ms: u64,
}

/// A target's queue row: head and own usage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct QueueState {
    pub head: u64,
    pub usage: Usage,
}

/// The rows a batch depends on, as read under its locks (a missing usage row is zero).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Live (enrolled, not revoked) targets and their proven account; also the senders that
    /// must be live ([`InsertRequest::require_live_sender`]).
    pub live: HashMap<Key32, Option<String>>,
    pub queues: HashMap<Key32, QueueState>,
    pub dedup: HashMap<DedupKey, DedupHit>,
    /// (target, sender) → the sender's share of the target's queue.
    pub senders: HashMap<(Key32, Key32), Usage>,
    pub accounts: HashMap<String, Usage>,
}

/// One new item row (and its dedup row): `reqs[req].item.targets[target]` at `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NewRow {
    pub req: usize,
    pub target: usize,
    pub seq: u64,
}

/// The outcomes (in request order) and the writes that make them so.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub outcomes: Vec<InsertOutcome>,
    pub rows: Vec<NewRow>,
    /// Queue rows whose head or usage moved: their new values.
    pub queues: Vec<(Key32, QueueState)>,
    /// Usage added per (target, sender) and per account.
    pub senders: Vec<((Key32, Key32), Usage)>,
    pub accounts: Vec<(String, Usage)>,
    /// The live targets' accounts (an item row records its target's).
    pub live: HashMap<Key32, Option<String>>,
}

/// Decide the batch `reqs` at `now` against `snap`.
pub(crate) fn plan(reqs: &[InsertRequest], mut snap: Snapshot, now: u64) -> Result<Plan> {
    let start_queues = snap.queues.clone();
    let start_senders = snap.senders.clone();
    let start_accounts = snap.accounts.clone();
    let mut out = Plan::default();
    for (ri, req) in reqs.iter().enumerate() {
        let d = decide(req, now, &snap)?;
        for row in &d.rows {
            apply(&mut snap, req, row, now);
            out.rows.push(NewRow {
                req: ri,
                target: row.target,
                seq: row.seq,
            });
        }
        out.outcomes.push(d.outcome);
    }
    let delta = |now: Usage, was: Usage| Usage {
        items: now.items.saturating_sub(was.items),
        bytes: now.bytes.saturating_sub(was.bytes),
    };
    out.queues = snap
        .queues
        .into_iter()
        .filter(|(k, v)| start_queues.get(k).copied().unwrap_or_default() != *v)
        .collect();
    out.senders = snap
        .senders
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                delta(v, start_senders.get(&k).copied().unwrap_or_default()),
            )
        })
        .filter(|(_, d)| *d != Usage::default())
        .collect();
    out.accounts = snap
        .accounts
        .into_iter()
        .map(|(k, v)| {
            let d = delta(v, start_accounts.get(&k).copied().unwrap_or_default());
            (k, d)
        })
        .filter(|(_, d)| *d != Usage::default())
        .collect();
    out.live = snap.live;
    Ok(out)
}

/// A stored item's row as the next item of the batch sees it: head, usage, dedup.
fn apply(
    snap: &mut Snapshot,
    req: &InsertRequest,
    row: &relay_store::rules::insert::NewRow,
    now: u64,
) {
    let tg = &req.item.targets[row.target];
    let q = snap.queues.entry(tg.target).or_default();
    q.head = row.seq;
    q.usage = plus_one(q.usage, row.bytes);
    let s = snap
        .senders
        .entry((tg.target, req.item.sender))
        .or_default();
    *s = plus_one(*s, row.bytes);
    if let Some(a) = &row.account {
        let a = snap.accounts.entry(a.clone()).or_default();
        *a = plus_one(*a, row.bytes);
    }
    snap.dedup.insert(
        (tg.target, req.item.sender, req.item.item_id.clone()),
        DedupHit {
            wire_hash: tg.wire_hash,
            seq: row.seq,
            accepted_at_ms: now,
        },
    );
}

/// The rule's reads, from the locked snapshot (a missing row is zero / none).
impl InsertReads for Snapshot {
    fn live(&self, key: &Key32) -> Result<Option<Option<String>>> {
        Ok(self.live.get(key).cloned())
    }
    fn dedup(&self, target: &Key32, sender: &Key32, item_id: &str) -> Result<Option<DedupRow>> {
        Ok(self
            .dedup
            .get(&(*target, *sender, item_id.to_string()))
            .map(|d| DedupRow {
                wire_hash: d.wire_hash,
                seq: d.seq,
                accepted_at_ms: d.accepted_at_ms,
            }))
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
