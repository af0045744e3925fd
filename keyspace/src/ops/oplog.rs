//! The relay log (`ops`): newest [`KEEP`] entries, oldest dropped as new ones arrive.

use crate::api::{OpEntry, Pending, Result};
use crate::codec::{self, meta_key};
use crate::parts::Part;
use crate::reader::meta_u64;
use crate::writer::Tx;
use crate::Store;

/// Entries kept.
pub(crate) const KEEP: u64 = 1_000;

/// Append an entry inside the current operation.
pub(crate) fn append(tx: &mut Tx<'_>, kind: &str, detail: &str) -> Result<()> {
    let n = meta_u64(tx, meta_key::OPS_NEXT)?.unwrap_or(0);
    let entry = OpEntry {
        at_ms: tx.now_ms,
        kind: kind.into(),
        detail: detail.into(),
    };
    tx.put(Part::Ops, &codec::ops_key(n), codec::enc(&entry));
    if let Some(old) = n.checked_sub(KEEP) {
        tx.del(Part::Ops, &codec::ops_key(old));
    }
    tx.put(Part::Meta, meta_key::OPS_NEXT, codec::enc(&(n + 1)));
    Ok(())
}

impl Store {
    /// Append to the relay log (keeps the newest 1,000 entries).
    pub fn log_op(&self, kind: &str, detail: &str) -> Pending<()> {
        let (kind, detail) = (kind.to_string(), detail.to_string());
        self.submit(move |tx| append(tx, &kind, &detail))
    }
}
