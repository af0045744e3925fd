//! The one place a store backend is chosen and opened, and a backup file checked or restored
//! into a new store: everything above it (relay, admin socket, relay-tool) holds the
//! [`SharedStore`] it returns and knows no backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use relay_keyspace::EngineOptions;
use relay_store::{BackupError, BackupSummary, OpenOptions, SharedStore, StoreError};

/// Which backend and where, from `serve --store` / `MBX_RELAY_STORE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    /// A fjall store directory (the default: `--store-dir`).
    Dir(PathBuf),
    /// A PostgreSQL database (`postgres://` or `postgresql://` url): relay-pgstore.
    Postgres(String),
}

impl StoreSpec {
    /// Parse a `--store` value: a directory path or a `postgres://` url. Another URL
    /// (`scheme://`) names a backend this build does not have, and is refused (saying what is
    /// taken) rather than taken for a directory name.
    ///
    /// # Errors
    /// A message naming the value's scheme, or an empty value.
    pub fn parse(s: &str) -> Result<StoreSpec, String> {
        if s.is_empty() {
            return Err("--store: empty value (give a store directory)".into());
        }
        if let Some((scheme, _)) = s.split_once("://") {
            if scheme == "postgres" || scheme == "postgresql" {
                return Ok(StoreSpec::Postgres(s.to_string()));
            }
            return Err(format!(
                "--store: {scheme}:// stores are not supported; give a store directory or a \
                 postgres://user@host:port/db url"
            ));
        }
        Ok(StoreSpec::Dir(PathBuf::from(s)))
    }

    /// The backend's name for `/status`: `directory` or `postgres`.
    pub fn backend_name(&self) -> &'static str {
        match self {
            StoreSpec::Dir(_) => "directory",
            StoreSpec::Postgres(_) => "postgres",
        }
    }

    /// The store directory, for a directory store.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            StoreSpec::Dir(d) => Some(d),
            StoreSpec::Postgres(_) => None,
        }
    }
}

impl std::fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreSpec::Dir(d) => write!(f, "{}", d.display()),
            // Never the password: host, port and database only.
            StoreSpec::Postgres(url) => write!(f, "postgres://{}", postgres_label(url)),
        }
    }
}

/// Open the store `spec` names (blocking: call it from a blocking task in async code).
/// With the `failpoints` feature, a directory store also gets the persist-failure watcher
/// (`crate::failpoint::watch_persist_failures`).
///
/// # Errors
/// The backend's open error (`Locked`, `Missing`, `SchemaTooNew`, `Corrupt`, ...).
pub fn open_store(spec: &StoreSpec, opts: OpenOptions) -> Result<SharedStore, StoreError> {
    open_store_with(spec, opts, EngineOptions::default())
}

/// [`open_store`] with what only a directory (fjall) store is opened with; a PostgreSQL
/// store ignores `engine`.
///
/// # Errors
/// As [`open_store`].
pub fn open_store_with(
    spec: &StoreSpec,
    opts: OpenOptions,
    engine: EngineOptions,
) -> Result<SharedStore, StoreError> {
    match spec {
        StoreSpec::Dir(dir) => {
            let store = relay_keyspace::Store::open_with(dir, opts, engine)?;
            crate::failpoint::watch_persist_failures(&store);
            Ok(Arc::new(store))
        }
        StoreSpec::Postgres(url) => {
            let store = relay_pgstore::PgStore::open(url, opts)?;
            if !relay_pgstore::UNIMPLEMENTED.is_empty() {
                tracing::warn!(
                    "the PostgreSQL store is incomplete: {} answer an error on it",
                    relay_pgstore::UNIMPLEMENTED.join(", ")
                );
            }
            Ok(Arc::new(store))
        }
    }
}

/// One counter a backend keeps about its link to the database: name (after `mbx_relay_`,
/// without `_total`), help, value.
pub(crate) type BackendCounter = (&'static str, &'static str, f64);

/// The PostgreSQL pool's counters (relay-pgstore's plain figures, named here so the metrics
/// layer knows no backend); empty when this process opened no PostgreSQL store.
pub(crate) fn backend_counters() -> Vec<BackendCounter> {
    let Some(f) = relay_pgstore::pool_figures() else {
        return Vec::new();
    };
    #[allow(clippy::cast_precision_loss)] // counts far below 2^53
    let n = |v: u64| v as f64;
    vec![
        ("pg_pool_gets", "Connections taken from the PostgreSQL pool", n(f.gets)),
        (
            "pg_pool_waits",
            "Takes from the PostgreSQL pool that found no idle connection and waited",
            n(f.waits),
        ),
        (
            "pg_pool_get_seconds",
            "Time spent taking connections from the PostgreSQL pool (waits and connects included)",
            n(f.get_micros) / 1e6,
        ),
        (
            "pg_connect_errors",
            "Takes from the PostgreSQL pool that failed: no writable server reachable, or the wait timed out",
            n(f.connect_errors),
        ),
        (
            "pg_connections_lost",
            "PostgreSQL connections discarded as lost (closed, broken, shutting down, read-only)",
            n(f.lost),
        ),
        (
            "pg_reconnects",
            "Writes that succeeded after connections were lost or failed: the database (a promoted standby, a restarted server) answering again",
            n(f.reconnects),
        ),
        (
            "pg_reruns",
            "Operations run again on a new connection after theirs was lost before COMMIT",
            n(f.reruns),
        ),
        (
            "pg_commit_unknown",
            "Connections lost during COMMIT (outcome unknown, answered 503 for a deduplicated retry)",
            n(f.commit_unknown),
        ),
        (
            "pg_timeouts",
            "PostgreSQL operations abandoned at the 10 s operation deadline (answered 503)",
            n(f.timeouts),
        ),
        (
            "pg_cancels",
            "Cancel requests sent for the backends of PostgreSQL operations abandoned at their deadline",
            n(f.cancels),
        ),
        (
            "pg_fenced",
            "New PostgreSQL connections refused: the node was not the current primary of the newest timeline",
            n(f.fenced),
        ),
        (
            "pg_insert_groups",
            "PostgreSQL insert transactions run for pushes grouped while others committed",
            n(f.insert_groups),
        ),
        (
            "pg_grouped_pushes",
            "Pushes answered by those transactions (over pg_insert_groups: the mean group size)",
            n(f.grouped_pushes),
        ),
        (
            "pg_insert_flights",
            "PostgreSQL insert transactions sent in one round trip, decided from a guess of the rows they read",
            n(f.insert_flights),
        ),
        (
            "pg_insert_flights_missed",
            "Of those, the ones whose guess was wrong: nothing written, run again in two round trips",
            n(f.insert_flights_missed),
        ),
        (
            "pg_listen_lost",
            "PostgreSQL connections listening for other relay processes' changes that ended or could not be made",
            n(f.listen_lost),
        ),
        (
            "pg_watch_dropped",
            "Other relay processes' notifications dropped while this one lagged (its one-second poll covers them)",
            n(f.watch_dropped),
        ),
    ]
}

/// `host:port/db` of a postgres url (user and password left out).
fn postgres_label(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    rest.split('?').next().unwrap_or(rest)
}

/// Check a backup file end to end (magic, format, every checksum, counts, the relay-log
/// chain) without opening any store: formats 5 and 6, the logical stream every backend writes
/// (`relay_store::backup`), or the fjall keyspace's raw formats 1-4.
///
/// # Errors
/// [`BackupError`] naming what is wrong and where.
pub fn verify_backup_file(file: &Path) -> Result<BackupSummary, BackupError> {
    if relay_store::backup::is_logical(relay_store::backup::read_format(file)?) {
        relay_store::backup::verify(file)
    } else {
        relay_keyspace::verify_backup(file)
    }
}

/// Build the new store `spec` names from a backup file, rotating the epoch and logging the
/// restore as every restore does; answers the file's summary and the new epoch. A directory
/// must not exist yet; a PostgreSQL database must hold no relay (its restore is one
/// transaction: a failure leaves it empty). Formats 5 and 6 restore into either backend; the raw
/// formats 1-4 only into a directory (restore there, then back it up again to move it).
///
/// # Errors
/// [`BackupError`]: a damaged file, a schema newer than this build, an existing target, I/O.
pub fn restore_into(file: &Path, spec: &StoreSpec) -> Result<(BackupSummary, String), BackupError> {
    match spec {
        StoreSpec::Dir(dir) => relay_keyspace::restore_backup(file, dir),
        StoreSpec::Postgres(url) => {
            let format = relay_store::backup::read_format(file)?;
            if !relay_store::backup::is_logical(format) {
                return Err(BackupError::Io {
                    context: format!(
                        "backup format {format} holds the fjall store's raw rows and restores only \
                         into a store directory; restore it there, then back that store up again \
                         (format {}) to move it to PostgreSQL",
                        relay_store::backup::LOGICAL_FORMAT_VERSION
                    ),
                    source: std::io::Error::from(std::io::ErrorKind::Unsupported),
                });
            }
            relay_pgstore::PgStore::restore_backup(url, file)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_a_directory_store_a_postgres_url_a_database_and_other_urls_are_refused() {
        assert_eq!(
            StoreSpec::parse("./relay-data").unwrap(),
            StoreSpec::Dir(PathBuf::from("./relay-data"))
        );
        let e = StoreSpec::parse("mysql://relay@db/relay").unwrap_err();
        assert!(e.contains("mysql://"), "{e}");
        assert!(e.contains("postgres://"), "says what works: {e}");
        let pg = StoreSpec::parse("postgres://relay:secret@db:5432/relay").unwrap();
        assert_eq!(
            pg.to_string(),
            "postgres://db:5432/relay",
            "no credentials shown"
        );
        assert!(StoreSpec::parse("").is_err());
    }
}
