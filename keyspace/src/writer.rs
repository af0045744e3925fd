//! The group-commit writer: one thread owns every write.
//!
//! Callers submit jobs over a bounded channel. The writer blocks for the first job, drains what
//! else is queued (at most [`MAX_GROUP`]), runs each job's read-check-write logic in order
//! against an in-memory overlay (so a later job sees an earlier one's writes, and two inserts of
//! the same dedup key can never both be new), writes the whole group as ONE fjall batch, calls
//! `persist(SyncAll)` once, publishes a fresh snapshot as the durable read view, and only then
//! answers every job of the group. A job that fails is rolled back inside the overlay, so every
//! logical operation is all-or-nothing; the group batch is atomic in the journal, so a crash
//! keeps either the whole group or none of it.
//!
//! A group whose commit or fsync fails is answered with an error, and the database is reopened
//! from disk before the next group runs (`recover`): fjall refuses every write after a failed
//! one until then.
//!
//! When the writer goes idle after at least [`IDLE_FLUSH_MIN_BYTES`] of writes, it hands the
//! memtables to fjall's flush workers, so a relay at rest holds its rows in tables, not in
//! memory (and a crash then has less journal to replay).

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::sync::Arc;

use fjall::{PersistMode, Slice};

use crate::commit_stats::CommitCounters;
use crate::ops::oplog::{LogStage, LogTx};
use crate::parts::{Part, Parts};
use crate::reader::{Reader, SnapView, ViewSlot};
use crate::recover::{self, Recovery};
use crate::sweep_from::SweepFrom;
use relay_store::{Clock, LogRetention, Result, StoreError};

/// How long the writer waits for work before it counts as idle.
pub const WRITER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Most jobs answered by one fsync.
pub(crate) const MAX_GROUP: usize = 1024;
/// Bound of the submission channel (callers block beyond it: backpressure).
pub(crate) const CHANNEL_BOUND: usize = 4096;
/// Entries of the writer's point-read cache before it is cleared.
const MAX_CACHE: usize = 200_000;
/// Bytes of keys and values committed since the last idle flush above which an idle writer
/// flushes the memtables. Memtables hold up to 8 MiB (items) and 4 MiB (each other partition);
/// flushed at rest, the relay's RSS with 1,000,000 queued fell from 61-64 to 50-53 MiB. Below this,
/// sporadic traffic does not turn every idle second into a handful of tiny tables.
pub(crate) const IDLE_FLUSH_MIN_BYTES: u64 = 1024 * 1024;

/// Sends a job's answer once its group's fate is known (`Some(why)`: the group failed).
pub(crate) type Reply = Box<dyn FnOnce(Option<&str>) + Send>;
/// A job: runs on the writer thread against the group's view and returns its reply. `None`:
/// the group cannot run (the store is recovering from a failed write); the job only answers.
pub(crate) type Job = Box<dyn FnOnce(Option<&mut Tx<'_>>) -> Reply + Send>;

/// Partitions whose point reads the writer caches across groups. Safe because the writer is
/// the only one who writes them; the cache is refreshed from each committed group and
/// dropped whenever a commit fails (so it never outlives a database that is then reopened).
fn cacheable(p: Part) -> bool {
    matches!(
        p,
        Part::Meta | Part::Enrolments | Part::Seqs | Part::Acked | Part::Usage
    )
}

/// One map per partition, indexed by [`Part`]. Keys and values are fjall `Slice`s, so staging,
/// undo, the cache and the commit share one copy of each key (a clone is a reference count).
type PerPart<M> = [M; Part::ALL.len()];

/// Pending writes of a group, per partition: `Some` = put, `None` = delete.
type Overlay = PerPart<BTreeMap<Slice, Option<Slice>>>;

/// The writer's point-read cache, per partition (only [`cacheable`] ones hold entries).
type Cache = PerPart<HashMap<Slice, Option<Slice>>>;

/// The writer's view while it runs a group: pending writes over the committed database.
pub(crate) struct Tx<'a> {
    parts: &'a Parts,
    cache: &'a Cache,
    /// Pending writes of this group.
    overlay: Overlay,
    /// Previous overlay entries, for rolling one job back.
    undo: Vec<(Part, Slice, Option<Option<Slice>>)>,
    /// The clock at the start of the current job.
    pub now_ms: u64,
    /// How the relay log is bounded (`ops::oplog`).
    pub log_retention: LogRetention,
    /// Stored rows read by range scans in this group (for [`crate::CommitStats::rows_scanned`]).
    scanned: std::cell::Cell<u64>,
    /// Where the running sweep continues (`ops::sweep`): the writer's committed position,
    /// moved by a sweep job and kept only if the group commits.
    pub(crate) sweep_from: SweepFrom,
}

impl<'a> Tx<'a> {
    /// Stage a put.
    pub(crate) fn put(&mut self, part: Part, key: &[u8], value: Vec<u8>) {
        self.stage(part, Slice::new(key), Some(Slice::from(value)));
    }

    /// Stage a delete.
    pub(crate) fn del(&mut self, part: Part, key: &[u8]) {
        self.stage(part, Slice::new(key), None);
    }

    fn stage(&mut self, part: Part, k: Slice, v: Option<Slice>) {
        let prev = self.overlay[part as usize].insert(k.clone(), v);
        self.undo.push((part, k, prev));
    }

    /// A point to roll back to.
    pub(crate) fn savepoint(&self) -> usize {
        self.undo.len()
    }

    /// Undo every write staged since `sp`.
    pub(crate) fn rollback_to(&mut self, sp: usize) {
        while self.undo.len() > sp {
            let Some((part, k, prev)) = self.undo.pop() else {
                break;
            };
            let overlay = &mut self.overlay[part as usize];
            match prev {
                Some(v) => {
                    overlay.insert(k, v);
                }
                None => {
                    overlay.remove(&k);
                }
            }
        }
    }
}

impl Reader for Tx<'_> {
    fn get(&self, part: Part, key: &[u8]) -> Result<Option<Slice>> {
        if let Some(v) = self.overlay[part as usize].get(key) {
            return Ok(v.clone());
        }
        if cacheable(part) {
            if let Some(v) = self.cache[part as usize].get(key) {
                return Ok(v.clone());
            }
        }
        self.parts.ks(part).get(key).map_err(crate::engine_error)
    }

    fn range(
        &self,
        part: Part,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Slice, Slice)>> {
        let rows = self.range_with(part, lo, hi, limit, |_| true)?;
        Ok(rows
            .into_iter()
            .filter_map(|(k, v)| Some((k, v?)))
            .collect())
    }
}

impl Tx<'_> {
    /// [`Reader::range`] that loads a stored value only when `want_value(key)` (a staged put
    /// always shows its value). In a key-value separated partition a value not loaded is a
    /// blob not read: ack lists an `items` range without reading the wire bytes it has hints
    /// for.
    pub(crate) fn range_with(
        &self,
        part: Part,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
        want_value: impl Fn(&[u8]) -> bool,
    ) -> Result<Vec<(Slice, Option<Slice>)>> {
        let mut out = Vec::new();
        if limit == 0 || inverted(lo, hi) {
            return Ok(out);
        }
        let mut pending = self.overlay[part as usize].range::<[u8], _>((lo, hi));
        let mut db = self.parts.ks(part).range::<&[u8], _>((lo, hi));
        let scanned = &self.scanned;
        let mut next_stored = || -> Result<Option<(Slice, Option<Slice>)>> {
            match db.next() {
                Some(g) => {
                    scanned.set(scanned.get() + 1);
                    Ok(Some(
                        g.into_inner_if(|k| want_value(k))
                            .map_err(crate::engine_error)?,
                    ))
                }
                None => Ok(None),
            }
        };
        let mut db_next = next_stored()?;
        let mut ov_next = pending.next();
        while out.len() < limit {
            match (&db_next, &ov_next) {
                (None, None) => break,
                (Some(_), None) => {
                    if let Some(p) = db_next.take() {
                        out.push(p);
                    }
                    db_next = next_stored()?;
                }
                (None, Some((ok, ov))) => {
                    push_staged(&mut out, ok, ov);
                    ov_next = pending.next();
                }
                (Some((dk, _)), Some((ok, ov))) => {
                    let ord = dk.as_ref().cmp(ok.as_ref());
                    match ord {
                        std::cmp::Ordering::Less => {
                            if let Some(p) = db_next.take() {
                                out.push(p);
                            }
                            db_next = next_stored()?;
                        }
                        std::cmp::Ordering::Equal => {
                            push_staged(&mut out, ok, ov);
                            ov_next = pending.next();
                            db_next = next_stored()?;
                        }
                        std::cmp::Ordering::Greater => {
                            push_staged(&mut out, ok, ov);
                            ov_next = pending.next();
                        }
                    }
                }
            }
        }
        Ok(out)
    }
}

/// Whether `lo..hi` holds no key because it is inverted (a resumed sweep whose position lies
/// past a moved-back clock's bound): `BTreeMap::range` panics on such bounds.
fn inverted(lo: Bound<&[u8]>, hi: Bound<&[u8]>) -> bool {
    match (lo, hi) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => false,
        (Bound::Included(l), Bound::Included(h)) => l > h,
        (Bound::Included(l) | Bound::Excluded(l), Bound::Excluded(h))
        | (Bound::Excluded(l), Bound::Included(h)) => l >= h,
    }
}

/// Add a staged write to a range answer: a put shows its value, a delete hides the key.
fn push_staged(out: &mut Vec<(Slice, Option<Slice>)>, key: &Slice, staged: &Option<Slice>) {
    if let Some(v) = staged {
        out.push((key.clone(), Some(v.clone())));
    }
}

/// Wrap a typed operation into a job whose answer goes to `tx` after the group's fsync.
pub(crate) fn job<T: Send + 'static>(
    op: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    answer: tokio::sync::oneshot::Sender<Result<T>>,
) -> Job {
    Box::new(move |tx: Option<&mut Tx<'_>>| {
        let r = tx.map(|tx| {
            let sp = tx.savepoint();
            let r = match std::panic::catch_unwind(AssertUnwindSafe(|| op(tx))) {
                Ok(r) => r,
                Err(_) => Err(StoreError::Engine(
                    "internal error in a store operation".into(),
                )),
            };
            if r.is_err() {
                tx.rollback_to(sp);
            }
            r
        });
        Box::new(move |group_err: Option<&str>| {
            let out = match (r, group_err) {
                (Some(Err(e)), _) => Err(e),
                (_, Some(why)) => Err(StoreError::Engine(why.to_string())),
                (Some(Ok(v)), None) => Ok(v),
                (None, None) => Err(StoreError::Engine(
                    "internal error: a store operation was not run".into(),
                )),
            };
            let _ = answer.send(out);
        })
    })
}

/// The writer thread's state.
pub(crate) struct Writer {
    /// The open database (None only while a reopen after a failed write has not succeeded).
    parts: Option<Arc<Parts>>,
    pub rx: Receiver<Job>,
    pub view: ViewSlot,
    pub clock: Arc<dyn Clock>,
    cache: Cache,
    /// Test hook: groups whose fsync is reported failed (after their batch is committed).
    pub fail_persists: Arc<AtomicU32>,
    /// Reopens the database after a failed group.
    recovery: Recovery,
    /// Group sizes and fsync latencies, read by `Store::commit_stats`.
    pub counters: Arc<CommitCounters>,
    /// Runs when the writer goes idle ([`crate::EngineOptions::on_writer_idle`]).
    on_idle: Option<fn()>,
    /// Bytes of keys and values committed since the memtables were last flushed at idle.
    unflushed: u64,
    /// How the relay log is bounded.
    log_retention: LogRetention,
    /// Where the running sweep continues, as of the last committed group (reset by a failed one).
    sweep_from: SweepFrom,
}

impl Writer {
    /// A writer for the store in `dir` (where it reopens the database after a failed write).
    pub(crate) fn new(
        parts: Arc<Parts>,
        rx: Receiver<Job>,
        view: ViewSlot,
        clock: Arc<dyn Clock>,
        dir: PathBuf,
        on_idle: Option<fn()>,
        log_retention: LogRetention,
    ) -> Writer {
        Writer {
            parts: Some(parts),
            rx,
            view,
            clock,
            cache: Default::default(),
            fail_persists: Arc::new(AtomicU32::new(0)),
            recovery: Recovery::new(dir),
            counters: Arc::new(CommitCounters::default()),
            on_idle,
            unflushed: 0,
            log_retention,
            sweep_from: SweepFrom::default(),
        }
    }

    /// What the store handle shares with the recovery (read errors, reopen count).
    pub(crate) fn recovery_state(&self) -> Arc<recover::Shared> {
        Arc::clone(&self.recovery.shared)
    }

    /// Serve groups until every sender is gone.
    pub(crate) fn run(mut self) {
        while let Some(first) = self.next_job() {
            let mut jobs = Vec::with_capacity(64);
            jobs.push(first);
            while jobs.len() < MAX_GROUP {
                match self.rx.try_recv() {
                    Ok(j) => jobs.push(j),
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.group(jobs);
        }
    }

    /// The next job, blocking; `on_idle` runs every [`WRITER_IDLE`] while none comes.
    /// `None` once every sender is gone.
    fn next_job(&mut self) -> Option<Job> {
        loop {
            match self.rx.recv_timeout(WRITER_IDLE) {
                Ok(j) => return Some(j),
                Err(RecvTimeoutError::Timeout) => {
                    self.flush_when_idle();
                    if let Some(hook) = self.on_idle {
                        hook();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Flush the memtables if enough was written since the last time (see
    /// [`IDLE_FLUSH_MIN_BYTES`]). Fjall's workers write the tables; the journal keeps the rows
    /// until they have, so this changes nothing of what is durable.
    fn flush_when_idle(&mut self) {
        if self.unflushed < IDLE_FLUSH_MIN_BYTES {
            return;
        }
        if let Some(parts) = &self.parts {
            parts.rotate_memtables();
            self.unflushed = 0;
        }
    }

    fn group(&mut self, jobs: Vec<Job>) {
        let ops = jobs.len() as u64;
        let parts = match self.recovery.ready(&mut self.parts, &self.view) {
            Ok(p) => p,
            Err(why) => {
                self.counters.group(ops, false);
                for j in jobs {
                    j(None)(Some(&why));
                }
                return;
            }
        };
        let mut tx = Tx {
            parts: &parts,
            cache: &self.cache,
            overlay: Default::default(),
            undo: Vec::new(),
            now_ms: 0,
            log_retention: self.log_retention,
            scanned: Default::default(),
            sweep_from: self.sweep_from.clone(),
        };
        let mut replies = Vec::with_capacity(jobs.len());
        for j in jobs {
            tx.now_ms = self.clock.now_ms();
            replies.push(j(Some(&mut tx)));
        }
        let overlay = std::mem::take(&mut tx.overlay);
        self.counters.scanned(tx.scanned.get());
        let sweep_from = std::mem::take(&mut tx.sweep_from);
        drop(tx);
        let wrote = overlay.iter().any(|m| !m.is_empty());
        let outcome = self.commit(&parts, &overlay).map(|bytes| {
            self.unflushed = self.unflushed.saturating_add(bytes);
        });
        if wrote {
            self.counters.group(ops, outcome.is_ok());
        }
        match &outcome {
            Ok(()) => {
                self.sweep_from = sweep_from;
                if wrote {
                    self.recovery.group_ok();
                }
                if self.cache.iter().map(HashMap::len).sum::<usize>() > MAX_CACHE {
                    self.clear_cache();
                }
                for (part, writes) in Part::ALL.into_iter().zip(overlay) {
                    if cacheable(part) {
                        self.cache[part as usize].extend(writes);
                    }
                }
                let snap = SnapView {
                    snap: parts.db.snapshot(),
                    parts: Arc::clone(&parts),
                };
                if let Ok(mut slot) = self.view.write() {
                    if slot.is_some() {
                        *slot = Some(Arc::new(snap));
                    }
                }
            }
            Err(why) => {
                self.recovery.group_failed(why);
                self.clear_cache();
                // Rows it passed may not be deleted: the next sweep starts at the beginning.
                self.sweep_from = SweepFrom::default();
            }
        }
        let err = outcome.err();
        for r in replies {
            r(err.as_deref());
        }
    }

    fn clear_cache(&mut self) {
        self.cache.iter_mut().for_each(HashMap::clear);
    }

    /// Write the group's overlay as one batch and make it durable.
    /// Returns the bytes of keys and values written.
    fn commit(&self, parts: &Parts, overlay: &Overlay) -> Result<u64, String> {
        if overlay.iter().all(BTreeMap::is_empty) {
            return Ok(0);
        }
        let mut batch = parts.db.batch();
        let mut bytes = 0u64;
        for (part, writes) in Part::ALL.into_iter().zip(overlay) {
            for (k, v) in writes {
                bytes += k.len() as u64;
                match v {
                    Some(v) => {
                        bytes += v.len() as u64;
                        batch.insert(parts.ks(part), k.clone(), v.clone());
                    }
                    None => batch.remove(parts.ks(part), k.clone()),
                }
            }
        }
        batch.commit().map_err(|e| format!("commit failed: {e}"))?;
        let injected = self
            .fail_persists
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if injected {
            return Err("fsync failed, not durable: injected failure".into());
        }
        let started = std::time::Instant::now();
        parts
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| format!("fsync failed, not durable: {e}"))?;
        self.counters
            .fsync(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        Ok(bytes)
    }
}

impl LogStage for Tx<'_> {
    fn stage_put(&mut self, part: Part, key: &[u8], value: Vec<u8>) {
        self.put(part, key, value);
    }
    fn stage_del(&mut self, part: Part, key: &[u8]) {
        self.del(part, key);
    }
}

impl LogTx for Tx<'_> {
    fn now_ms(&self) -> u64 {
        self.now_ms
    }
    fn log_retention(&self) -> LogRetention {
        self.log_retention
    }
}
