//! The `Store` handle: opening (lock, engine, schema), submitting writes, the durable read view,
//! and closing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use relay_store::{Clock, OpenOptions, Pending, Result, StoreError};

/// What only a fjall store is opened with, beside the shared [`OpenOptions`].
#[derive(Debug, Clone, Copy, Default)]
pub struct EngineOptions {
    /// Called on the writer thread every [`crate::WRITER_IDLE`] while it has nothing to do
    /// (the relay gives the allocator's free pages back there); `None`: nothing.
    pub on_writer_idle: Option<fn()>,
}
use crate::commit_stats::CommitCounters;
use crate::engine::{open_engine, Engine};
use crate::lock::StoreLock;
use crate::pulled::PulledHints;
use crate::reader::SnapView;
use crate::reader::ViewSlot;
use crate::recover;
use crate::writer::{self, Job, Tx, Writer};

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
