//! Whole-store figures (queued items and bytes, enrolments, size on disk, the newest backup the
//! relay log records) for `/metrics` and `/status`, read by `RelayStore::stats` and
//! `RelayStore::ops` at most every [`MAX_AGE`] and by one read at a time.
//! A reader waits at most the time it is given for a fresh reading and otherwise gets the last
//! one (with its age), so a slow store never holds a scrape or `/status` past that.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_store::SharedStore;
use tokio::sync::Notify;

/// How long a reading is reused.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(10);
/// Relay-log entries the first reading searches for the newest backup (newest first): every
/// backup is logged (`relay-tool backup` online, offline or beside a shared store), so this is
/// what the store itself says, surviving restarts and seen by every process of a shared store.
pub(crate) const FIRST_BACKUP_SCAN: usize = 10_000;
/// Entries each later reading searches: far more than are logged between two readings.
pub(crate) const LATER_BACKUP_SCAN: usize = 256;
/// The relay-log kind of a backup.
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

#[derive(Default)]
struct State {
    last: Option<(Instant, StoreFigures)>,
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
    /// last reading (the newest backup only moves forward).
    async fn refresh(self: Arc<Self>) {
        let store = self.store.clone();
        let known = self.cached().map(|(f, _)| f.last_backup_ms);
        let scan = if known.is_some() {
            LATER_BACKUP_SCAN
        } else {
            FIRST_BACKUP_SCAN
        };
        let stats = tokio::task::spawn_blocking(move || {
            let st = store.stats()?;
            let backup = newest_backup(&store.ops(scan)?);
            Ok::<_, relay_store::StoreError>((st, backup))
        })
        .await;
        let mut s = self.lock();
        s.reading = false;
        match stats {
            Ok(Ok((st, backup))) => {
                let f = StoreFigures {
                    queued_items: st.queued.items,
                    queued_bytes: st.queued.bytes,
                    live_enrolments: st.live_enrolments,
                    revoked_enrolments: st.revoked_enrolments,
                    disk_bytes: st.disk_bytes,
                    oldest_queued_ms: st.oldest_queued_ms,
                    last_backup_ms: backup.max(known.flatten()),
                };
                s.last = Some((Instant::now(), f));
            }
            Ok(Err(e)) => tracing::debug!(error = %e, "store figures not read"),
            Err(e) => tracing::debug!(error = %e, "store figures task failed"),
        }
        drop(s);
        self.read.notify_waiters();
    }
}

/// When the newest backup among `ops` was logged (ms).
fn newest_backup(ops: &[relay_store::OpEntry]) -> Option<u64> {
    ops.iter()
        .filter(|op| op.kind == BACKUP_KIND)
        .map(|op| op.at_ms)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(seq: u64, at_ms: u64, kind: &str) -> relay_store::OpEntry {
        relay_store::OpEntry {
            seq,
            at_ms,
            kind: kind.into(),
            detail: String::new(),
            hash: [0; 32],
        }
    }

    #[test]
    fn the_newest_backup_is_the_latest_backup_entry_and_other_kinds_do_not_count() {
        assert_eq!(newest_backup(&[]), None);
        assert_eq!(
            newest_backup(&[op(3, 30, "enrol"), op(2, 20, "restore")]),
            None
        );
        let ops = [op(5, 50, "enrol"), op(4, 40, "backup"), op(1, 10, "backup")];
        assert_eq!(newest_backup(&ops), Some(40));
    }
}
