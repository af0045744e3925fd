//! The `Store` handle: opening (lock, engine, schema), submitting writes, the durable read view,
//! and closing.

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use fjall::Database;

use crate::api::{Clock, OpenOptions, Pending, Result, StoreError};

/// What only a fjall store is opened with, beside the shared [`OpenOptions`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineOptions {
    /// Called on the writer thread every [`crate::WRITER_IDLE`] while it has nothing to do
    /// (the relay gives the allocator's free pages back there); `None`: nothing.
    pub on_writer_idle: Option<fn()>,
}
use crate::commit_stats::CommitCounters;
use crate::lock::StoreLock;
use crate::parts::Parts;
use crate::pulled::PulledHints;
use crate::reader::SnapView;
use crate::recover;
use crate::writer::{self, Job, Tx, ViewSlot, Writer};

/// fjall's smallest journal cap (below it fjall panics).
const JOURNAL_CAP: u64 = 64 * 1024 * 1024;
/// Block cache. 8 MiB keeps a relay with 1,000,000 items queued under 64 MiB resident; the
/// point reads the push path depends on (dedup misses) stay fast because the dedup partition's
/// filters are pinned outside the cache (`parts.rs`). Measured at 1M queued (docs/performance.md):
/// 16 MiB gave 75–79 MiB resident, 8 MiB alone 55–59 MiB but 25% fewer batched pushes a second,
/// 8 MiB with pinned dedup filters 58 MiB at the 16 MiB throughput within noise.
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// The engine directory inside a store directory.
pub(crate) const DB_DIR: &str = "db";

/// An open relay store. Cheap to clone; the last clone's drop (or `RelayStore::close`) stops the
/// writer and releases the lock.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    dir: PathBuf,
    pub(crate) clock: Arc<dyn Clock>,
    sender: Mutex<Option<SyncSender<Job>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    pub(crate) view: ViewSlot,
    lock: Mutex<Option<StoreLock>>,
    fail_persists: Arc<AtomicU32>,
    pub(crate) counters: Arc<CommitCounters>,
    /// The writer's recovery after a failed write (read errors meanwhile, reopen count).
    pub(crate) recovery: Arc<recover::Shared>,
    /// What pulls learnt of the items they returned, for the acks that follow.
    pub(crate) pulled: Arc<PulledHints>,
}

/// A locked, opened engine (no writer yet): used by `open`, restore and test hooks.
pub(crate) struct Engine {
    pub lock: StoreLock,
    pub parts: Arc<Parts>,
}

/// Take the lock of `dir` and open its engine.
///
/// # Errors
/// `Missing`, `Locked`, `Corrupt` (foreign or damaged files), `Io`, `Engine`.
pub(crate) fn open_engine(dir: &Path, create: bool) -> Result<Engine> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(StoreError::Corrupt(format!(
                "{} is not a directory",
                dir.display()
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !create {
                return Err(StoreError::Missing(dir.to_path_buf()));
            }
            // Owner-only: the store holds every queued item and the relay key. Its name is
            // fsync'd in its parent: a power cut must not take a store that answered writes.
            relay_os::durable_dir::create_dir_all_durable(dir, 0o700).map_err(|source| {
                StoreError::Io {
                    context: format!("creating store directory {}", dir.display()),
                    source,
                }
            })?;
        }
        Err(source) => {
            return Err(StoreError::Io {
                context: format!("reading {}", dir.display()),
                source,
            })
        }
    }
    let lock = StoreLock::acquire(dir)?;
    let parts = open_parts(dir, create)?;
    // fjall fsyncs inside `db/` but not the name `db/` in the store directory (nor the lock
    // file's): once per open, so a first write's durability does not depend on a later sync.
    relay_os::durable_dir::sync_dir(dir).map_err(|source| StoreError::Io {
        context: format!("fsync of store directory {}", dir.display()),
        source,
    })?;
    Ok(Engine { lock, parts })
}

/// Open the engine under `dir/db` and its partitions, with the store lock already held: used by
/// [`open_engine`] and by the writer when it reopens the database after a failed write.
///
/// # Errors
/// `Missing`, `Corrupt` (foreign or damaged files, or fjall refused to open), `Io`, `Engine`.
pub(crate) fn open_parts(dir: &Path, create: bool) -> Result<Arc<Parts>> {
    let db_dir = dir.join(DB_DIR);
    check_engine_dir(&db_dir, create)?;
    let opened = std::panic::catch_unwind(AssertUnwindSafe(|| {
        // IMPORTANT: manual persistence: the writer fsyncs once per group (group commit).
        // A small journal cap and cache bound memory and what a restart must replay
        // (docs/performance.md measured 253 -> 111 MiB RSS at 100k queued).
        Database::builder(&db_dir)
            .manual_journal_persist(true)
            .max_journaling_size(JOURNAL_CAP)
            .cache_size(CACHE_BYTES)
            .open()
    }));
    let db = match opened {
        Ok(Ok(db)) => db,
        Ok(Err(e)) => {
            return Err(StoreError::Corrupt(format!(
                "cannot open the database in {}: {e}",
                db_dir.display()
            )))
        }
        Err(_) => {
            return Err(StoreError::Corrupt(format!(
                "the database in {} is damaged (the engine gave up reading it)",
                db_dir.display()
            )))
        }
    };
    Ok(Arc::new(Parts::open(db)?))
}

/// Refuse a `db` that is a file, or a non-empty directory that is not an fjall database.
fn check_engine_dir(db_dir: &Path, create: bool) -> Result<()> {
    match std::fs::metadata(db_dir) {
        Ok(m) if !m.is_dir() => Err(StoreError::Corrupt(format!(
            "{} is not a directory",
            db_dir.display()
        ))),
        Ok(_) => {
            let marker = db_dir.join("version");
            let empty = std::fs::read_dir(db_dir)
                .map(|mut d| d.next().is_none())
                .map_err(|source| StoreError::Io {
                    context: format!("reading {}", db_dir.display()),
                    source,
                })?;
            if !empty && !marker.exists() {
                return Err(StoreError::Corrupt(format!(
                    "{} holds files that are not an mbx-relay database",
                    db_dir.display()
                )));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if create {
                Ok(())
            } else {
                Err(StoreError::Missing(db_dir.to_path_buf()))
            }
        }
        Err(source) => Err(StoreError::Io {
            context: format!("reading {}", db_dir.display()),
            source,
        }),
    }
}

impl Store {
    /// Open (or create) the store in `dir`: takes the lock file, opens fjall under `dir/db`,
    /// checks or migrates the schema, creates meta (epoch, created) on first open, starts the writer.
    ///
    /// # Errors
    /// `Locked` (names the holding pid), `Missing`, `SchemaTooNew`, `Corrupt`, `Io`, `Engine`.
    pub fn open(dir: &Path, opts: OpenOptions) -> Result<Store> {
        Store::open_with(dir, opts, EngineOptions::default())
    }

    /// [`Store::open`] with the fjall-only [`EngineOptions`].
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_with(dir: &Path, opts: OpenOptions, engine: EngineOptions) -> Result<Store> {
        let Engine { lock, parts } = open_engine(dir, opts.create)?;
        crate::migrate::prepare(&parts, opts.clock.now_ms(), opts.log_retention)?;
        let view: ViewSlot = Arc::new(RwLock::new(Some(Arc::new(SnapView {
            snap: parts.db.snapshot(),
            parts: Arc::clone(&parts),
        }))));
        let (tx, rx) = sync_channel::<Job>(writer::CHANNEL_BOUND);
        let w = Writer::new(
            Arc::clone(&parts),
            rx,
            Arc::clone(&view),
            Arc::clone(&opts.clock),
            dir.to_path_buf(),
            engine.on_writer_idle,
            opts.log_retention,
        );
        let recovery = w.recovery_state();
        let fail_persists = Arc::clone(&w.fail_persists);
        let counters = Arc::clone(&w.counters);
        drop(parts);
        let handle = std::thread::Builder::new()
            .name("relay-store-writer".into())
            .spawn(move || w.run())
            .map_err(|source| StoreError::Io {
                context: "starting the store writer".into(),
                source,
            })?;
        Ok(Store {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                clock: opts.clock,
                sender: Mutex::new(Some(tx)),
                writer: Mutex::new(Some(handle)),
                view,
                lock: Mutex::new(Some(lock)),
                fail_persists,
                counters,
                recovery,
                pulled: Arc::default(),
            }),
        })
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Test hook: report the next `n` commit groups' fsync as failed (their batch is committed
    /// but not synced, as when a real fsync fails); each such group makes the writer reopen the
    /// database, as a real failure does. Not part of the supported API.
    #[doc(hidden)]
    pub fn inject_persist_failures_for_tests(&self, n: u32) {
        self.inner.fail_persists.store(n, Ordering::SeqCst);
    }

    /// Submit a write job; it resolves once its group is durable.
    pub(crate) fn submit<T: Send + 'static>(
        &self,
        op: impl FnOnce(&mut Tx<'_>) -> Result<T> + Send + 'static,
    ) -> Pending<T> {
        let (answer, rx) = tokio::sync::oneshot::channel();
        let sender = self.inner.sender.lock().ok().and_then(|s| s.clone());
        if let Some(sender) = sender {
            // A send error drops the job (and its answer): the caller sees `Closed`.
            let _ = sender.send(writer::job(op, answer));
        }
        Pending::from_receiver(rx)
    }

    /// The last durable snapshot.
    ///
    /// # Errors
    /// `Engine` while the database is being reopened after a failed write; `Closed` after `close`.
    pub(crate) fn view(&self) -> Result<Arc<SnapView>> {
        if let Some(v) = self.inner.view.read().ok().and_then(|v| v.clone()) {
            return Ok(v);
        }
        if self.inner.recovery.recovering.load(Ordering::SeqCst) {
            return Err(StoreError::Engine(
                "the store is reopening its database after a write failure; retry later".into(),
            ));
        }
        Err(StoreError::Closed)
    }
}

impl Inner {
    /// Flush, stop the writer, release the lock (`RelayStore::close`, and the last drop).
    pub(crate) fn shutdown(&self) -> Result<()> {
        // Dropping the last sender ends the writer after it answered what is queued.
        if let Ok(mut s) = self.sender.lock() {
            s.take();
        }
        if let Ok(mut w) = self.writer.lock() {
            if let Some(h) = w.take() {
                let _ = h.join();
            }
        }
        let view = self.view.write().ok().and_then(|mut v| v.take());
        // Closed, not recovering: later reads answer `Closed`.
        self.recovery.recovering.store(false, Ordering::SeqCst);
        let mut result = Ok(());
        if let Some(v) = view {
            if let Err(e) = v.parts.db.persist(fjall::PersistMode::SyncAll) {
                result = Err(StoreError::Engine(format!("final flush failed: {e}")));
            }
            // Flush memtables to tables so the next open replays less journal.
            v.parts.flush_memtables();
            drop(v);
        }
        if let Ok(mut l) = self.lock.lock() {
            l.take();
        }
        result
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}
