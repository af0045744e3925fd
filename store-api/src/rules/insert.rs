//! One item's insert over all its targets, decided once for every backend: the sender live (a
//! host's push), every target live, then per target dedup ([`dedup::verdict`]), quotas
//! ([`quota::first_exceeded`]) and the seq ([`seq::next`]); all or nothing. The backend answers
//! the reads ([`InsertReads`], from its transaction or a locked snapshot) and, when the outcome
//! is `Stored`, writes the [`NewRow`]s; a refused item writes nothing.

pub mod rows;

use crate::rules::{dedup, quota, seq, sweep};
use crate::types::{DedupRow, InsertOutcome, InsertRequest, Key32, Result, TargetSeq, Usage};

/// A usage counter an item is charged to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// A target's whole queue.
    Target(&'a Key32),
    /// A sender's share of a target's queue.
    Sender {
        /// The queue.
        target: &'a Key32,
        /// The sender whose share it is.
        sender: &'a Key32,
    },
    /// A proven account (over all its targets).
    Account(&'a str),
}

/// What the insert rule reads, as the backend's state holds it before this item.
pub trait InsertReads {
    /// `Some(account)` when `key` has a live (enrolled, not revoked) enrolment, else `None`.
    ///
    /// # Errors
    /// The backend's read error.
    fn live(&self, key: &Key32) -> Result<Option<Option<String>>>;
    /// The dedup row of (target, sender, item_id).
    ///
    /// # Errors
    /// The backend's read error.
    fn dedup(&self, target: &Key32, sender: &Key32, item_id: &str) -> Result<Option<DedupRow>>;
    /// A usage counter (zero when none is stored).
    ///
    /// # Errors
    /// The backend's read error.
    fn usage(&self, scope: Scope<'_>) -> Result<Usage>;
    /// The last seq allocated for `target` (0 when none).
    ///
    /// # Errors
    /// The backend's read error.
    fn head(&self, target: &Key32) -> Result<u64>;
}

/// A new item row to write: `item.targets[target]` at `seq`, with its dedup row (accepted now),
/// its expiry and the account it is charged to (its target's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRow {
    /// Index into the item's targets.
    pub target: usize,
    /// The seq it gets in that queue.
    pub seq: u64,
    /// Its wire bytes, charged to every scope.
    pub bytes: u64,
    /// When the sweep expires it.
    pub expires_at_ms: u64,
    /// The account charged (the target's).
    pub account: Option<String>,
}

/// The outcome, and the rows to write when it is `Stored` (none otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Stored, or why not.
    pub outcome: InsertOutcome,
    /// The rows to write (empty unless stored).
    pub rows: Vec<NewRow>,
}

impl Decision {
    fn refused(outcome: InsertOutcome) -> Self {
        Decision {
            outcome,
            rows: Vec::new(),
        }
    }
}

/// This item's own new rows so far, so a later target of the same item sees them (two targets
/// charged to one account; a target named twice).
struct Own<'a> {
    rows: Vec<(&'a Key32, Option<&'a str>, u64, DedupRow)>,
}

impl Own<'_> {
    fn dedup(&self, target: &Key32) -> Option<DedupRow> {
        self.rows
            .iter()
            .rev()
            .find(|r| r.0 == target)
            .map(|r| r.3.clone())
    }
    fn head(&self, target: &Key32) -> Option<u64> {
        self.rows
            .iter()
            .rev()
            .find(|r| r.0 == target)
            .map(|r| r.3.seq)
    }
    fn added(&self, f: impl Fn(&Key32, Option<&str>) -> bool) -> Usage {
        self.rows
            .iter()
            .filter(|r| f(r.0, r.1))
            .fold(Usage::default(), |u, r| quota::plus_one(u, r.2))
    }
}

fn sum(a: Usage, b: Usage) -> Usage {
    Usage {
        items: a.items.saturating_add(b.items),
        bytes: a.bytes.saturating_add(b.bytes),
    }
}

/// Decide `req` at `now_ms` against what `r` reads.
///
/// # Errors
/// A read error of `r`.
pub fn decide(req: &InsertRequest, now_ms: u64, r: &impl InsertReads) -> Result<Decision> {
    let item = &req.item;
    if req.require_live_sender && r.live(&item.sender)?.is_none() {
        return Ok(Decision::refused(InsertOutcome::SenderNotEnrolled));
    }
    let mut accounts = Vec::with_capacity(item.targets.len());
    for t in &item.targets {
        match r.live(&t.target)? {
            Some(a) => accounts.push(a),
            None => {
                return Ok(Decision::refused(InsertOutcome::TargetNotEnrolled {
                    target: t.target,
                }))
            }
        }
    }
    let mut own = Own { rows: Vec::new() };
    let mut rows = Vec::new();
    let mut seqs = Vec::with_capacity(item.targets.len());
    let mut first_dup_at = None;
    for (ti, (t, account)) in item.targets.iter().zip(&accounts).enumerate() {
        let stored = match own.dedup(&t.target) {
            Some(row) => Some(row),
            None => r.dedup(&t.target, &item.sender, &item.item_id)?,
        };
        match dedup::verdict(stored.as_ref(), &t.wire_hash) {
            dedup::Verdict::Conflict => {
                return Ok(Decision::refused(InsertOutcome::Conflict {
                    target: t.target,
                }))
            }
            dedup::Verdict::Duplicate {
                seq,
                accepted_at_ms,
            } => {
                first_dup_at.get_or_insert(accepted_at_ms);
                seqs.push(TargetSeq {
                    seq,
                    duplicate: true,
                });
                continue;
            }
            dedup::Verdict::New => {}
        }
        let bytes = t.wire.len() as u64;
        let account = account.as_deref();
        let queue = sum(
            r.usage(Scope::Target(&t.target))?,
            own.added(|k, _| *k == t.target),
        );
        let sender = sum(
            r.usage(Scope::Sender {
                target: &t.target,
                sender: &item.sender,
            })?,
            own.added(|k, _| *k == t.target),
        );
        let charged = match account {
            Some(a) => Some(sum(
                r.usage(Scope::Account(a))?,
                own.added(|_, b| b == Some(a)),
            )),
            None => None,
        };
        if let Some(which) = quota::first_exceeded(queue, sender, charged, bytes, &req.quotas) {
            return Ok(Decision::refused(InsertOutcome::Quota {
                target: t.target,
                which,
            }));
        }
        let head = match own.head(&t.target) {
            Some(h) => h,
            None => r.head(&t.target)?,
        };
        let seq = seq::next(head, now_ms);
        own.rows.push((
            &t.target,
            account,
            bytes,
            DedupRow {
                wire_hash: t.wire_hash,
                seq,
                accepted_at_ms: now_ms,
            },
        ));
        rows.push(NewRow {
            target: ti,
            seq,
            bytes,
            expires_at_ms: sweep::expires_at(now_ms, req.retention_ms),
            account: account.map(str::to_string),
        });
        seqs.push(TargetSeq {
            seq,
            duplicate: false,
        });
    }
    Ok(Decision {
        outcome: InsertOutcome::Stored {
            at_ms: dedup::stored_at(!rows.is_empty(), first_dup_at, now_ms),
            targets: seqs,
        },
        rows,
    })
}

#[cfg(test)]
mod tests;
