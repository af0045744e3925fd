//! The connection pool and the transaction discipline every operation goes through: one
//! transaction per logical operation, bounded retry on serialization failure (40001) and
//! deadlock (40P01) and on a connection lost before COMMIT (a failover: the next attempt takes
//! a new connection, which finds the writable node of a multi-host url), the durability check
//! made at open (`synchronous_commit`, `fsync`), the fence every new connection passes
//! (`crate::fence`: only the current primary of the newest timeline), and the deadline of
//! every operation ([`bounded`]): nothing waits on the database unbounded, and an operation
//! given up at its deadline is cancelled on the server too.

use std::cell::Cell;
use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::str::FromStr as _;
use std::time::Duration;

use deadpool_postgres::{
    Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod, Transaction,
};
use relay_store::{Result, StoreError};
use tokio_postgres::error::SqlState;

use crate::fence::Fence;
pub(crate) use crate::op_error::{db_err, OpError, OpResult};
use crate::stats::{PoolStats, STATS};
use crate::tls::MakeRustls;

/// Connections per relay process (PostgreSQL's default `max_connections` is 100).
pub(crate) const POOL_SIZE: usize = 16;
/// Attempts of one operation that hits a serialization failure, a deadlock or a lost
/// connection before its COMMIT.
const MAX_ATTEMPTS: u32 = 8;
/// Longest one operation (pool wait, connect, statements, COMMIT) may take before it answers
/// an error (503 to clients); the streams (dump, backup) have none.
pub(crate) const OP_DEADLINE: Duration = Duration::from_secs(10);
/// Per host of the url, unless the url sets `connect_timeout`: a lost machine must not hold a
/// connection attempt long (the next host is tried after it).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// TCP keepalive idle time and user timeout: a peer gone without a FIN (a machine lost, a
/// partition) ends the connection in about this long instead of the kernel's ~2 hours.
const TCP_DEAD_AFTER: Duration = Duration::from_secs(10);
/// Longest a cancel request (a new connection to the node) may take.
const CANCEL_DEADLINE: Duration = Duration::from_secs(5);

thread_local! {
    /// Set while [`bounded`] drops an operation whose deadline passed: every [`Conn`] dropped
    /// then leaves the pool (it may still have a statement outstanding).
    static ABANDONING: Cell<bool> = const { Cell::new(false) };
}

/// Run `op` within [`OP_DEADLINE`]; past it the operation is dropped (its connections leave
/// the pool and close, each with a cancel request for what its backend still runs: a COMMIT
/// waiting for a synchronous standby ignores a closed socket) and answers `Engine`. A write dropped during its COMMIT may still
/// commit: its error answer (503) tells the client to retry, and every write's retry is
/// deduplicated by its key (item ids, ack cursors), so the retry is safe.
pub(crate) async fn bounded<T>(op: impl Future<Output = Result<T>>) -> Result<T> {
    let mut op = Box::pin(op);
    match tokio::time::timeout(OP_DEADLINE, &mut op).await {
        Ok(r) => r,
        Err(_) => {
            PoolStats::add(&STATS.timeouts, 1);
            STATS.degrade();
            ABANDONING.with(|a| a.set(true));
            drop(op);
            ABANDONING.with(|a| a.set(false));
            Err(StoreError::Engine(format!(
                "postgres: no answer within {OP_DEADLINE:?} (the operation was abandoned; a \
                 write may or may not have committed)"
            )))
        }
    }
}

/// A pooled connection. Dropped by an abandoned operation ([`bounded`]) or discarded after a
/// lost connection, it leaves the pool and closes, so it never serves another operation.
pub(crate) struct Conn(Option<deadpool_postgres::Object>, MakeRustls);

impl Conn {
    /// Take this connection out of the pool and close it.
    fn discard(&mut self) {
        if let Some(o) = self.0.take() {
            drop(deadpool_postgres::Object::take(o));
        }
    }

    /// Ask the server to cancel what this connection's backend runs (bounded, in the
    /// background), then close it: the backend of an abandoned operation ends with it.
    fn cancel_and_discard(&mut self) {
        if let (Some(o), Ok(rt)) = (self.0.as_ref(), tokio::runtime::Handle::try_current()) {
            let (token, tls) = (o.cancel_token(), self.1.clone());
            PoolStats::add(&STATS.cancels, 1);
            rt.spawn(async move {
                let _ = tokio::time::timeout(CANCEL_DEADLINE, token.cancel_query(tls)).await;
            });
        }
        self.discard();
    }
}

impl Deref for Conn {
    type Target = deadpool_postgres::Object;
    #[allow(
        clippy::expect_used,
        reason = "only `discard` and `drop` empty it, and both consume the use"
    )]
    fn deref(&self) -> &Self::Target {
        self.0.as_ref().expect("a live pooled connection")
    }
}

impl DerefMut for Conn {
    #[allow(
        clippy::expect_used,
        reason = "only `discard` and `drop` empty it, and both consume the use"
    )]
    fn deref_mut(&mut self) -> &mut Self::Target {
        self.0.as_mut().expect("a live pooled connection")
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if ABANDONING.with(Cell::get) {
            self.cancel_and_discard();
        }
    }
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_err(e),
        deadpool_postgres::PoolError::PostCreateHook(HookError::Message(why)) => {
            StoreError::Engine(format!("postgres: refusing the node: {why}"))
        }
        deadpool_postgres::PoolError::PostCreateHook(HookError::Backend(e)) => db_err(e),
        other => StoreError::Engine(format!("postgres pool: {other}")),
    }
}

/// Whether a failed transaction may simply run again.
fn retryable(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    }) || lost(e)
}

/// Whether `e` says this connection cannot serve writes any more: closed or broken (no answer
/// from the server), the server shutting down or restarting, or a node that is no longer the
/// primary (a read-only transaction). Such a connection is discarded.
fn lost(e: &tokio_postgres::Error) -> bool {
    match e.code() {
        None => true,
        Some(c) => {
            *c == SqlState::READ_ONLY_SQL_TRANSACTION
                || *c == SqlState::ADMIN_SHUTDOWN
                || *c == SqlState::CRASH_SHUTDOWN
                || *c == SqlState::CANNOT_CONNECT_NOW
        }
    }
}

/// A boxed operation body run inside one transaction.
pub(crate) type Body<'a, T> = Pin<Box<dyn Future<Output = OpResult<T>> + Send + 'a>>;

/// The pool, and the url's database for messages (never the password).
#[derive(Clone)]
pub(crate) struct Db {
    pool: Pool,
    /// How each pooled connection connects: also for the connection that listens for other
    /// processes' changes (`crate::watch`), which lives outside the pool.
    session: std::sync::Arc<(tokio_postgres::Config, crate::tls::MakeRustls)>,
    /// The connector, again for cancel requests.
    tls: MakeRustls,
    /// The check every connection passes when made, and again when taken after a while.
    fence: Fence,
}

impl Db {
    /// Build the pool for `url` and check, on one connection, that commits are durable.
    ///
    /// # Errors
    /// `Engine` when the url is malformed, the server unreachable, or `synchronous_commit` /
    /// `fsync` is off (naming the setting).
    pub(crate) async fn connect(url: &str) -> Result<Db> {
        let (url, tls) = crate::tls::split_url(url)?;
        let mut cfg = tokio_postgres::Config::from_str(&url)
            .map_err(|e| StoreError::Engine(format!("bad postgres url: {e}")))?;
        let connector = crate::tls::connector(&mut cfg, &tls)?;
        // Every session asks for durable commits itself; the check below refuses a server
        // (or role) where it does not hold. And the server ends a session left idle inside a
        // transaction past the operation deadline: a partition between a write's statements
        // leaves its server session holding the target's row locks (stalling every push to
        // it) until the relay's closed socket is heard of, which after a long cut waits for
        // TCP's backed-off retransmission (seen: 11.4 s after a 15 s cut healed). The streams
        // (dump, backup, restore) lift it for their own transactions.
        if cfg.get_options().is_none() {
            cfg.options(format!(
                "-c synchronous_commit=on -c idle_in_transaction_session_timeout={}",
                OP_DEADLINE.as_millis()
            ));
        }
        cfg.application_name("mbx-relay");
        if cfg.get_connect_timeout().is_none() {
            cfg.connect_timeout(CONNECT_TIMEOUT);
        }
        cfg.keepalives(true)
            .keepalives_idle(TCP_DEAD_AFTER)
            .keepalives_interval(Duration::from_secs(2))
            .tcp_user_timeout(TCP_DEAD_AFTER);
        let session = std::sync::Arc::new((cfg.clone(), connector.clone()));
        let tls = connector.clone();
        let mgr = Manager::from_config(
            cfg,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let fence = Fence::default();
        let pool = Pool::builder(mgr)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(OP_DEADLINE))
            .create_timeout(Some(OP_DEADLINE))
            .recycle_timeout(Some(CONNECT_TIMEOUT))
            .post_create(fenced(fence.clone()))
            .build()
            .map_err(|e| StoreError::Engine(format!("postgres pool: {e}")))?;
        let db = Db {
            pool,
            session,
            tls,
            fence,
        };
        STATS.mark_opened();
        bounded(db.check_durable()).await?;
        Ok(db)
    }

    /// Refuse a session whose commits could return before they are durable.
    async fn check_durable(&self) -> Result<()> {
        let c = self.conn().await?;
        for (setting, bad) in [("synchronous_commit", "off"), ("fsync", "off")] {
            let row = c
                .query_one(&format!("SHOW {setting}"), &[])
                .await
                .map_err(db_err)?;
            let value: String = row.get(0);
            if value.eq_ignore_ascii_case(bad) {
                return Err(StoreError::Engine(format!(
                    "refusing to start: the PostgreSQL session has {setting} = {value}; a commit \
                     could be answered before it is durable (set {setting} = on)"
                )));
            }
        }
        Ok(())
    }

    /// Run `body` in one READ COMMITTED transaction (conflicts are settled by the explicit row
    /// locks the bodies take), committing when it returns `Ok`; a serialization failure, a
    /// deadlock or a connection lost before COMMIT runs it again on a new connection, at most
    /// [`MAX_ATTEMPTS`] times. The answer exists only after `COMMIT` returned. A connection
    /// lost during COMMIT leaves the outcome unknown: that is answered as an error (never a
    /// success), whose retry by the client is deduplicated by the write's key.
    ///
    /// `body` is handed `args` by reference, so an attempt run again needs no copy of them.
    pub(crate) async fn tx<A, T, F>(&self, args: &A, body: F) -> Result<T>
    where
        A: Sync,
        F: for<'t> FnMut(&'t Transaction<'t>, &'t A) -> Body<'t, T> + Send,
        T: Send,
    {
        self.run(InTx { args, body }).await
    }

    /// [`Db::tx`]'s retry discipline around any [`Attempt`] (one that sends its own BEGIN and
    /// COMMIT pipelined with its statements: `crate::pipeline`).
    pub(crate) async fn run<T: Send>(&self, mut attempt: impl Attempt<T>) -> Result<T> {
        let mut attempt_no = 0;
        loop {
            attempt_no += 1;
            let mut c = self.conn().await?;
            let (res, in_commit) = attempt.once(&mut c).await;
            let e = match res {
                Ok(v) => {
                    STATS.succeeded();
                    return Ok(v);
                }
                Err(OpError::Store(e)) => return Err(e),
                Err(OpError::Db(e)) => e,
            };
            if lost(&e) {
                c.discard();
                PoolStats::add(&STATS.lost, 1);
                STATS.degrade();
            }
            if in_commit && lost(&e) {
                PoolStats::add(&STATS.commit_unknown, 1);
                tracing::warn!(
                    error = %e,
                    "postgres: the connection was lost during COMMIT; its outcome is unknown, \
                     answered as an error so the client retries (deduplicated by its key)"
                );
                return Err(db_err(e));
            }
            if !retryable(&e) || attempt_no >= MAX_ATTEMPTS {
                return Err(db_err(e));
            }
            if lost(&e) {
                PoolStats::add(&STATS.reruns, 1);
            }
            tokio::time::sleep(Duration::from_millis(u64::from(attempt_no) * 2)).await;
        }
    }

    /// A pooled connection for a read outside a write transaction: one the fence admits
    /// (checked again when its last check is over a second old; a connection refused leaves
    /// the pool, and the next one is tried once).
    pub(crate) async fn conn(&self) -> Result<Conn> {
        let mut refused = String::new();
        for _ in 0..2 {
            let mut c = self.pooled().await?;
            let (id, created) = (
                deadpool_postgres::Object::id(&c),
                deadpool_postgres::Object::metrics(&c).created,
            );
            match self.fence.recheck(id, created, &c).await {
                Ok(()) => return Ok(c),
                Err(why) => {
                    c.discard();
                    STATS.degrade();
                    refused = why;
                }
            }
        }
        Err(StoreError::Engine(format!(
            "postgres: refusing the node: {refused}"
        )))
    }

    /// A connection from the pool (a new one has passed the fence), not checked again yet.
    async fn pooled(&self) -> Result<Conn> {
        let started = std::time::Instant::now();
        if self.pool.status().available == 0 {
            PoolStats::add(&STATS.waits, 1);
        }
        let got = self.pool.get().await;
        let micros = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        PoolStats::add(&STATS.gets, 1);
        PoolStats::add(&STATS.get_micros, micros);
        if got.is_err() {
            PoolStats::add(&STATS.connect_errors, 1);
            STATS.degrade();
        }
        got.map(|o| Conn(Some(o), self.tls.clone()))
            .map_err(pool_err)
    }

    /// A connection of its own, outside the pool, set up as the pooled ones are: the caller
    /// drives its `Connection` (`crate::watch` listens on it).
    ///
    /// # Errors
    /// `Engine` when no host of the url answers.
    pub(crate) async fn dedicated(
        &self,
    ) -> Result<(
        tokio_postgres::Client,
        tokio_postgres::Connection<tokio_postgres::Socket, crate::tls::RustlsStream>,
    )> {
        let (cfg, tls) = &*self.session;
        cfg.connect(tls.clone()).await.map_err(db_err)
    }

    /// Close the pool (open connections end as they are returned).
    pub(crate) fn close(&self) {
        self.pool.close();
    }
}

/// The pool's hook on each new connection: `fence` admits the node or the connection is
/// dropped (the pool answers an error: 503 to clients).
fn fenced(fence: Fence) -> Hook {
    Hook::async_fn(move |client, _| {
        let fence = fence.clone();
        Box::pin(async move { fence.admit(client).await.map_err(HookError::message) })
    })
}

/// One try of an operation on a connection: its result, and whether a failure may have come
/// after its COMMIT was sent (the outcome then unknown when the connection broke).
pub(crate) type Tried<'c, T> = Pin<Box<dyn Future<Output = (OpResult<T>, bool)> + Send + 'c>>;

/// An operation [`Db::run`] tries on a connection, again on a new one when that may help.
pub(crate) trait Attempt<T>: Send {
    fn once<'c>(&'c mut self, c: &'c mut Conn) -> Tried<'c, T>
    where
        T: 'c;
}

/// A body and its arguments, run inside a deadpool transaction ([`Db::tx`]).
struct InTx<'a, A, F> {
    args: &'a A,
    body: F,
}

impl<A, T, F> Attempt<T> for InTx<'_, A, F>
where
    A: Sync,
    F: for<'t> FnMut(&'t Transaction<'t>, &'t A) -> Body<'t, T> + Send,
    T: Send,
{
    fn once<'c>(&'c mut self, c: &'c mut Conn) -> Tried<'c, T>
    where
        T: 'c,
    {
        Box::pin(attempt_once(c, self.args, &mut self.body))
    }
}

/// One attempt of [`Db::tx`] on `c`: the body's result, committed when `Ok`, and whether a
/// failure came from the COMMIT itself (its outcome then unknown when the connection broke).
async fn attempt_once<A, T, F>(c: &mut Conn, args: &A, body: &mut F) -> (OpResult<T>, bool)
where
    A: Sync,
    F: for<'t> FnMut(&'t Transaction<'t>, &'t A) -> Body<'t, T> + Send,
    T: Send,
{
    let t = match c.transaction().await {
        Ok(t) => t,
        Err(e) => return (Err(OpError::Db(e)), false),
    };
    match body(&t, args).await {
        Ok(v) => (t.commit().await.map(|()| v).map_err(OpError::Db), true),
        Err(e) => {
            let _ = t.rollback().await;
            (Err(e), false)
        }
    }
}

/// A read-only REPEATABLE READ transaction on `c`: one consistent snapshot for a read of
/// several statements (a pull page with its head, the relay log, a dump, a backup).
pub(crate) async fn snapshot(c: &mut deadpool_postgres::Object) -> Result<Transaction<'_>> {
    c.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db_err)
}

/// [`snapshot`] for a stream, which may wait on its reader for longer than the operation
/// deadline between statements: the server's idle-in-transaction limit lifted for it.
pub(crate) async fn stream_snapshot(c: &mut deadpool_postgres::Object) -> Result<Transaction<'_>> {
    let t = snapshot(c).await?;
    t.batch_execute(UNBOUNDED_IDLE).await.map_err(db_err)?;
    Ok(t)
}

/// Lifts the sessions' idle-in-transaction limit for the transaction it runs in.
pub(crate) const UNBOUNDED_IDLE: &str = "SET LOCAL idle_in_transaction_session_timeout = 0";

/// u64 → BIGINT. [`NEVER_EXPIRES`](relay_store::NEVER_EXPIRES) (u64::MAX) is `i64::MAX`;
/// every other value saturates one below it, so "never" stays beyond any finite time or seq
/// (finite values that large are 292 million years of milliseconds: tests' far clocks only).
pub(crate) fn i(v: u64) -> i64 {
    if v == u64::MAX {
        i64::MAX
    } else {
        i64::try_from(v).unwrap_or(i64::MAX - 1).min(i64::MAX - 1)
    }
}

/// BIGINT → u64 (`i64::MAX` is "never": u64::MAX again; negatives cannot be stored by us).
pub(crate) fn u(v: i64) -> u64 {
    if v == i64::MAX {
        u64::MAX
    } else {
        u64::try_from(v).unwrap_or(0)
    }
}

/// A stored 32-byte key.
pub(crate) fn key32(v: &[u8], what: &str) -> Result<[u8; 32]> {
    v.try_into()
        .map_err(|_| StoreError::Corrupt(format!("{what}: a key that is not 32 bytes")))
}
