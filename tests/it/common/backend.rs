//! Which store a test relay runs on: the fjall directory (the default) or a fresh database on a
//! throwaway PostgreSQL cluster, and [`backend_tests!`], which makes a `fjall::<test>` and a
//! `postgres::<test>` test of one test body taking the [`Backend`].
//!
//! One cluster per test binary, started by the first relay that asks for a database and shared
//! by every test of the binary (each relay gets its own `CREATE DATABASE`), so a binary pays one
//! `initdb`. A static is never dropped, so the cluster is stopped by an `atexit` handler when the
//! test binary exits (passing or failing).

use std::sync::{Mutex, OnceLock};

use relay_testkit::cluster::{find_bindir, PgCluster};

use super::{Relay, RelayOpts, GENEROUS};

/// The store backend of a test relay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Backend {
    /// A fjall store directory (`--store-dir`), as `mbx-relay serve` does by default.
    #[default]
    Fjall,
    /// A fresh database on the binary's shared throwaway cluster (`--store postgres://...`);
    /// `--store-dir` then holds only relay.key and the admin socket.
    Postgres,
}

impl Backend {
    /// Options for a relay on this backend with these extra arguments.
    pub(crate) fn opts(self, args: &[&str]) -> RelayOpts {
        RelayOpts::args(args).on(self)
    }

    /// [`Relay::start`] on this backend.
    pub(crate) fn start(self, args: &[&str]) -> Relay {
        Relay::launch(self.opts(args)).expect("relay starts")
    }

    /// [`Relay::start_generous`] on this backend.
    pub(crate) fn start_generous(self, args: &[&str]) -> Relay {
        let mut all: Vec<&str> = GENEROUS.to_vec();
        all.extend_from_slice(args);
        self.start(&all)
    }
}

/// True when PostgreSQL's server binaries are installed; else prints a skip line for `test`
/// (the same rule as `PgCluster::start_or_skip`: `.ci/run` installs them).
pub(crate) fn postgres_available(test: &str) -> bool {
    if find_bindir().is_some() {
        return true;
    }
    eprintln!(
        "SKIP {test}: PostgreSQL server binaries not found (set MBX_PG_BINDIR or install the \
         postgresql package; .ci/run does)"
    );
    false
}

/// The binary's shared cluster; `None` inside once it was stopped at exit.
static CLUSTER: OnceLock<Mutex<Option<PgCluster>>> = OnceLock::new();

extern "C" fn stop_cluster_at_exit() {
    if let Some(m) = CLUSTER.get() {
        let cluster = m.lock().unwrap_or_else(|p| p.into_inner()).take();
        drop(cluster);
    }
}

/// A fresh empty database on the binary's shared cluster (started on first use), as a URL.
pub(crate) fn fresh_database() -> String {
    let cluster = CLUSTER.get_or_init(|| {
        let c = PgCluster::start_or_skip("backend").expect("PostgreSQL server binaries");
        // SAFETY: registers a plain `extern "C" fn()`; it runs once, at process exit.
        let registered = unsafe { libc::atexit(stop_cluster_at_exit) };
        assert_eq!(registered, 0, "atexit refused the cluster's stop handler");
        Mutex::new(Some(c))
    });
    let guard = cluster.lock().unwrap_or_else(|p| p.into_inner());
    guard.as_ref().expect("cluster running").fresh_db()
}

/// Runs `sql` with `psql` on the database `db_url` and returns its unaligned, tuples-only output
/// (`|` between columns, one row a line), for assertions on rows the protocol does not show.
pub(crate) fn psql(db_url: &str, sql: &str) -> String {
    let bindir = find_bindir().expect("PostgreSQL binaries");
    relay_testkit::cluster::psql(&bindir, db_url, sql)
        .unwrap_or_else(|e| panic!("psql {sql:?}: {e}"))
}

/// Makes two tests of each named test body `fn name(backend: Backend)`: `fjall::name` and
/// `postgres::name` (skipped, with a line saying so, when PostgreSQL is not installed).
/// Attributes before a name (e.g. `#[cfg(feature = "failpoints")]`) go on both tests.
///
/// Names after `postgres ignored:` get a `postgres::` test marked `#[ignore]`: the suite's time
/// budget runs on PostgreSQL the tests that prove the most about the store per second, and
/// these (HTTP, hop and text checks that do not depend on the store, or slow ones covered
/// elsewhere) run there with `cargo test -- --include-ignored`.
#[allow(unused_macros)]
macro_rules! backend_tests {
    ($( $(#[$meta:meta])* $name:ident ),* $(,)?) => {
        backend_tests! { $( $(#[$meta])* $name ),* ; postgres ignored: }
    };
    (
        $( $(#[$meta:meta])* $name:ident ),* $(,)? ;
        postgres ignored: $( $(#[$imeta:meta])* $iname:ident ),* $(,)?
    ) => {
        mod fjall {
            $( $(#[$meta])* #[test] fn $name() { super::$name($crate::common::Backend::Fjall) } )*
            $(
                $(#[$imeta])*
                #[test]
                fn $iname() {
                    super::$iname($crate::common::Backend::Fjall)
                }
            )*
        }
        mod postgres {
            $(
                $(#[$meta])*
                #[test]
                fn $name() {
                    if $crate::common::postgres_available(stringify!($name)) {
                        super::$name($crate::common::Backend::Postgres)
                    }
                }
            )*
            $(
                $(#[$imeta])*
                #[test]
                #[ignore = "on PostgreSQL with --include-ignored (suite time budget)"]
                fn $iname() {
                    if $crate::common::postgres_available(stringify!($iname)) {
                        super::$iname($crate::common::Backend::Postgres)
                    }
                }
            )*
        }
    };
}
pub(crate) use backend_tests;
