//! Schema version in `meta`: first-open initialisation, refusal of newer stores, and migration
//! of older ones that keeps the epoch and moves the version marker last.

use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use fjall::{PersistMode, Readable};

use crate::api::{Key32, Result, SenderList, StoreError, SCHEMA_VERSION};
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
    if from < 3 {
        build_sender_index(parts)?;
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

/// Schema 2 -> 3: build `sender_index` (sender ++ target for every sender a stored list names)
/// in batches of about [`MIGRATE_CHUNK`] rows. It first empties the partition: rows left by an
/// interrupted run are correct, but a schema-2 relay that opened the store since (the version
/// marker still said 2) may have changed lists without them. Returns the rows written.
fn build_sender_index(parts: &Parts) -> Result<u64> {
    clear(parts, Part::SenderIndex)?;
    let mut start = Bound::Unbounded;
    let mut written = 0u64;
    loop {
        let mut b = DirectBatch::new(parts);
        let mut in_batch = 0usize;
        let mut last = None;
        for g in parts
            .ks(Part::SenderLists)
            .range::<&[u8], _>((start.as_ref().map(Vec::as_slice), Bound::Unbounded))
        {
            let (k, v) = g.into_inner()?;
            let list: SenderList = codec::dec(&v, "sender list")?;
            let target: Key32 = k.as_ref().try_into().map_err(|_| {
                StoreError::Corrupt("a sender list is keyed by something not a host key".into())
            })?;
            written += list.senders.len() as u64;
            for s in &list.senders {
                b.put(
                    Part::SenderIndex,
                    &codec::sender_index_key(s, &target),
                    Vec::new(),
                );
            }
            in_batch += list.senders.len().max(1);
            last = Some(k.to_vec());
            // A list names at most 1,024 keys, so a batch holds at most MIGRATE_CHUNK + 1,024 rows.
            if in_batch >= MIGRATE_CHUNK {
                break;
            }
        }
        let Some(last) = last else {
            break;
        };
        start = Bound::Excluded(last);
        b.commit()?;
        crate::failpoint::hit("migrate-after-batch");
    }
    if written > 0 {
        tracing::info!(rows = written, "sender-list index built");
    }
    Ok(written)
}

/// Remove every row of `part`, in batches of [`MIGRATE_CHUNK`] (scanning on from the last
/// removed key, not over its own tombstones).
fn clear(parts: &Parts, part: Part) -> Result<u64> {
    let mut start: Bound<Vec<u8>> = Bound::Unbounded;
    let mut removed = 0u64;
    loop {
        let keys: Vec<fjall::Slice> = parts
            .ks(part)
            .range::<&[u8], _>((start.as_ref().map(Vec::as_slice), Bound::Unbounded))
            .take(MIGRATE_CHUNK)
            .map(|g| g.key())
            .collect::<std::result::Result<_, _>>()?;
        let Some(last) = keys.last() else {
            break;
        };
        start = Bound::Excluded(last.to_vec());
        let mut b = DirectBatch::new(parts);
        for k in &keys {
            b.remove(part, k);
        }
        b.commit()?;
        removed += keys.len() as u64;
    }
    Ok(removed)
}

/// Test hook: give a closed store the schema-2 layout (no `sender_index`) and version, as a
/// store written by a schema-2 relay has; returns the index rows removed. Not part of the
/// supported API.
///
/// # Errors
/// As [`crate::Store::open`].
#[doc(hidden)]
pub fn downgrade_to_schema_2_for_tests(dir: &Path) -> Result<u64> {
    let engine = crate::store::open_engine(dir, false)?;
    let removed = clear(&engine.parts, Part::SenderIndex)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&2u32));
    b.commit_durable()?;
    Ok(removed)
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
    clear(&engine.parts, Part::SenderIndex)?;
    let moved = move_dedup_index(&engine.parts, Part::DedupExpiry, Part::Expiry)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&1u32));
    b.commit_durable()?;
    Ok(moved)
}

/// Test hook: write one raw row into a partition (by name) of a closed store, as a damaged or
/// foreign writer might have left it. Not part of the supported API.
///
/// # Errors
/// `Corrupt` for an unknown partition name; otherwise as [`crate::Store::open`].
#[doc(hidden)]
pub fn put_raw_row_for_tests(dir: &Path, partition: &str, key: &[u8], value: &[u8]) -> Result<()> {
    let part = Part::by_name(partition)
        .ok_or_else(|| StoreError::Corrupt(format!("no partition named {partition:?}")))?;
    let engine = crate::store::open_engine(dir, false)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(part, key, value.to_vec());
    b.commit_durable()
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
