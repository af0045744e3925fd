//! Schema version in `meta`: first-open initialisation, refusal of newer stores, and migration
//! of older ones in one atomic batch that keeps the epoch.

use std::path::Path;
use std::sync::Arc;

use fjall::{PersistMode, Readable};

use crate::api::{Result, StoreError, SCHEMA_VERSION};
use crate::codec::{self, meta_key};
use crate::parts::{Part, Parts};
use crate::reader::{self, SnapView};

/// A batch plus the ops-log bookkeeping needed outside the writer (open, restore).
pub(crate) struct DirectBatch<'a> {
    parts: &'a Parts,
    batch: fjall::OwnedWriteBatch,
}

impl<'a> DirectBatch<'a> {
    pub(crate) fn new(parts: &'a Parts) -> Self {
        DirectBatch {
            parts,
            batch: parts.db.batch(),
        }
    }

    pub(crate) fn put(&mut self, part: Part, key: &[u8], value: Vec<u8>) {
        self.batch.insert(self.parts.ks(part), key, value);
    }

    /// Append an ops entry (keeps the newest entries, like the writer's log).
    pub(crate) fn log(&mut self, at_ms: u64, kind: &str, detail: &str) -> Result<()> {
        let n = self.parts.ks(Part::Meta).get(meta_key::OPS_NEXT)?;
        let n: u64 = match n {
            Some(v) => codec::dec(&v, "meta ops_next")?,
            None => 0,
        };
        let entry = crate::api::OpEntry {
            at_ms,
            kind: kind.into(),
            detail: detail.into(),
        };
        self.put(Part::Ops, &codec::ops_key(n), codec::enc(&entry));
        if let Some(old) = n.checked_sub(crate::ops::oplog::KEEP) {
            self.batch
                .remove(self.parts.ks(Part::Ops), codec::ops_key(old));
        }
        self.put(Part::Meta, meta_key::OPS_NEXT, codec::enc(&(n + 1)));
        Ok(())
    }

    /// Commit without fsync (a later `commit_durable` or persist makes it durable).
    pub(crate) fn commit(self) -> Result<()> {
        self.batch.commit()?;
        Ok(())
    }

    /// Commit and fsync.
    pub(crate) fn commit_durable(self) -> Result<()> {
        self.batch.commit()?;
        self.parts.db.persist(PersistMode::SyncAll)?;
        Ok(())
    }
}

/// Initialise meta on first open, refuse a newer schema, migrate an older one.
///
/// # Errors
/// `SchemaTooNew`, `Corrupt` (meta without a schema but with data), `Engine`.
pub(crate) fn prepare(parts: &Arc<Parts>, now_ms: u64) -> Result<()> {
    let view = SnapView {
        snap: parts.db.snapshot(),
        parts: Arc::clone(parts),
    };
    let found = reader::schema_version(&view)?;
    let has_epoch = view
        .snap
        .get(parts.ks(Part::Meta), meta_key::EPOCH)?
        .is_some();
    drop(view);
    match found {
        None if !has_epoch => {
            let mut b = DirectBatch::new(parts);
            b.put(
                Part::Meta,
                meta_key::SCHEMA_VERSION,
                codec::enc(&SCHEMA_VERSION),
            );
            b.put(Part::Meta, meta_key::EPOCH, codec::enc(&new_epoch()));
            b.put(Part::Meta, meta_key::CREATED, codec::enc(&now_ms));
            b.commit_durable()
        }
        None => Err(StoreError::Corrupt(
            "meta has an epoch but no schema version".into(),
        )),
        Some(v) if v > SCHEMA_VERSION => Err(StoreError::SchemaTooNew {
            found: v,
            supported: SCHEMA_VERSION,
        }),
        Some(v) if v < SCHEMA_VERSION => migrate(parts, v, now_ms),
        Some(_) => Ok(()),
    }
}

/// A fresh epoch: a random UUID v4 string.
pub(crate) fn new_epoch() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Bring a store of schema `from` up to [`SCHEMA_VERSION`] in one atomic batch.
/// Each step rewrites what changed between versions; the epoch is never touched.
fn migrate(parts: &Parts, from: u32, now_ms: u64) -> Result<()> {
    let mut b = DirectBatch::new(parts);
    // Version 0 (pre-release layout) has the same records as version 1: only the marker moves.
    // Later steps add their record rewrites here, in order, into the same batch.
    b.put(
        Part::Meta,
        meta_key::SCHEMA_VERSION,
        codec::enc(&SCHEMA_VERSION),
    );
    b.log(
        now_ms,
        "migrate",
        &format!("schema {from} -> {SCHEMA_VERSION}"),
    )?;
    b.commit_durable()?;
    tracing::info!(from, to = SCHEMA_VERSION, "store schema migrated");
    Ok(())
}

/// Test hook: rewrite the stored schema version of a closed store (to fake an older or newer
/// store). Not part of the supported API.
///
/// # Errors
/// As [`crate::Store::open`].
#[doc(hidden)]
pub fn set_schema_version_for_tests(dir: &Path, version: u32) -> Result<()> {
    let engine = crate::store::open_engine(dir, false)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&version));
    b.commit_durable()
}
