//! Serving again after a failed write, without a restart.
//!
//! fjall poisons its database after a failed journal write or fsync (ENOSPC, EIO, EFBIG): every
//! later write fails until the database is opened again. So the writer treats any failed group
//! as "the open database can no longer be trusted" and, before it runs the next group, drops the
//! database and opens it again from disk. Journal recovery then yields the durable state: what
//! was never acknowledged may or may not be there (it was answered with an error, so a retry is
//! either new or a duplicate of the original seq), and every usage counter is read back from the
//! same recovered rows, so counters and data agree.
//!
//! Reopening needs fjall's lock file released, i.e. every handle of the old database dropped,
//! including the published read view. To keep reads served from the last durable snapshot for
//! as long as possible, the writer first checks there is room to write ([`PROBE_BYTES`]) and
//! only then drops the old database. Attempts are made only when a group arrives, and no more
//! often than a backoff that grows with consecutive failures ([`backoff`]): never a busy loop.
//! Each change of state is logged once (errors only: never wire bytes or key material).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use fjall::PersistMode;

use crate::parts::Parts;
use crate::reader::{SnapView, ViewSlot};

/// Bytes written and fsync'd as a free-space check before the old database is dropped.
const PROBE_BYTES: u64 = 1024 * 1024;
/// The probe file, inside the store directory (removed after each check).
const PROBE_FILE: &str = "space-probe.tmp";
/// Longest wait for readers still holding the old database before giving this attempt up.
const READERS_WAIT: Duration = Duration::from_secs(2);
/// First retry delay after a failed attempt; doubles per consecutive failure up to [`MAX_DELAY`].
const BASE_DELAY: Duration = Duration::from_millis(100);
/// Longest delay between two reopen attempts.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// State shared with the [`crate::Store`] handle: read errors while recovering, and a counter.
#[derive(Default)]
pub(crate) struct Shared {
    /// The read view was dropped to reopen the database and no new one is published yet.
    pub recovering: AtomicBool,
    /// Successful reopens since the store was opened.
    pub reopens: AtomicU64,
}

/// The delay before the next attempt after `streak` consecutive failures: the first reopen is
/// immediate, later ones back off.
fn backoff(streak: u32) -> Duration {
    if streak <= 1 {
        return Duration::ZERO;
    }
    let shift = (streak - 2).min(16);
    BASE_DELAY.saturating_mul(1u32 << shift).min(MAX_DELAY)
}

/// The writer's recovery state.
pub(crate) struct Recovery {
    dir: PathBuf,
    pub shared: Arc<Shared>,
    /// Why the database needs reopening (None: it is healthy).
    failed: Option<String>,
    /// Failed groups and attempts since the last successful group.
    streak: u32,
    /// No attempt before this instant.
    next_try: Instant,
    /// The last reopen failure logged (logged again only when it changes).
    logged: Option<String>,
}

impl Recovery {
    /// Recovery for the store in `dir` (the directory holding `db`).
    pub(crate) fn new(dir: PathBuf) -> Recovery {
        Recovery {
            dir,
            shared: Arc::new(Shared::default()),
            failed: None,
            streak: 0,
            next_try: Instant::now(),
            logged: None,
        }
    }

    /// A group failed: its database must be reopened before the next group runs.
    pub(crate) fn group_failed(&mut self, why: &str) {
        if self.failed.is_none() {
            tracing::error!(
                error = %why,
                "store write failed: answering errors; the database is reopened before the next write"
            );
        } else {
            tracing::debug!(error = %why, "store write failed again");
        }
        self.failed = Some(why.to_string());
        self.note_failure();
    }

    /// A group was made durable: the backoff starts over.
    pub(crate) fn group_ok(&mut self) {
        self.streak = 0;
    }

    fn note_failure(&mut self) {
        self.streak = self.streak.saturating_add(1);
        self.next_try = Instant::now() + backoff(self.streak);
    }

    /// The database the next group runs against, reopening it first if a group failed.
    ///
    /// # Errors
    /// Why the store cannot take writes yet (the group is answered with it, never run).
    pub(crate) fn ready(
        &mut self,
        parts: &mut Option<Arc<Parts>>,
        view: &ViewSlot,
    ) -> Result<Arc<Parts>, String> {
        let Some(cause) = self.failed.clone() else {
            return parts
                .clone()
                .ok_or_else(|| "internal error: the store has no open database".to_string());
        };
        let refused = |detail: &str| {
            format!(
                "not durable: the store is recovering from a write failure ({cause}); {detail}; retry later"
            )
        };
        if Instant::now() < self.next_try {
            return Err(refused("reopen pending"));
        }
        match self.reopen(parts, view) {
            Ok(p) => {
                tracing::info!(
                    "store database reopened after a write failure: serving writes again"
                );
                self.failed = None;
                self.logged = None;
                self.shared.reopens.fetch_add(1, Ordering::Relaxed);
                Ok(p)
            }
            Err(why) => {
                if self.logged.as_deref() != Some(why.as_str()) {
                    tracing::warn!(
                        error = %why,
                        "reopening the store database failed: writes keep failing; retried when writes arrive (backing off)"
                    );
                    self.logged = Some(why.clone());
                }
                self.note_failure();
                Err(refused(&why))
            }
        }
    }

    /// Drop the old database and open it again from disk; publish a fresh durable view.
    fn reopen(
        &mut self,
        parts: &mut Option<Arc<Parts>>,
        view: &ViewSlot,
    ) -> Result<Arc<Parts>, String> {
        probe_space(&self.dir).map_err(|e| format!("no room to write: {e}"))?;
        if parts.is_some() {
            release(parts, view, &self.shared)?;
        }
        drop_cached_pages(&self.dir.join(crate::engine::DB_DIR));
        let fresh = crate::engine::open_parts(&self.dir, false)
            .map_err(|e| format!("cannot reopen the database: {e}"))?;
        // What recovery replayed may have been in the page cache only: make it durable
        // before any of it is served.
        fresh
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| format!("fsync after reopening failed: {e}"))?;
        let snap = SnapView {
            snap: fresh.db.snapshot(),
            parts: Arc::clone(&fresh),
        };
        publish(view, snap);
        self.shared.recovering.store(false, Ordering::SeqCst);
        *parts = Some(Arc::clone(&fresh));
        Ok(fresh)
    }
}

/// Publish `snap` as the durable read view (unless the store is closing).
pub(crate) fn publish(view: &ViewSlot, snap: SnapView) {
    if let Ok(mut slot) = view.write() {
        *slot = Some(Arc::new(snap));
    }
}

/// Drop every handle of the old database (the writer's and the published view) and wait,
/// bounded, until readers still using it let go, so fjall releases its lock file. If they do
/// not, the old database and view are put back and the attempt is given up.
fn release(parts: &mut Option<Arc<Parts>>, view: &ViewSlot, shared: &Shared) -> Result<(), String> {
    let old_view: Weak<SnapView> = match view.write() {
        Ok(mut slot) => {
            shared.recovering.store(true, Ordering::SeqCst);
            slot.take().map(|v| Arc::downgrade(&v)).unwrap_or_default()
        }
        Err(_) => return Err("internal error: the read view lock is poisoned".into()),
    };
    let old_parts = parts.take().map(|p| Arc::downgrade(&p)).unwrap_or_default();
    let started = Instant::now();
    while old_parts.strong_count() > 0 {
        if started.elapsed() >= READERS_WAIT {
            if let Some(p) = old_parts.upgrade() {
                *parts = Some(p);
                if let Some(v) = old_view.upgrade() {
                    if let Ok(mut slot) = view.write() {
                        *slot = Some(v);
                        shared.recovering.store(false, Ordering::SeqCst);
                    }
                }
                return Err("readers still hold the old database".into());
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

/// Most files whose cached pages are dropped before a reopen (an fjall database holds a journal
/// or two and a few tables per partition; this bounds the walk, not correctness).
const MAX_DROPPED_FILES: usize = 100_000;

/// Ask the kernel to forget the cached pages of every file under `db_dir`, so the reopen reads
/// what is really on disk. After a failed fsync (EIO) Linux may mark the unwritten pages clean
/// and keep serving them from the page cache; replaying those would show the relay writes that
/// never reached the disk. `POSIX_FADV_DONTNEED` drops clean pages only (dirty ones stay and are
/// written back as usual), so it cannot lose data; on a failure it is merely less thorough.
fn drop_cached_pages(db_dir: &Path) {
    let mut stack = vec![db_dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > MAX_DROPPED_FILES {
                return;
            }
            let path = entry.path();
            match entry.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => {
                    if let Ok(f) = std::fs::File::open(&path) {
                        use std::os::fd::AsRawFd as _;
                        // SAFETY: a valid open descriptor; fadvise only changes cache state.
                        unsafe {
                            libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// Write and fsync [`PROBE_BYTES`] in `dir` (then remove them): fails while the disk is full.
fn probe_space(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(PROBE_FILE);
    let written = (|| {
        let mut f = std::fs::File::create(&path)?;
        let n = std::io::copy(&mut std::io::repeat(0).take(PROBE_BYTES), &mut f)?;
        f.flush()?;
        f.sync_all()?;
        Ok(n)
    })();
    let removed = std::fs::remove_file(&path);
    match (written, removed) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        (Ok(_), _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_immediate_first_then_doubles_to_a_cap() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::ZERO);
        assert_eq!(backoff(2), BASE_DELAY);
        assert_eq!(backoff(3), BASE_DELAY * 2);
        assert_eq!(backoff(40), MAX_DELAY);
        assert_eq!(backoff(u32::MAX), MAX_DELAY);
    }

    /// Pages of `path` resident in the page cache (mincore over a fresh mapping).
    fn resident_pages(path: &Path) -> usize {
        use std::os::fd::AsRawFd as _;
        let f = std::fs::File::open(path).unwrap();
        let len = usize::try_from(f.metadata().unwrap().len()).unwrap();
        // SAFETY: mapping a regular file read-only for its length; unmapped before returning.
        unsafe {
            let page = usize::try_from(libc::sysconf(libc::_SC_PAGESIZE)).unwrap();
            let addr = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            );
            assert_ne!(addr, libc::MAP_FAILED);
            let mut vec = vec![0u8; len.div_ceil(page)];
            assert_eq!(libc::mincore(addr, len, vec.as_mut_ptr()), 0);
            libc::munmap(addr, len);
            vec.iter().filter(|b| *b & 1 == 1).count()
        }
    }

    #[test]
    fn cached_pages_of_the_database_files_are_dropped() {
        // Beside the sources, not in the system temp dir: on a tmpfs /tmp the page cache *is*
        // the file and cannot be dropped.
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let nested = dir.path().join("keyspaces").join("1");
        std::fs::create_dir_all(&nested).unwrap();
        let files = [dir.path().join("0.jnl"), nested.join("table")];
        for f in &files {
            std::fs::write(f, vec![7u8; 256 * 1024]).unwrap();
            std::fs::File::open(f).unwrap().sync_all().unwrap();
            assert!(resident_pages(f) > 0, "a just-written file is cached");
        }
        drop_cached_pages(dir.path());
        for f in &files {
            assert_eq!(resident_pages(f), 0, "{} still cached", f.display());
            assert_eq!(std::fs::read(f).unwrap(), vec![7u8; 256 * 1024]);
        }
    }

    #[test]
    fn probe_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        probe_space(dir.path()).unwrap();
        assert!(!dir.path().join(PROBE_FILE).exists());
        assert!(probe_space(&dir.path().join("missing")).is_err());
    }
}
