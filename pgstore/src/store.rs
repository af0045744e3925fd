//! The `PgStore` handle: opening (url, durability check, migrations), its own small runtime on
//! which every database call runs, and the bridge from that runtime to callers: writes, and the
//! reads of every request (enrolment, admission), resolve through a oneshot the caller awaits;
//! other reads block the caller (inside a multi-thread tokio runtime through `block_in_place`,
//! so the caller's other tasks keep running).

use std::future::Future;
use std::sync::{Arc, Mutex};

use relay_store::{Clock, LogRetention, OpenOptions, Pending, Result, StoreError};
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};

use crate::db::Db;

/// Threads of the store's runtime. The work is waiting on the database, not computing, and one
/// thread drives every connection with fewer cross-thread wakeups: with two, a single push at
/// 64 senders cost 278 µs of relay CPU against 242 with one (medians of 3 alternating runs;
/// docs/performance.md). A blocking read from a task of this runtime still works: the flavour
/// stays multi-thread, so `block_in_place` hands the worker on.
const RUNTIME_THREADS: usize = 1;

/// A relay store on PostgreSQL. Cheap to clone; `RelayStore::close` or the last drop stops it.
#[derive(Clone)]
pub struct PgStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) db: Db,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) retention: LogRetention,
    /// The database name and host for messages (never the password).
    pub(crate) label: String,
    /// The last relay-log append submitted through this handle: appends run in the order
    /// they were submitted, as the keyspace's single writer runs them.
    pub(crate) log_order: Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
    /// Pushes waiting to share an insert transaction (`combine`).
    pub(crate) combiner: crate::combine::Combiner,
    handle: Handle,
    rt: Mutex<Option<Runtime>>,
}

/// The `host:port/db` part of a url, for messages (a password is never shown).
pub(crate) fn label_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('?').next().unwrap_or(rest).to_string()
}

impl PgStore {
    /// Connect to `url` (`postgres://user@host:port/db`), refuse a session whose commits are
    /// not durable, migrate the schema, and create meta (epoch, created) on first open.
    ///
    /// With `opts.create` false a database without a store is refused instead of set up.
    ///
    /// # Errors
    /// `Engine` (unreachable, bad url, `synchronous_commit`/`fsync` off, no store and
    /// `create` false), `SchemaTooNew`, `Io`.
    pub fn open(url: &str, opts: OpenOptions) -> Result<PgStore> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("relay-pgstore")
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io {
                context: "starting the postgres store's runtime".into(),
                source,
            })?;
        let handle = rt.handle().clone();
        let url_owned = url.to_string();
        let now = opts.clock.now_ms();
        let (create, label) = (opts.create, label_of(url));
        let db = run_blocking(&handle, async move {
            let db = Db::connect(&url_owned).await?;
            if !create && !crate::schema::holds_store(&db).await? {
                return Err(StoreError::Engine(format!(
                    "postgres://{label} holds no mbx-relay store (a relay creates it on its first start)"
                )));
            }
            crate::schema::prepare(&db, now, uuid::Uuid::new_v4().to_string()).await?;
            Ok(db)
        });
        let db = match db {
            Ok(db) => db,
            Err(e) => {
                rt.shutdown_background();
                return Err(e);
            }
        };
        Ok(PgStore {
            inner: Arc::new(Inner {
                db,
                clock: opts.clock,
                retention: opts.log_retention,
                label: label_of(url),
                log_order: Mutex::new(None),
                combiner: Default::default(),
                handle,
                rt: Mutex::new(Some(rt)),
            }),
        })
    }

    /// Where this store lives (`host:port/db`, no credentials).
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// Run `fut` on the store's runtime and block until it finishes (reads, admin calls),
    /// within the operation deadline ([`crate::db::bounded`]).
    pub(crate) fn block<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        run_blocking(&self.inner.handle, crate::db::bounded(fut))
    }

    /// Run `fut` on the store's runtime; the answer resolves with its result (writes, and reads
    /// an async caller awaits), within the operation deadline ([`crate::db::bounded`]).
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Pending<T> {
        self.spawn_queued(crate::db::bounded(fut))
    }

    /// [`PgStore::spawn`] without the deadline: for a write that first waits its turn behind
    /// others and bounds its own database part.
    pub(crate) fn spawn_queued<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Pending<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        Pending::from_receiver(rx)
    }

    /// Run `fut` on the store's runtime, answering through its own channel (streams).
    pub(crate) fn spawn_task(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.inner.handle.spawn(fut);
    }

    /// Now, by the store's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.inner.clock.now_ms()
    }
}

/// Block the calling thread on `fut` running on `handle`'s runtime. Inside a multi-thread
/// runtime the wait is marked blocking, so that runtime moves its other tasks elsewhere.
fn run_blocking<T: Send + 'static>(
    handle: &Handle,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = move || rx.recv().unwrap_or(Err(StoreError::Closed));
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

impl Inner {
    pub(crate) fn shutdown(&self) {
        self.db.close();
        if let Some(rt) = self.rt.lock().ok().and_then(|mut r| r.take()) {
            // Never blocks (a drop inside another runtime must not).
            rt.shutdown_background();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
