//! Item insert: every target (and a host's push's sender) live-enrolled at commit time, dedup per (sender, item_id, target)
//! with the wire hash deciding duplicate vs conflict, inclusive quotas for new targets, seq
//! allocation, usage and expiry, all or nothing.

use crate::api::{
    DedupRow, InsertOutcome, InsertRequest, Key32, Pending, QuotaKind, Quotas, Result, TargetSeq,
    NEVER_EXPIRES,
};
use crate::codec::{self, ItemRecord, UsageScope};
use crate::reader;
use crate::writer::Tx;
use crate::Store;

use super::{enrol, queue};

impl Store {
    /// Insert one item over all its targets atomically: dedup per (sender, item_id, target),
    /// conflict by wire hash, quotas, seq = max(next_seq, now_ms), usage counters, expiry index.
    pub fn insert(&self, req: InsertRequest) -> Pending<InsertOutcome> {
        self.submit(move |tx| insert_one(tx, req))
    }

    /// Insert several items, each its own atomic operation, all in the same commit group.
    pub fn insert_many(&self, reqs: Vec<InsertRequest>) -> Pending<Vec<InsertOutcome>> {
        self.submit(move |tx| reqs.into_iter().map(|r| insert_one(tx, r)).collect())
    }
}

/// One insert as one logical operation: anything but `Stored` leaves no trace.
pub(crate) fn insert_one(tx: &mut Tx<'_>, req: InsertRequest) -> Result<InsertOutcome> {
    let sp = tx.savepoint();
    let out = insert_inner(tx, req);
    if !matches!(out, Ok(InsertOutcome::Stored { .. })) {
        tx.rollback_to(sp);
    }
    out
}

fn insert_inner(tx: &mut Tx<'_>, req: InsertRequest) -> Result<InsertOutcome> {
    let InsertRequest {
        item,
        quotas,
        retention_ms,
        require_live_sender,
    } = req;
    // A revocation committed after the push's hop check refuses it here (same writer: nothing
    // can slip in between this read and the commit).
    if require_live_sender && enrol::live(tx, &item.sender)?.is_none() {
        return Ok(InsertOutcome::SenderNotEnrolled);
    }
    let mut accounts = Vec::with_capacity(item.targets.len());
    for t in &item.targets {
        match enrol::live(tx, &t.target)? {
            Some(e) => accounts.push(e.account),
            None => return Ok(InsertOutcome::TargetNotEnrolled { target: t.target }),
        }
    }
    let now = tx.now_ms;
    let mut seqs = Vec::with_capacity(item.targets.len());
    let mut any_new = false;
    let mut first_dup_at = None;
    for (t, account) in item.targets.into_iter().zip(accounts) {
        let dkey = codec::dedup_key(&t.target, &item.sender, &item.item_id);
        if let Some(row) = reader::dedup_row(tx, &dkey)? {
            if row.wire_hash != t.wire_hash {
                return Ok(InsertOutcome::Conflict { target: t.target });
            }
            first_dup_at.get_or_insert(row.accepted_at_ms);
            seqs.push(TargetSeq {
                seq: row.seq,
                duplicate: true,
            });
            continue;
        }
        let bytes = t.wire.len() as u64;
        if let Some(which) = over_quota(
            tx,
            &t.target,
            &item.sender,
            account.as_deref(),
            bytes,
            &quotas,
        )? {
            return Ok(InsertOutcome::Quota {
                target: t.target,
                which,
            });
        }
        let seq = queue::alloc_seq(tx, &t.target)?;
        let rec = ItemRecord {
            kind: item.kind,
            item_id: item.item_id.clone(),
            sender: item.sender,
            wire: t.wire,
            wire_hash: t.wire_hash,
            bytes,
            accepted_at_ms: now,
            expires_at_ms: expiry(now, retention_ms),
            account,
        };
        queue::put_item(tx, &t.target, seq, &rec)?;
        queue::put_dedup(
            tx,
            &dkey,
            &DedupRow {
                wire_hash: t.wire_hash,
                seq,
                accepted_at_ms: now,
            },
        );
        seqs.push(TargetSeq {
            seq,
            duplicate: false,
        });
        any_new = true;
    }
    let at_ms = if any_new {
        now
    } else {
        first_dup_at.unwrap_or(now)
    };
    Ok(InsertOutcome::Stored {
        at_ms,
        targets: seqs,
    })
}

/// When an item accepted at `now` expires ([`NEVER_EXPIRES`] stays never).
fn expiry(now: u64, retention_ms: u64) -> u64 {
    if retention_ms == NEVER_EXPIRES {
        NEVER_EXPIRES
    } else {
        now.saturating_add(retention_ms).min(NEVER_EXPIRES - 1)
    }
}

/// The first quota one more item of `bytes` would exceed (caps are inclusive).
fn over_quota(
    tx: &Tx<'_>,
    target: &Key32,
    sender: &Key32,
    account: Option<&str>,
    bytes: u64,
    q: &Quotas,
) -> Result<Option<QuotaKind>> {
    let fits = |u: crate::api::Usage, max_items: u64, max_bytes: u64| {
        (
            u.items.saturating_add(1) <= max_items,
            u.bytes.saturating_add(bytes) <= max_bytes,
        )
    };
    let t = reader::usage(tx, &UsageScope::Target(*target))?;
    match fits(t, q.max_queue_items, q.max_queue_bytes) {
        (false, _) => return Ok(Some(QuotaKind::QueueItems)),
        (_, false) => return Ok(Some(QuotaKind::QueueBytes)),
        _ => {}
    }
    let s = reader::usage(
        tx,
        &UsageScope::Sender {
            target: *target,
            sender: *sender,
        },
    )?;
    match fits(s, q.max_sender_items, q.max_sender_bytes) {
        (false, _) => return Ok(Some(QuotaKind::SenderItems)),
        (_, false) => return Ok(Some(QuotaKind::SenderBytes)),
        _ => {}
    }
    if let Some(a) = account {
        let u = reader::usage(tx, &UsageScope::Account(a.to_string()))?;
        match fits(u, q.max_account_items, q.max_account_bytes) {
            (false, _) => return Ok(Some(QuotaKind::AccountItems)),
            (_, false) => return Ok(Some(QuotaKind::AccountBytes)),
            _ => {}
        }
    }
    Ok(None)
}
