//! The connection pool and the transaction discipline every operation goes through: one
//! transaction per logical operation, bounded retry on serialization failure (40001) and
//! deadlock (40P01), and the durability check made at open (`synchronous_commit`, `fsync`).

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr as _;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Transaction};
use relay_store::{Result, StoreError};
use tokio_postgres::error::SqlState;

/// Connections per relay process (PostgreSQL's default `max_connections` is 100).
pub(crate) const POOL_SIZE: usize = 16;
/// Attempts of one operation that hits a serialization failure or a deadlock.
const MAX_ATTEMPTS: u32 = 8;

/// Map a client error to a store error (the text names the server's reason; no row data).
pub(crate) fn db_err(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(d) => StoreError::Engine(format!("postgres: {} ({})", d.message(), d.code().code())),
        None => StoreError::Engine(format!("postgres: {e}")),
    }
}

fn pool_err(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => db_err(e),
        other => StoreError::Engine(format!("postgres pool: {other}")),
    }
}

/// Whether a failed transaction may simply run again.
fn retryable(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| {
        *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    })
}

/// An error inside an operation: a database error (maybe retryable) or a store error.
pub(crate) enum OpError {
    Db(tokio_postgres::Error),
    Store(StoreError),
}

impl From<tokio_postgres::Error> for OpError {
    fn from(e: tokio_postgres::Error) -> Self {
        OpError::Db(e)
    }
}

impl From<StoreError> for OpError {
    fn from(e: StoreError) -> Self {
        OpError::Store(e)
    }
}

/// What an operation body returns.
pub(crate) type OpResult<T> = std::result::Result<T, OpError>;

/// A boxed operation body run inside one transaction.
pub(crate) type Body<'a, T> = Pin<Box<dyn Future<Output = OpResult<T>> + Send + 'a>>;

/// The pool, and the url's database for messages (never the password).
#[derive(Clone)]
pub(crate) struct Db {
    pool: Pool,
}

impl Db {
    /// Build the pool for `url` and check, on one connection, that commits are durable.
    ///
    /// # Errors
    /// `Engine` when the url is malformed, the server unreachable, or `synchronous_commit` /
    /// `fsync` is off (naming the setting).
    pub(crate) async fn connect(url: &str) -> Result<Db> {
        let mut cfg = tokio_postgres::Config::from_str(url)
            .map_err(|e| StoreError::Engine(format!("bad postgres url: {e}")))?;
        // Every session asks for durable commits itself; the check below refuses a server
        // (or role) where it does not hold.
        if cfg.get_options().is_none() {
            cfg.options("-c synchronous_commit=on");
        }
        cfg.application_name("mbx-relay");
        cfg.connect_timeout(std::time::Duration::from_secs(10));
        let mgr = Manager::from_config(
            cfg,
            tokio_postgres::NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(mgr)
            .max_size(POOL_SIZE)
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .wait_timeout(Some(std::time::Duration::from_secs(30)))
            .create_timeout(Some(std::time::Duration::from_secs(10)))
            .build()
            .map_err(|e| StoreError::Engine(format!("postgres pool: {e}")))?;
        let db = Db { pool };
        db.check_durable().await?;
        Ok(db)
    }

    /// Refuse a session whose commits could return before they are durable.
    async fn check_durable(&self) -> Result<()> {
        let c = self.pool.get().await.map_err(pool_err)?;
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
    /// locks the bodies take), committing when it returns `Ok`; a serialization failure or a
    /// deadlock runs it again, at most [`MAX_ATTEMPTS`] times. The answer exists only after
    /// `COMMIT` returned.
    pub(crate) async fn tx<T, F>(&self, mut body: F) -> Result<T>
    where
        F: for<'t> FnMut(&'t Transaction<'t>) -> Body<'t, T> + Send,
        T: Send,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut c = self.pool.get().await.map_err(pool_err)?;
            let t = c.transaction().await.map_err(db_err)?;
            let out = body(&t).await;
            let res = match out {
                Ok(v) => t.commit().await.map(|()| v).map_err(OpError::Db),
                Err(e) => {
                    let _ = t.rollback().await;
                    Err(e)
                }
            };
            match res {
                Ok(v) => return Ok(v),
                Err(OpError::Db(e)) if retryable(&e) && attempt < MAX_ATTEMPTS => {
                    tokio::time::sleep(std::time::Duration::from_millis(u64::from(attempt) * 2))
                        .await;
                }
                Err(OpError::Db(e)) => return Err(db_err(e)),
                Err(OpError::Store(e)) => return Err(e),
            }
        }
    }

    /// A pooled connection for a read outside a write transaction.
    pub(crate) async fn conn(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(pool_err)
    }

    /// Close the pool (open connections end as they are returned).
    pub(crate) fn close(&self) {
        self.pool.close();
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
