//! Whole-store figures (queued items and bytes, enrolments, size on disk) for `/metrics` and
//! `/status`, read by `RelayStore::stats` at most every [`MAX_AGE`] and by one read at a time.
//! A reader waits at most the time it is given for a fresh reading and otherwise gets the last
//! one (with its age), so a slow store never holds a scrape or `/status` past that.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_store::SharedStore;
use tokio::sync::Notify;

/// How long a reading is reused.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(10);

/// The figures of one reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreFigures {
    pub queued_items: u64,
    pub queued_bytes: u64,
    pub live_enrolments: u64,
    pub revoked_enrolments: u64,
    pub disk_bytes: u64,
    pub oldest_queued_ms: Option<u64>,
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

    /// One `stats` read on a blocking thread; the result (if any) replaces the last reading.
    async fn refresh(self: Arc<Self>) {
        let store = self.store.clone();
        let stats = tokio::task::spawn_blocking(move || store.stats()).await;
        let mut s = self.lock();
        s.reading = false;
        match stats {
            Ok(Ok(st)) => {
                let f = StoreFigures {
                    queued_items: st.queued.items,
                    queued_bytes: st.queued.bytes,
                    live_enrolments: st.live_enrolments,
                    revoked_enrolments: st.revoked_enrolments,
                    disk_bytes: st.disk_bytes,
                    oldest_queued_ms: st.oldest_queued_ms,
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
