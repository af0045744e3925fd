//! Schema version in `meta`: first-open initialisation, refusal of newer stores, and migration
//! of older ones that keeps the epoch and moves the version marker last.

use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;

use fjall::{PersistMode, Readable, Slice};

use crate::codec::{self, meta_key, LegacyOp, StoredOp};
use crate::ops::oplog::{self, LogStage};
use crate::parts::{Part, Parts};
use crate::reader::{self, Reader, SnapView};
use relay_store::rules::log::chain_hash;
use relay_store::{
    DedupRow, Key32, LogCheckpoint, LogRetention, Result, SenderList, StoreError, SCHEMA_VERSION,
};

/// A batch written outside the writer (open, migration, restore). Point reads of the
/// partitions the relay log reads (`meta`, `ops`) see its own staged writes, so the log's one
/// append path ([`oplog::append_at`]) serves it as it serves the writer.
pub(crate) struct DirectBatch<'a> {
    parts: &'a Parts,
    batch: fjall::OwnedWriteBatch,
    /// Staged writes to `meta` and `ops` (`None`: removed), for read-your-writes.
    staged: HashMap<(Part, Vec<u8>), Option<Vec<u8>>>,
}

impl<'a> DirectBatch<'a> {
    pub(crate) fn new(parts: &'a Parts) -> Self {
        DirectBatch {
            parts,
            batch: parts.db.batch(),
            staged: HashMap::new(),
        }
    }

    fn remember(part: Part) -> bool {
        matches!(part, Part::Meta | Part::Ops)
    }

    pub(crate) fn put(&mut self, part: Part, key: &[u8], value: Vec<u8>) {
        if Self::remember(part) {
            self.staged
                .insert((part, key.to_vec()), Some(value.clone()));
        }
        self.batch.insert(self.parts.ks(part), key, value);
    }

    pub(crate) fn remove(&mut self, part: Part, key: &[u8]) {
        if Self::remember(part) {
            self.staged.insert((part, key.to_vec()), None);
        }
        self.batch.remove(self.parts.ks(part), key);
    }

    /// Append a relay-log entry (same chain and bounds as the writer's log; `keep` as the
    /// store's open options give it).
    pub(crate) fn log(
        &mut self,
        at_ms: u64,
        keep: LogRetention,
        kind: &str,
        detail: &str,
    ) -> Result<()> {
        oplog::append_at(self, at_ms, keep, kind, detail)
    }

    /// Commit without fsync (a later `commit_durable` or persist makes it durable).
    pub(crate) fn commit(self) -> Result<()> {
        self.batch.commit().map_err(crate::engine_error)?;
        Ok(())
    }

    /// Commit and fsync.
    pub(crate) fn commit_durable(self) -> Result<()> {
        self.batch.commit().map_err(crate::engine_error)?;
        self.parts
            .db
            .persist(PersistMode::SyncAll)
            .map_err(crate::engine_error)?;
        Ok(())
    }
}

impl Reader for DirectBatch<'_> {
    fn get(&self, part: Part, key: &[u8]) -> Result<Option<Slice>> {
        if let Some(v) = self.staged.get(&(part, key.to_vec())) {
            return Ok(v.as_ref().map(|v| Slice::from(v.as_slice())));
        }
        self.parts.ks(part).get(key).map_err(crate::engine_error)
    }

    /// Not needed by the log (point reads only): reads the committed rows.
    fn range(
        &self,
        part: Part,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Slice, Slice)>> {
        self.parts
            .ks(part)
            .range::<&[u8], _>((lo, hi))
            .take(limit)
            .map(|g| g.into_inner().map_err(crate::engine_error))
            .collect()
    }
}

impl LogStage for DirectBatch<'_> {
    fn stage_put(&mut self, part: Part, key: &[u8], value: Vec<u8>) {
        self.put(part, key, value);
    }
    fn stage_del(&mut self, part: Part, key: &[u8]) {
        self.remove(part, key);
    }
}

/// Initialise meta on first open, refuse a newer schema, migrate an older one.
///
/// # Errors
/// `SchemaTooNew`, `Corrupt` (meta without a schema but with data), `Engine`.
pub(crate) fn prepare(parts: &Arc<Parts>, now_ms: u64, keep: LogRetention) -> Result<()> {
    let view = SnapView {
        snap: parts.db.snapshot(),
        parts: Arc::clone(parts),
    };
    let found = reader::schema_version(&view)?;
    let has_epoch = view
        .snap
        .get(parts.ks(Part::Meta), meta_key::EPOCH)
        .map_err(crate::engine_error)?
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
        Some(v) if v < SCHEMA_VERSION => migrate(parts, v, now_ms, keep),
        Some(_) => Ok(()),
    }?;
    count_enrolment_entries(parts)
}

/// A store written before the relay log's enrolment budget has no count of its enrolment
/// entries: count them once (a derived number: a crash before this commit counts again).
fn count_enrolment_entries(parts: &Parts) -> Result<()> {
    if parts
        .ks(Part::Meta)
        .get(meta_key::OPS_ENROL_HELD)
        .map_err(crate::engine_error)?
        .is_some()
    {
        return Ok(());
    }
    let n = oplog::count_enrolment_entries(parts)?;
    if n > 0 {
        let mut b = DirectBatch::new(parts);
        b.put(Part::Meta, meta_key::OPS_ENROL_HELD, codec::enc(&n));
        b.commit_durable()?;
    }
    Ok(())
}

/// A fresh epoch: a random UUID v4 string.
pub(crate) fn new_epoch() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Bring a store of schema `from` up to [`SCHEMA_VERSION`]. Each step rewrites what changed
/// between versions; the epoch is never touched. A step may commit in several batches when
/// each batch leaves a store that the same step can finish after a crash: the version marker
/// moves only in the last batch, so an interrupted migration simply runs again.
fn migrate(parts: &Parts, from: u32, now_ms: u64, keep: LogRetention) -> Result<()> {
    // Version 0 (pre-release layout) has the same records as version 1.
    if from < 2 {
        move_dedup_index(parts, Part::Expiry, Part::DedupExpiry)?;
    }
    if from < 3 {
        build_sender_index(parts)?;
    }
    let horizons = if from < 5 {
        rebuild_dedup_index(parts, now_ms)?
    } else {
        Horizons::default()
    };
    // The last batch: the relay log becomes a chain (schema 4), the migration is logged on it,
    // and the version marker moves, all at once: a crash before it leaves the old log as it was.
    let mut b = DirectBatch::new(parts);
    let chained = if from < 4 {
        chain_legacy_log(&mut b)?
    } else {
        0
    };
    b.put(
        Part::Meta,
        meta_key::SCHEMA_VERSION,
        codec::enc(&SCHEMA_VERSION),
    );
    b.log(
        now_ms,
        keep,
        "migrate",
        &format!(
            "schema {from} -> {SCHEMA_VERSION}{}",
            migrate_notes(from, chained, horizons)
        ),
    )?;
    relay_os::failpoint::hit("migrate-before-last-batch");
    b.commit_durable()?;
    tracing::info!(from, to = SCHEMA_VERSION, "store schema migrated");
    Ok(())
}

/// What the migrate entry says about the chain it started and the dedup index it rebuilt:
/// ` (note; note)`, or nothing.
fn migrate_notes(from: u32, chained: u64, h: Horizons) -> String {
    let mut notes = Vec::new();
    if from < 4 {
        notes.push(format!("relay log chained: {chained} earlier entries"));
    }
    if h.gone + h.queued > 0 {
        notes.push(format!(
            "dedup horizons: {} rows of gone items count from now, {} of queued items wait for their ack or expiry",
            h.gone, h.queued
        ));
    }
    if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    }
}

/// Schema 3 -> 4: hash every relay-log entry, in order, as the start of the chain. Schema 1-3
/// logs kept at most the newest 1,000 entries, so they fit in the migration's last batch. When
/// older entries were dropped before (the first kept seq is above 0), the checkpoint is the last
/// dropped seq with the zero hash: those entries were never hashed. Returns the entries chained.
fn chain_legacy_log(b: &mut DirectBatch<'_>) -> Result<u64> {
    let rows: Vec<(Slice, Slice)> = b
        .parts
        .ks(Part::Ops)
        .iter()
        .take(LEGACY_LOG_MAX + 1)
        .map(|g| g.into_inner())
        .collect::<std::result::Result<_, _>>()
        .map_err(crate::engine_error)?;
    if rows.len() > LEGACY_LOG_MAX {
        return Err(StoreError::Corrupt(format!(
            "the relay log holds more than the {LEGACY_LOG_MAX} entries a schema-3 store keeps"
        )));
    }
    let mut prev = [0u8; 32];
    let mut expect = None;
    for (k, v) in &rows {
        let seq = codec::ops_key_parse(k)
            .ok_or_else(|| StoreError::Corrupt("a relay-log key is not a position".into()))?;
        if expect.is_some_and(|e| e != seq) {
            return Err(StoreError::Corrupt(format!(
                "the relay log has a gap before entry {seq}"
            )));
        }
        if expect.is_none() && seq > 0 {
            oplog::put_checkpoint(
                b,
                &LogCheckpoint {
                    seq: seq - 1,
                    hash: prev,
                },
            );
        }
        let old: LegacyOp = codec::dec(v, "ops")?;
        let hash = chain_hash(&prev, seq, old.at_ms, &old.kind, &old.detail);
        let entry = StoredOp {
            at_ms: old.at_ms,
            kind: old.kind,
            detail: old.detail,
            hash,
        };
        b.put(Part::Ops, k, codec::enc(&entry));
        prev = hash;
        expect = Some(seq + 1);
    }
    if let Some(next) = expect {
        b.put(Part::Meta, meta_key::OPS_NEXT, codec::enc(&next));
        b.put(Part::Meta, meta_key::OPS_HEAD, codec::enc(&prev));
    }
    Ok(rows.len() as u64)
}

/// Most entries a schema 1-3 relay log held.
const LEGACY_LOG_MAX: usize = 1_000;

/// Rows moved per batch by a migration step (bounds its memory on a large store).
const MIGRATE_CHUNK: usize = 10_000;

/// Schema 1 -> 2: the dedup prune index (`EXPIRY_DEDUP` rows) leaves `expiry` for its own
/// partition. Both indexes are ordered by time; sharing one partition interleaved two
/// growing key ranges, so every flushed table overlapped older ones and compaction rewrote
/// them again and again (docs/performance-history.md). Moves in chunks: insert there, remove here.
fn move_dedup_index(parts: &Parts, from: Part, to: Part) -> Result<u64> {
    let end = [codec::EXPIRY_DEDUP + 1];
    let mut start = Bound::Included(vec![codec::EXPIRY_DEDUP]);
    let mut moved = 0u64;
    loop {
        let rows = next_chunk(parts, from, &mut start, Bound::Excluded(&end[..]))?;
        if rows.is_empty() {
            break;
        }
        let mut b = DirectBatch::new(parts);
        for (k, v) in &rows {
            b.put(to, k, v.to_vec());
            b.remove(from, k);
        }
        b.commit()?;
        relay_os::failpoint::hit("migrate-after-batch");
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
            let (k, v) = g.into_inner().map_err(crate::engine_error)?;
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
        relay_os::failpoint::hit("migrate-after-batch");
    }
    if written > 0 {
        tracing::info!(rows = written, "sender-list index built");
    }
    Ok(written)
}

/// What [`rebuild_dedup_index`] found.
#[derive(Debug, Clone, Copy, Default)]
struct Horizons {
    /// Dedup rows whose item had left its queue: indexed from now.
    gone: u64,
    /// Dedup rows of queued items: not indexed.
    queued: u64,
}

/// Schema 4 -> 5: the dedup prune index counts from when the item left its queue (spec §2, §7),
/// not from its acceptance. Rebuilt from `dedup`: the row of a queued item gets no index row (it
/// is never pruned while queued; its ack or expiry indexes it); the row of an item already gone
/// left at a time no schema-4 store recorded, at or before now, so its horizon counts from now
/// (never shorter than the rule). The index is emptied first and rebuilt in batches of
/// [`MIGRATE_CHUNK`] dedup rows, so an interrupted run simply starts over, also after a schema-4
/// relay opened the store in between (the version marker still said 4). Whether an item is
/// queued comes from one key scan of its target's queue (held for one target at a time, so
/// bounded by the queue quota).
fn rebuild_dedup_index(parts: &Parts, now_ms: u64) -> Result<Horizons> {
    clear(parts, Part::DedupExpiry)?;
    let mut found = Horizons::default();
    let mut start: Bound<Vec<u8>> = Bound::Unbounded;
    // Rows are in target order: the queued seqs of the current target, listed once.
    let mut queue: Option<(Key32, HashSet<u64>)> = None;
    loop {
        let rows = next_chunk(parts, Part::Dedup, &mut start, Bound::Unbounded)?;
        if rows.is_empty() {
            break;
        }
        let mut b = DirectBatch::new(parts);
        for (k, v) in &rows {
            let (target, _, _) = codec::dedup_key_parse(k)
                .ok_or_else(|| StoreError::Corrupt("a dedup key too short".into()))?;
            let row: DedupRow = codec::dec(v, "dedup")?;
            if queue.as_ref().is_none_or(|(t, _)| *t != target) {
                queue = Some((target, queued_seqs(parts, &b, &target)?));
            }
            let queued = queue.as_ref().is_some_and(|(_, q)| q.contains(&row.seq));
            if queued {
                found.queued += 1;
            } else {
                b.put(
                    Part::DedupExpiry,
                    &codec::expiry_dedup_key(now_ms, k),
                    Vec::new(),
                );
                found.gone += 1;
            }
        }
        b.commit()?;
        relay_os::failpoint::hit("migrate-after-batch");
    }
    if found.gone + found.queued > 0 {
        tracing::info!(
            gone = found.gone,
            queued = found.queued,
            "dedup prune index rebuilt"
        );
    }
    Ok(found)
}

/// The seqs queued for `target`: its item keys from the acked cursor on (keys only; one range
/// scan instead of a point lookup per dedup row, which took a minute per million rows).
fn queued_seqs(parts: &Parts, r: &DirectBatch<'_>, target: &Key32) -> Result<HashSet<u64>> {
    let lo = codec::item_key(target, reader::acked_through(r, target)?);
    let hi = codec::item_key(target, u64::MAX);
    let mut seqs = HashSet::new();
    for g in parts
        .ks(Part::Items)
        .range::<&[u8], _>((Bound::Excluded(&lo[..]), Bound::Included(&hi[..])))
    {
        if let Some((_, seq)) = codec::item_key_parse(&g.key().map_err(crate::engine_error)?) {
            seqs.insert(seq);
        }
    }
    Ok(seqs)
}

/// Test hook helper: the schema 1-4 dedup prune index, one row `d ++ accepted_at ++ dedup key`
/// for every dedup row, queued or not.
fn accepted_at_dedup_index(parts: &Parts) -> Result<u64> {
    clear(parts, Part::DedupExpiry)?;
    let mut start: Bound<Vec<u8>> = Bound::Unbounded;
    let mut written = 0u64;
    loop {
        let rows = next_chunk(parts, Part::Dedup, &mut start, Bound::Unbounded)?;
        if rows.is_empty() {
            break;
        }
        let mut b = DirectBatch::new(parts);
        for (k, v) in &rows {
            let row: DedupRow = codec::dec(v, "dedup")?;
            b.put(
                Part::DedupExpiry,
                &codec::expiry_dedup_key(row.accepted_at_ms, k),
                Vec::new(),
            );
        }
        b.commit()?;
        written += rows.len() as u64;
    }
    Ok(written)
}

/// The next at most [`MIGRATE_CHUNK`] rows of `part` from `start` up to `end`, moving `start`
/// past the last one, so each batch scans on from there, not over the rows or tombstones the
/// previous batch just wrote. Empty once the range is done.
fn next_chunk(
    parts: &Parts,
    part: Part,
    start: &mut Bound<Vec<u8>>,
    end: Bound<&[u8]>,
) -> Result<Vec<(Slice, Slice)>> {
    let rows: Vec<(Slice, Slice)> = parts
        .ks(part)
        .range::<&[u8], _>((start.as_ref().map(Vec::as_slice), end))
        .take(MIGRATE_CHUNK)
        .map(|g| g.into_inner())
        .collect::<std::result::Result<_, _>>()
        .map_err(crate::engine_error)?;
    if let Some((last, _)) = rows.last() {
        *start = Bound::Excluded(last.to_vec());
    }
    Ok(rows)
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
            .collect::<std::result::Result<_, _>>()
            .map_err(crate::engine_error)?;
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

/// Test hook: give a closed store the schema-2 layout (no `sender_index`, an unchained log) and version, as a
/// store written by a schema-2 relay has; returns the index rows removed. Not part of the
/// supported API.
///
/// # Errors
/// As [`crate::Store::open`].
#[doc(hidden)]
pub fn downgrade_to_schema_2_for_tests(dir: &Path) -> Result<u64> {
    let engine = crate::engine::open_engine(dir, false)?;
    accepted_at_dedup_index(&engine.parts)?;
    let removed = clear(&engine.parts, Part::SenderIndex)?;
    let mut b = DirectBatch::new(&engine.parts);
    unchain_log(&mut b)?;
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
    let engine = crate::engine::open_engine(dir, false)?;
    accepted_at_dedup_index(&engine.parts)?;
    clear(&engine.parts, Part::SenderIndex)?;
    let moved = move_dedup_index(&engine.parts, Part::DedupExpiry, Part::Expiry)?;
    let mut b = DirectBatch::new(&engine.parts);
    unchain_log(&mut b)?;
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
    let engine = crate::engine::open_engine(dir, false)?;
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
    let engine = crate::engine::open_engine(dir, false)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&version));
    b.commit_durable()
}

/// Test hook: remove one raw row from a partition (by name) of a closed store. Not part of the
/// supported API.
///
/// # Errors
/// `Corrupt` for an unknown partition name; otherwise as [`crate::Store::open`].
#[doc(hidden)]
pub fn remove_raw_row_for_tests(dir: &Path, partition: &str, key: &[u8]) -> Result<()> {
    let part = Part::by_name(partition)
        .ok_or_else(|| StoreError::Corrupt(format!("no partition named {partition:?}")))?;
    let engine = crate::engine::open_engine(dir, false)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.remove(part, key);
    b.commit_durable()
}

/// A partition's raw rows (key, value), in key order (test hooks).
pub(crate) type RawRows = Vec<(Vec<u8>, Vec<u8>)>;

/// Test hook: every raw row (key, value) of a partition (by name) of a closed store, in key
/// order. Not part of the supported API.
///
/// # Errors
/// `Corrupt` for an unknown partition name; otherwise as [`crate::Store::open`].
#[doc(hidden)]
pub fn raw_rows_for_tests(dir: &Path, partition: &str) -> Result<RawRows> {
    let mut all = raw_partitions_for_tests(dir, &[partition])?;
    Ok(all.pop().unwrap_or_default())
}

/// Test hook: [`raw_rows_for_tests`] of several partitions, read in one open of the store (a
/// test comparing whole layouts opens it once). Not part of the supported API.
///
/// # Errors
/// As [`raw_rows_for_tests`].
#[doc(hidden)]
pub fn raw_partitions_for_tests(dir: &Path, partitions: &[&str]) -> Result<Vec<RawRows>> {
    let parts: Vec<Part> = partitions
        .iter()
        .map(|name| {
            Part::by_name(name)
                .ok_or_else(|| StoreError::Corrupt(format!("no partition named {name:?}")))
        })
        .collect::<Result<_>>()?;
    let engine = crate::engine::open_engine(dir, false)?;
    parts
        .into_iter()
        .map(|part| {
            engine
                .parts
                .ks(part)
                .iter()
                .map(|g| g.into_inner().map(|(k, v)| (k.to_vec(), v.to_vec())))
                .collect::<std::result::Result<_, _>>()
                .map_err(crate::engine_error)
        })
        .collect()
}

/// Test hook: give a closed store the schema-3 relay log (entries without hashes, no chain
/// records in meta) and version, as a schema-3 relay left it. Not part of the supported API.
///
/// # Errors
/// As [`crate::Store::open`].
#[doc(hidden)]
pub fn downgrade_to_schema_3_for_tests(dir: &Path) -> Result<u64> {
    let engine = crate::engine::open_engine(dir, false)?;
    accepted_at_dedup_index(&engine.parts)?;
    let mut b = DirectBatch::new(&engine.parts);
    let n = unchain_log(&mut b)?;
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&3u32));
    b.commit_durable()?;
    Ok(n)
}

/// Test hook: give a closed store the schema-4 dedup prune index (one row per dedup row, keyed
/// by its acceptance time, queued or not) and version, as a schema-4 relay left it; returns the
/// index rows written. Not part of the supported API.
///
/// # Errors
/// As [`crate::Store::open`].
#[doc(hidden)]
pub fn downgrade_to_schema_4_for_tests(dir: &Path) -> Result<u64> {
    let engine = crate::engine::open_engine(dir, false)?;
    let n = accepted_at_dedup_index(&engine.parts)?;
    let mut b = DirectBatch::new(&engine.parts);
    b.put(Part::Meta, meta_key::SCHEMA_VERSION, codec::enc(&4u32));
    b.commit_durable()?;
    Ok(n)
}

/// Stage the schema 1-3 form of the relay log: entries without hashes, no chain records.
fn unchain_log(b: &mut DirectBatch<'_>) -> Result<u64> {
    let rows: Vec<(Slice, Slice)> = b
        .parts
        .ks(Part::Ops)
        .iter()
        .map(|g| g.into_inner())
        .collect::<std::result::Result<_, _>>()
        .map_err(crate::engine_error)?;
    for (k, v) in &rows {
        let e: StoredOp = codec::dec(v, "ops")?;
        let old = LegacyOp {
            at_ms: e.at_ms,
            kind: e.kind,
            detail: e.detail,
        };
        b.put(Part::Ops, k, codec::enc(&old));
    }
    b.remove(Part::Meta, meta_key::OPS_HEAD);
    b.remove(Part::Meta, meta_key::OPS_CHECKPOINT);
    Ok(rows.len() as u64)
}
