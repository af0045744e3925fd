//! Schema version in `meta`: first-open initialisation, refusal of newer stores, and migration
//! of older ones that keeps the epoch and moves the version marker last.

use std::ops::Bound;
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

    pub(crate) fn remove(&mut self, part: Part, key: &[u8]) {
        self.batch.remove(self.parts.ks(part), key);
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
            self.remove(Part::Ops, &codec::ops_key(old));
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

/// Bring a store of schema `from` up to [`SCHEMA_VERSION`]. Each step rewrites what changed
/// between versions; the epoch is never touched. A step may commit in several batches when
/// each batch leaves a store that the same step can finish after a crash: the version marker
/// moves only in the last batch, so an interrupted migration simply runs again.
fn migrate(parts: &Parts, from: u32, now_ms: u64) -> Result<()> {
    // Version 0 (pre-release layout) has the same records as version 1.
    if from < 2 {
        move_dedup_index(parts, Part::Expiry, Part::DedupExpiry)?;
    }
    let mut b = DirectBatch::new(parts);
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

/// Rows moved per batch by a migration step (bounds its memory on a large store).
const MIGRATE_CHUNK: usize = 10_000;

/// Schema 1 -> 2: the dedup prune index (`EXPIRY_DEDUP` rows) leaves `expiry` for its own
/// partition. Both indexes are ordered by time; sharing one partition interleaved two
/// growing key ranges, so every flushed table overlapped older ones and compaction rewrote
/// them again and again (docs/performance.md). Moves in chunks: insert there, remove here.
fn move_dedup_index(parts: &Parts, from: Part, to: Part) -> Result<u64> {
    let end = [codec::EXPIRY_DEDUP + 1];
    let mut start = Bound::Included(vec![codec::EXPIRY_DEDUP]);
    let mut moved = 0u64;
    loop {
        // Each batch scans on from the last moved key, not over the tombstones just written.
        let rows: Vec<(fjall::Slice, fjall::Slice)> = parts
            .ks(from)
            .range::<&[u8], _>((start.as_ref().map(Vec::as_slice), Bound::Excluded(&end[..])))
            .take(MIGRATE_CHUNK)
            .map(|g| g.into_inner())
            .collect::<std::result::Result<_, _>>()?;
        let Some((last, _)) = rows.last() else {
            break;
        };
        start = Bound::Excluded(last.to_vec());
        let mut b = DirectBatch::new(parts);
        for (k, v) in &rows {
            b.put(to, k, v.to_vec());
            b.remove(from, k);
        }
        b.commit()?;
        crate::failpoint::hit("migrate-after-batch");
        moved += rows.len() as u64;
    }
    if moved > 0 {
        tracing::info!(
            rows = moved,
            from = from.name(),
            to = to.name(),
            "dedup prune index moved"
        );
    }
    Ok(moved)
}

/// Test hook: give a closed store the schema-1 layout (dedup prune index inside `expiry`) and
/// version, as a store written by a schema-1 relay has; returns the rows moved. Not part of
/// the supported API.
///
/// # Errors
/// As [`crate::Store::open`].
#[doc(hidden)]
pub fn downgrade_to_schema_1_for_tests(dir: &Path) -> Result<u64> {
    let engine = crate::store::open_engine(dir, false)?;
    let moved = move_dedup_index(&engine.parts, Part::DedupExpiry, Part::Expiry)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&1u32));
    b.commit_durable()?;
    Ok(moved)
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
