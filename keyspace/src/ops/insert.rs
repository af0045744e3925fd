//! Item insert: the rule is relay-store's (`rules::insert::decide`: live sender and targets,
//! dedup, quotas, seq, expiry, all or nothing); this file answers its reads from the writer's
//! transaction and writes the rows it decided (item, expiry row, usage, seq head, dedup row).

use crate::codec::{self, ItemRecord, UsageScope};
use crate::parts::Part;
use crate::reader;
use crate::writer::Tx;
use relay_store::rules::{self, insert::Scope};
use relay_store::{DedupRow, InsertOutcome, InsertRequest, Key32, Result, Usage};

use super::{enrol, queue};

/// Insert one item over all its targets atomically: dedup per (sender, item_id, target),
/// conflict by wire hash, quotas, seq = max(next_seq, now_ms), usage counters, expiry index.
/// One insert as one logical operation: anything but `Stored` leaves no trace (the rule decides
/// before anything is written; the savepoint undoes a write that fails halfway).
pub(crate) fn insert_one(tx: &mut Tx<'_>, req: InsertRequest) -> Result<InsertOutcome> {
    let sp = tx.savepoint();
    let out = insert_inner(tx, req);
    if !matches!(out, Ok(InsertOutcome::Stored { .. })) {
        tx.rollback_to(sp);
    }
    out
}

fn insert_inner(tx: &mut Tx<'_>, req: InsertRequest) -> Result<InsertOutcome> {
    // A revocation committed after the push's hop check refuses it here (same writer: nothing
    // can slip in between these reads and the commit).
    let now = tx.now_ms;
    let decision = rules::insert::decide(&req, now, &Reads(tx))?;
    let InsertRequest { mut item, .. } = req;
    for row in decision.rows {
        let t = &mut item.targets[row.target];
        tx.put(Part::Seqs, &t.target, codec::enc(&row.seq));
        let dkey = codec::dedup_key(&t.target, &item.sender, &item.item_id);
        let rec = ItemRecord {
            kind: item.kind,
            item_id: item.item_id.clone(),
            sender: item.sender,
            // Each row names its own target: the wire moves, it is not copied.
            wire: std::mem::take(&mut t.wire),
            wire_hash: t.wire_hash,
            bytes: row.bytes,
            accepted_at_ms: now,
            expires_at_ms: row.expires_at_ms,
            account: row.account,
        };
        queue::put_item(tx, &t.target, row.seq, &rec)?;
        queue::put_dedup(
            tx,
            &dkey,
            &DedupRow {
                wire_hash: t.wire_hash,
                seq: row.seq,
                accepted_at_ms: now,
            },
        );
    }
    Ok(decision.outcome)
}

/// The insert rule's reads, from the writer's transaction (its own writes included).
struct Reads<'a, 't>(&'a Tx<'t>);

impl rules::insert::InsertReads for Reads<'_, '_> {
    fn live(&self, key: &Key32) -> Result<Option<Option<String>>> {
        enrol::live_account(self.0, key)
    }
    fn dedup(&self, target: &Key32, sender: &Key32, item_id: &str) -> Result<Option<DedupRow>> {
        reader::dedup_row(self.0, &codec::dedup_key(target, sender, item_id))
    }
    fn usage(&self, scope: Scope<'_>) -> Result<Usage> {
        let scope = match scope {
            Scope::Target(t) => UsageScope::Target(*t),
            Scope::Sender { target, sender } => UsageScope::Sender {
                target: *target,
                sender: *sender,
            },
            Scope::Account(a) => UsageScope::Account(a.to_string()),
        };
        reader::usage(self.0, &scope)
    }
    fn head(&self, target: &Key32) -> Result<u64> {
        reader::head(self.0, target)
    }
}
