//! The `PgStore` handle: opening (url, durability check, migrations), its own small runtime on
//! which every database call runs ([`crate::ctx`]: what operations run with), and closing.

use std::sync::{Arc, Mutex};

use relay_store::{OpenOptions, Result, StoreError};
use tokio::runtime::Runtime;

use crate::combine::Combiner;
use crate::ctx::{run_blocking, Ctx};
use crate::db::Db;

/// Threads of the store's runtime. The work is waiting on the database, not computing, and one
/// thread drives every connection with fewer cross-thread wakeups: with two, a single push at
/// 64 senders cost 278 µs of relay CPU against 242 with one (medians of 3 alternating runs;
/// docs/performance-history.md). A blocking read from a task of this runtime still works: the flavour
/// stays multi-thread, so `block_in_place` hands the worker on.
const RUNTIME_THREADS: usize = 1;

/// A relay store on PostgreSQL. Cheap to clone; `RelayStore::close` or the last drop stops it.
#[derive(Clone)]
pub struct PgStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    /// What every operation runs with.
    pub(crate) ctx: Ctx,
    /// Pushes waiting to share an insert transaction (`combine`).
    pub(crate) inserts: Arc<Combiner>,
    /// The database name and host for messages (never the password).
    label: String,
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
        let ctx = Ctx::new(db, opts.clock, opts.log_retention, handle);
        Ok(PgStore {
            inner: Arc::new(Inner {
                inserts: Arc::new(Combiner::new(ctx.clone())),
                ctx,
                label: label_of(url),
                rt: Mutex::new(Some(rt)),
            }),
        })
    }

    /// Where this store lives (`host:port/db`, no credentials).
    pub fn label(&self) -> &str {
        &self.inner.label
    }

    /// What this store's operations run with.
    /// How this handle's insert transactions were sent: in one round trip (and how many of
    /// those missed their guess) or in two.
    pub fn insert_paths(&self) -> crate::combine::InsertPaths {
        self.inner.inserts.paths()
    }

    pub(crate) fn ctx(&self) -> &Ctx {
        &self.inner.ctx
    }
}

impl Inner {
    pub(crate) fn shutdown(&self) {
        self.ctx.db.close();
        if let Some(rt) = self.rt.lock().ok().and_then(|mut r| r.take()) {
            // Never blocks (a drop inside another runtime must not).
            rt.shutdown_background();
            let p = self.inserts.paths();
            tracing::info!(
                one_flight = p.flights,
                one_flight_missed = p.missed,
                two_trips = p.two_trips,
                "postgres: how this store's insert transactions were sent"
            );
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}
