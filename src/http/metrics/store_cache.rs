//! Whole-store figures (queued items and bytes, enrolments, size on disk, the newest backup the
//! relay log records) for `/metrics` and `/status`, read by `RelayStore::stats` and the relay
//! log at most every [`MAX_AGE`] and by one read at a time.
//! A reader waits at most the time it is given for a fresh reading and otherwise gets the last
//! one (with its age), so a slow store never holds a scrape or `/status` past that.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_store::SharedStore;
use tokio::sync::Notify;

/// How long a reading is reused.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(10);
/// Newest relay-log entries each reading looks at for a backup logged since the last one. The
/// newest backup is exact whatever this is: when the entries logged since the last reading do
/// not all fit (and at the first reading), the whole retained log is searched once instead
/// (`RelayStore::newest_op_of`, at most the log's 200,000 entries).
pub(crate) const RECENT_SCAN: usize = 256;
/// The relay-log kind of a backup: logged only once the backup was kept (fsync'd and verified
/// by relay-tool, or passed on whole), online, offline or beside a shared store, so this is
/// what the store itself says, surviving restarts and seen by every process of a shared store.
const BACKUP_KIND: &str = "backup";

/// The figures of one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreFigures {
    pub queued_items: u64,
    pub queued_bytes: u64,
    pub live_enrolments: u64,
    pub revoked_enrolments: u64,
    pub disk_bytes: u64,
    pub oldest_queued_ms: Option<u64>,
    /// When the newest backup the relay log records was taken (ms); `None` when none was found.
    pub last_backup_ms: Option<u64>,
}

/// What the last reading found in the relay log, so the next one reads only what came since.
#[derive(Debug, Clone, Copy)]
struct LogMark {
    /// The newest backup then (ms).
    backup_ms: Option<u64>,
    /// The newest entry's seq then (`None`: the log was empty).
    head_seq: Option<u64>,
}

#[derive(Default)]
struct State {
    last: Option<(Instant, StoreFigures)>,
    mark: Option<LogMark>,
    reading: bool,
}

/// The cache.
pub(crate) struct StoreCache {
    store: SharedStore,
    state: Mutex<State>,
    read: Notify,
}

impl StoreCache {
    pub(crate) fn new(store: SharedStore) -> Arc<Self> {
        Arc::new(StoreCache {
            store,
            state: Mutex::default(),
            read: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last reading and its age, without waiting.
    pub(crate) fn cached(&self) -> Option<(StoreFigures, Duration)> {
        self.lock().last.map(|(at, f)| (f, at.elapsed()))
    }

    /// A reading at most [`MAX_AGE`] old if one arrives within `wait`, else the last one.
    pub(crate) async fn get(self: &Arc<Self>, wait: Duration) -> Option<(StoreFigures, Duration)> {
        let notified = self.read.notified();
        {
            let mut s = self.lock();
            if let Some((at, f)) = s.last {
                if at.elapsed() < MAX_AGE {
                    return Some((f, at.elapsed()));
                }
            }
            if !s.reading {
                s.reading = true;
                let me = self.clone();
                tokio::spawn(async move { me.refresh().await });
            }
        }
        let _ = tokio::time::timeout(wait, notified).await;
        self.cached()
    }

    /// One `stats` and relay-log read on a blocking thread; the result (if any) replaces the
    /// last reading.
    async fn refresh(self: Arc<Self>) {
        let store = self.store.clone();
        let mark = self.lock().mark;
        let stats = tokio::task::spawn_blocking(move || {
            let st = store.stats()?;
            let mark = newest_backup(store.as_ref(), mark)?;
            Ok::<_, relay_store::StoreError>((st, mark))
        })
        .await;
        let mut s = self.lock();
        s.reading = false;
        match stats {
            Ok(Ok((st, mark))) => {
                let f = StoreFigures {
                    queued_items: st.queued.items,
                    queued_bytes: st.queued.bytes,
                    live_enrolments: st.live_enrolments,
                    revoked_enrolments: st.revoked_enrolments,
                    disk_bytes: st.disk_bytes,
                    oldest_queued_ms: st.oldest_queued_ms,
                    last_backup_ms: mark.backup_ms,
                };
                s.last = Some((Instant::now(), f));
                s.mark = Some(mark);
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "store figures not read"),
            Err(e) => tracing::debug!(error = %e, "store figures task failed"),
        }
        drop(s);
        self.read.notify_waiters();
    }
}

/// The newest backup the relay log records, exactly: from the newest [`RECENT_SCAN`] entries
/// when they hold one, or reach back to what the last reading (`before`) saw; else (the first
/// reading, or more logged since than fit) by searching the whole retained log.
fn newest_backup(
    store: &dyn relay_store::RelayStore,
    before: Option<LogMark>,
) -> relay_store::Result<LogMark> {
    let recent = store.ops(RECENT_SCAN)?;
    let head_seq = recent.first().map(|e| e.seq);
    let in_recent = recent.iter().find(|e| e.kind == BACKUP_KIND);
    let whole_log = recent.len() < RECENT_SCAN;
    let backup_ms = match (in_recent, before) {
        (Some(e), _) => Some(e.at_ms),
        (None, _) if whole_log => None,
        (None, Some(b)) if reaches_back(&recent, b.head_seq) => b.backup_ms,
        (None, _) => store.newest_op_of(BACKUP_KIND)?.map(|e| e.at_ms),
    };
    Ok(LogMark {
        backup_ms,
        head_seq,
    })
}

/// True when `recent` (newest first) holds every entry after `head_seq`.
fn reaches_back(recent: &[relay_store::OpEntry], head_seq: Option<u64>) -> bool {
    match (recent.last(), head_seq) {
        (Some(oldest), Some(head)) => oldest.seq <= head,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_keyspace::Store;
    use relay_store::{OpenOptions, RelayStore};

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), OpenOptions::default()).unwrap();
        (dir, store)
    }

    fn log(store: &Store, kind: &str, n: usize) {
        let pending: Vec<_> = (0..n)
            .map(|i| store.log_op(kind, &format!("{i}")))
            .collect();
        for p in pending {
            p.wait().unwrap();
        }
    }

    fn backup_at(store: &Store) -> u64 {
        store.newest_op_of(BACKUP_KIND).unwrap().unwrap().at_ms
    }

    #[test]
    fn the_newest_backup_is_found_however_many_entries_follow_it_first_reading_and_later() {
        let (_dir, store) = store();
        let none = newest_backup(&store, None).unwrap();
        assert_eq!(none.backup_ms, None);
        log(&store, "backup", 1);
        let at = backup_at(&store);
        // Far more entries than one reading looks at, before the first reading.
        log(&store, "enrol", 3 * RECENT_SCAN);
        let first = newest_backup(&store, None).unwrap();
        assert_eq!(first.backup_ms, Some(at));
        // Later readings: a few entries since (the window reaches back), then many.
        log(&store, "enrol", 3);
        let second = newest_backup(&store, Some(first)).unwrap();
        assert_eq!(second.backup_ms, Some(at));
        log(&store, "backup", 1);
        let newer = backup_at(&store);
        log(&store, "enrol", 2 * RECENT_SCAN);
        let third = newest_backup(&store, Some(second)).unwrap();
        assert_eq!(third.backup_ms, Some(newer));
        // Other kinds never count.
        log(&store, "restore", 1);
        assert_eq!(
            newest_backup(&store, Some(third)).unwrap().backup_ms,
            Some(newer)
        );
    }
}
