//! What every operation runs with, and the one way each runs: [`Ctx`] holds the pool, the
//! clock, the relay log's retention and the store's runtime, and states once the setup that
//! each operation would otherwise write again:
//!
//! - a write is [`Ctx::write`]: on the store's runtime, within the operation deadline, one
//!   transaction retried as [`Db::tx`] retries it, its body handed its arguments and a
//!   [`WriteEnv`] (now, by the store's clock, and the log's retention);
//! - a read is [`Ctx::read`] (the caller blocks; inside a multi-thread tokio runtime through
//!   `block_in_place`, so the caller's other tasks keep running) or [`Ctx::read_async`] (the
//!   caller awaits), its body handed a pooled connection.
//!
//! Operations take a `&Ctx`, never the `PgStore` handle: the handle opens and closes the store,
//! the context only runs operations on it.

use std::future::Future;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Transaction;
use relay_store::{Clock, LogRetention, Pending, Result, StoreError};
use tokio::runtime::{Handle, RuntimeFlavor};

use crate::db::{bounded, Body, Conn, Db};
use crate::guess::Guesses;

/// The relay log's order of appends: the last one submitted (appends run in the order they
/// were submitted, as the keyspace's single writer runs them).
pub(crate) type LogOrder = Arc<Mutex<Option<tokio::sync::oneshot::Receiver<()>>>>;

/// What a write's body is handed besides its transaction and arguments: taken once per
/// operation, so every retry of it decides with the same time.
#[derive(Clone, Copy)]
pub(crate) struct WriteEnv {
    /// Now, by the store's clock.
    pub now: u64,
    /// The relay log's retention (appends trim by it).
    pub keep: LogRetention,
}

/// The pool, the settings and the runtime an operation runs with. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) db: Db,
    clock: Arc<dyn Clock>,
    retention: LogRetention,
    handle: Handle,
    pub(crate) log_order: LogOrder,
    /// What this handle's inserts left, guessed as what the next push reads (`crate::guess`).
    pub(crate) guesses: Arc<Guesses>,
}

impl Ctx {
    pub(crate) fn new(
        db: Db,
        clock: Arc<dyn Clock>,
        retention: LogRetention,
        handle: Handle,
    ) -> Ctx {
        Ctx {
            db,
            clock,
            retention,
            handle,
            log_order: LogOrder::default(),
            guesses: Arc::default(),
        }
    }

    /// Now, by the store's clock.
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Now and the log's retention, for a write about to run.
    pub(crate) fn env(&self) -> WriteEnv {
        WriteEnv {
            now: self.now_ms(),
            keep: self.retention,
        }
    }

    /// A write: `body` in one transaction ([`Db::tx`]: retried on conflict or a connection
    /// lost before COMMIT), handed `args` and the [`WriteEnv`] taken as it starts, on the
    /// store's runtime within the operation deadline; the answer resolves once it committed.
    pub(crate) fn write<A, T, F>(&self, args: A, body: F) -> Pending<T>
    where
        A: Send + Sync + 'static,
        T: Send + 'static,
        F: for<'t> FnMut(&'t Transaction<'t>, &'t A, WriteEnv) -> Body<'t, T> + Send + 'static,
    {
        let ctx = self.clone();
        self.spawn(async move { ctx.tx(args, body).await })
    }

    /// [`Ctx::write`]'s transaction without the runtime and deadline: for a write that waits
    /// its turn first and bounds its own database part (the relay log's appends).
    pub(crate) async fn tx<A, T, F>(&self, args: A, mut body: F) -> Result<T>
    where
        A: Send + Sync,
        T: Send,
        F: for<'t> FnMut(&'t Transaction<'t>, &'t A, WriteEnv) -> Body<'t, T> + Send,
    {
        let env = self.env();
        self.db.tx(&args, |t, a| body(t, a, env)).await
    }

    /// A read: `body` on a pooled connection, the caller blocked until it answers (within the
    /// operation deadline).
    pub(crate) fn read<T, F>(&self, body: F) -> Result<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> Body<'c, T> + Send + 'static,
    {
        run_blocking(&self.handle, bounded(self.on_conn(body)))
    }

    /// [`Ctx::read`] answered later: the caller awaits it instead of blocking (the reads of
    /// every request).
    pub(crate) fn read_async<T, F>(&self, body: F) -> Pending<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> Body<'c, T> + Send + 'static,
    {
        self.spawn(self.on_conn(body))
    }

    /// `body` on a connection taken from the pool.
    fn on_conn<T, F>(&self, body: F) -> impl Future<Output = Result<T>> + Send + 'static
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut Conn) -> Body<'c, T> + Send + 'static,
    {
        let db = self.db.clone();
        async move {
            let mut c = db.conn().await?;
            Ok(body(&mut c).await?)
        }
    }

    /// Run `fut` on the store's runtime; the answer resolves with its result, within the
    /// operation deadline ([`bounded`]).
    pub(crate) fn spawn<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Pending<T> {
        self.spawn_queued(bounded(fut))
    }

    /// [`Ctx::spawn`] without the deadline: for a write that first waits its turn behind
    /// others and bounds its own database part.
    pub(crate) fn spawn_queued<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Pending<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        Pending::from_receiver(rx)
    }

    /// Run `fut` on the store's runtime, answering through its own channel (streams).
    pub(crate) fn spawn_task(&self, fut: impl Future<Output = ()> + Send + 'static) {
        self.handle.spawn(fut);
    }
}

/// Block the calling thread on `fut` running on `handle`'s runtime. Inside a multi-thread
/// runtime the wait is marked blocking, so that runtime moves its other tasks elsewhere.
pub(crate) fn run_blocking<T: Send + 'static>(
    handle: &Handle,
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    handle.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let wait = move || rx.recv().unwrap_or(Err(StoreError::Closed));
    block_on_wait(wait)
}

/// Run `wait` (a blocking receive) on the calling thread, marked blocking inside a
/// multi-thread runtime (dump and backup read their streams so too).
pub(crate) fn block_on_wait<R>(wait: impl FnOnce() -> R) -> R {
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}
