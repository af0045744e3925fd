//! Opening the fjall engine of a store directory: its lock, the `db` folder, the partitions.
//! Shared by `Store::open`, the writer's reopen after a failed write (`recover`), restore and
//! migrations' test hooks; it knows nothing of writers or schemas.

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::Arc;

use fjall::Database;
use relay_store::{Result, StoreError};

use crate::lock::StoreLock;
use crate::parts::Parts;

/// fjall's smallest journal cap (below it fjall panics).
const JOURNAL_CAP: u64 = 64 * 1024 * 1024;
/// Block cache. 8 MiB keeps a relay with 1,000,000 items queued under 64 MiB resident; the
/// point reads the push path depends on (dedup misses) stay fast because the dedup partition's
/// filters are pinned outside the cache (`parts.rs`). Measured at 1M queued (docs/performance-history.md):
/// 16 MiB gave 75–79 MiB resident, 8 MiB alone 55–59 MiB but 25% fewer batched pushes a second,
/// 8 MiB with pinned dedup filters 58 MiB at the 16 MiB throughput within noise.
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// The engine directory inside a store directory.
pub(crate) const DB_DIR: &str = "db";

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
