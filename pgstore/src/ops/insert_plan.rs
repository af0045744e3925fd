//! The insert rules of keyspace/src/ops/insert.rs applied to a whole batch in memory: from the
//! rows the batch read (and locked) once, decide every item's outcome in order as if each ran
//! alone (a host's push's sender live, every target live, dedup per (target, sender, item_id) with the wire hash deciding
//! duplicate vs conflict, inclusive quotas in the order target, sender share, account, seq =
//! max(head + 1, now), all or nothing per item), and what to write. `ops/insert.rs` reads the
//! rows and writes the plan, one statement per table: no statement per item.

use std::collections::HashMap;

use relay_store::{InsertOutcome, InsertRequest, Key32, QuotaKind, Quotas, TargetSeq, Usage};

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

/// A change to undo when an item turns out not to be stored.
enum Undo {
    Queue(Key32, QueueState),
    Sender((Key32, Key32), Usage),
    Account(String, Usage),
    Dedup(DedupKey),
}

fn add(u: Usage, bytes: u64) -> Usage {
    Usage {
        items: u.items.saturating_add(1),
        bytes: u.bytes.saturating_add(bytes),
    }
}

/// The first cap `u` plus one item of `bytes` would exceed (inclusive caps).
fn over(
    u: Usage,
    bytes: u64,
    max_items: u64,
    max_bytes: u64,
    kinds: [QuotaKind; 2],
) -> Option<QuotaKind> {
    let next = add(u, bytes);
    if next.items > max_items {
        Some(kinds[0])
    } else if next.bytes > max_bytes {
        Some(kinds[1])
    } else {
        None
    }
}

/// The quota one more item of `bytes` would exceed, in the keyspace's order.
fn over_quota(
    q: Usage,
    s: Usage,
    a: Option<Usage>,
    bytes: u64,
    quotas: &Quotas,
) -> Option<QuotaKind> {
    use QuotaKind::*;
    over(
        q,
        bytes,
        quotas.max_queue_items,
        quotas.max_queue_bytes,
        [QueueItems, QueueBytes],
    )
    .or_else(|| {
        over(
            s,
            bytes,
            quotas.max_sender_items,
            quotas.max_sender_bytes,
            [SenderItems, SenderBytes],
        )
    })
    .or_else(|| {
        a.and_then(|a| {
            over(
                a,
                bytes,
                quotas.max_account_items,
                quotas.max_account_bytes,
                [AccountItems, AccountBytes],
            )
        })
    })
}

/// Decide the batch `reqs` at `now` against `snap`.
pub(crate) fn plan(reqs: &[InsertRequest], mut snap: Snapshot, now: u64) -> Plan {
    let start_queues = snap.queues.clone();
    let start_senders = snap.senders.clone();
    let start_accounts = snap.accounts.clone();
    let mut out = Plan::default();
    for (ri, req) in reqs.iter().enumerate() {
        let mut undo = Vec::new();
        let rows_before = out.rows.len();
        let outcome = plan_one(ri, req, &mut snap, now, &mut undo, &mut out.rows);
        if !matches!(outcome, InsertOutcome::Stored { .. }) {
            out.rows.truncate(rows_before);
            for u in undo.into_iter().rev() {
                match u {
                    Undo::Queue(k, v) => {
                        snap.queues.insert(k, v);
                    }
                    Undo::Sender(k, v) => {
                        snap.senders.insert(k, v);
                    }
                    Undo::Account(k, v) => {
                        snap.accounts.insert(k, v);
                    }
                    Undo::Dedup(k) => {
                        snap.dedup.remove(&k);
                    }
                }
            }
        }
        out.outcomes.push(outcome);
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
    out
}

/// One item as one logical operation; its changes to `snap` are noted in `undo` (the caller
/// reverts them unless it was stored).
fn plan_one(
    ri: usize,
    req: &InsertRequest,
    snap: &mut Snapshot,
    now: u64,
    undo: &mut Vec<Undo>,
    rows: &mut Vec<NewRow>,
) -> InsertOutcome {
    let item = &req.item;
    if req.require_live_sender && !snap.live.contains_key(&item.sender) {
        return InsertOutcome::SenderNotEnrolled;
    }
    let mut accounts = Vec::with_capacity(item.targets.len());
    for tg in &item.targets {
        match snap.live.get(&tg.target) {
            Some(a) => accounts.push(a.clone()),
            None => return InsertOutcome::TargetNotEnrolled { target: tg.target },
        }
    }
    let mut seqs = Vec::with_capacity(item.targets.len());
    let mut any_new = false;
    let mut first_dup_at = None;
    for (ti, (tg, account)) in item.targets.iter().zip(accounts).enumerate() {
        let key = (tg.target, item.sender, item.item_id.clone());
        if let Some(d) = snap.dedup.get(&key) {
            if d.wire_hash != tg.wire_hash {
                return InsertOutcome::Conflict { target: tg.target };
            }
            first_dup_at.get_or_insert(d.accepted_at_ms);
            seqs.push(TargetSeq {
                seq: d.seq,
                duplicate: true,
            });
            continue;
        }
        let bytes = tg.wire.len() as u64;
        let q = snap.queues.get(&tg.target).copied().unwrap_or_default();
        let sk = (tg.target, item.sender);
        let s = snap.senders.get(&sk).copied().unwrap_or_default();
        let a = account
            .as_ref()
            .map(|a| snap.accounts.get(a).copied().unwrap_or_default());
        if let Some(which) = over_quota(q.usage, s, a, bytes, &req.quotas) {
            return InsertOutcome::Quota {
                target: tg.target,
                which,
            };
        }
        let seq = q.head.saturating_add(1).max(now);
        undo.push(Undo::Queue(tg.target, q));
        snap.queues.insert(
            tg.target,
            QueueState {
                head: seq,
                usage: add(q.usage, bytes),
            },
        );
        undo.push(Undo::Sender(sk, s));
        snap.senders.insert(sk, add(s, bytes));
        if let (Some(name), Some(a)) = (account, a) {
            undo.push(Undo::Account(name.clone(), a));
            snap.accounts.insert(name, add(a, bytes));
        }
        undo.push(Undo::Dedup(key.clone()));
        snap.dedup.insert(
            key,
            DedupHit {
                wire_hash: tg.wire_hash,
                seq,
                accepted_at_ms: now,
            },
        );
        rows.push(NewRow {
            req: ri,
            target: ti,
            seq,
        });
        seqs.push(TargetSeq {
            seq,
            duplicate: false,
        });
        any_new = true;
    }
    InsertOutcome::Stored {
        at_ms: if any_new {
            now
        } else {
            first_dup_at.unwrap_or(now)
        },
        targets: seqs,
    }
}
