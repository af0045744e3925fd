//! The other relay processes on a shared store (several processes on one PostgreSQL database
//! behind a load balancer), so that together they behave as one relay:
//!
//! - **Wake across processes.** The store's watch ([`relay_store::RelayStore::watch`]:
//!   PostgreSQL `LISTEN`/`NOTIFY`) tells this process within milliseconds which queues grew
//!   through another, whose epoch changed and which keys may have lost their enrolment; the
//!   waiting pulls and streams here are woken as by a local push. Its safety net, for a lost
//!   listening connection and for engines without `LISTEN`: every [`HEAD_POLL`] the queue heads
//!   of the keys with waiters are read in one statement, and the waiters of a key whose head
//!   moved (or that was not polled before) are woken. A wake is never lost for longer than that.
//! - **A row per process** ([`relay_store::ProcessRow`]), renewed every
//!   [`relay_store::PROCESS_BEAT`]: `/status` and `relay-tool status` list them
//!   ([`Relay::processes`]), a row not renewed is flagged stale.
//! - **A `process` label** on every metric of the process ([`Relay::metric_labels`]).
//! - **One rate limit for the relay.** The processes with a fresh row share each per-minute
//!   limit: each enforces its share ([`crate::rate::RateTable::set_share`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_store::{Key32, ProcessRow, StoreEvent, StoreEvents, PROCESS_BEAT};

use super::{Relay, RelayError};

/// How often the queue heads of the keys with waiters are read on a shared store.
pub(crate) const HEAD_POLL: Duration = Duration::from_secs(1);
/// Most keys asked about in one store read.
const KEYS_PER_READ: usize = 1024;

/// This process as it describes itself in its row.
pub(crate) struct ThisProcess {
    pub(crate) started_ms: u64,
    address: Mutex<String>,
    /// Processes holding a fresh row (this one included): the divisor of the rate limits.
    sharing: AtomicU32,
    /// The rows as last read (every [`PROCESS_BEAT`]), for `/status` without a store read.
    rows: Mutex<Vec<ProcessRow>>,
}

impl ThisProcess {
    pub(crate) fn new(started_ms: u64) -> Self {
        ThisProcess {
            started_ms,
            address: Mutex::new(String::new()),
            sharing: AtomicU32::new(1),
            rows: Mutex::new(Vec::new()),
        }
    }
}

/// One process in a listing, and whether its row is stale (not renewed within
/// [`relay_store::PROCESS_STALE_MS`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessView {
    #[serde(flatten)]
    pub row: ProcessRow,
    pub stale: bool,
    /// This process (the one answering).
    pub this: bool,
}

impl Relay {
    /// This process's id in the store (its rows, leases, metrics' `process` label).
    pub fn process_id(&self) -> &str {
        &self.lease_holder
    }

    /// The labels every metric of this process carries: `process` (its id) on a shared store,
    /// so the series of N processes stay apart and operators sum them; none on a store one
    /// process owns (a label that changed at every restart would only split its series).
    pub fn metric_labels(
        &self,
    ) -> Vec<(
        std::borrow::Cow<'static, str>,
        std::borrow::Cow<'static, str>,
    )> {
        if self.store_is_shared() {
            vec![("process".into(), self.lease_holder.clone().into())]
        } else {
            Vec::new()
        }
    }

    /// Where this process listens, for its row (`serve` sets it once bound).
    pub fn set_address(&self, address: String) {
        *self.this.address.lock().unwrap_or_else(|p| p.into_inner()) = address;
    }

    /// Processes holding a fresh row now (at least 1): each enforces 1/n of every rate limit.
    pub fn processes_sharing(&self) -> u32 {
        self.this.sharing.load(Ordering::Relaxed)
    }

    /// This process's row as of now.
    fn own_row(&self) -> ProcessRow {
        ProcessRow {
            id: self.lease_holder.clone(),
            address: self
                .this
                .address
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            started_ms: self.this.started_ms,
            heartbeat_ms: self.now_ms(),
        }
    }

    /// Every process serving the store as last read (every [`PROCESS_BEAT`]), stale ones
    /// flagged, oldest start first; on a store one process owns, this one alone. From memory.
    pub fn processes(&self) -> Vec<ProcessView> {
        let now = self.now_ms();
        let mut rows = self
            .this
            .rows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        match rows.iter_mut().find(|r| r.id == self.lease_holder) {
            Some(own) => *own = self.own_row(),
            None => rows.push(self.own_row()),
        }
        rows.into_iter()
            .map(|row| ProcessView {
                stale: row.stale(now),
                this: row.id == self.lease_holder,
                row,
            })
            .collect()
    }

    /// Renew this process's row, read every row, and recount the processes sharing the rate
    /// limits.
    async fn beat_process(&self) -> Result<(), RelayError> {
        self.write(self.store.beat_process(self.own_row())).await?;
        let rows = self.store.processes()?;
        let now = self.now_ms();
        let fresh = rows.iter().filter(|r| !r.stale(now)).count();
        *self.this.rows.lock().unwrap_or_else(|p| p.into_inner()) = rows;
        let n = u32::try_from(fresh.max(1)).unwrap_or(u32::MAX);
        if self.this.sharing.swap(n, Ordering::Relaxed) != n {
            tracing::info!(processes = n, "processes sharing the store's rate limits");
        }
        self.sender_rate.set_share(n);
        self.address_rate.set_share(n);
        Ok(())
    }

    /// On a shared store, until `stop`: follow the store's watch, poll the waiters' queue heads
    /// every [`HEAD_POLL`], renew this process's row every [`PROCESS_BEAT`]; then remove it.
    pub(crate) async fn run_peers(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut events: Option<StoreEvents> = self.store.watch();
        let mut poll = tokio::time::interval(HEAD_POLL);
        let mut beat = tokio::time::interval(PROCESS_BEAT);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut heads = HashMap::new();
        loop {
            let ev = async {
                match events.as_mut() {
                    Some(rx) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = stop.changed() => break,
                ev = ev => match ev {
                    Some(ev) => self.on_store_event(ev, &mut heads),
                    None => events = None,
                },
                _ = poll.tick() => {
                    if let Err(e) = self.poll_heads(&mut heads, false) {
                        tracing::warn!(error = %e.body, "cannot read the queue heads of the keys with waiters");
                    }
                }
                _ = beat.tick() => {
                    if let Err(e) = self.beat_process().await {
                        tracing::warn!(error = %e.body, "cannot renew this process's row");
                    }
                }
            }
        }
        if let Err(e) = self.store.leave_process(&self.lease_holder).await {
            tracing::warn!(error = %e, "cannot remove this process's row");
        }
    }

    /// Act on what another process committed.
    fn on_store_event(&self, ev: StoreEvent, heads: &mut HashMap<Key32, u64>) {
        match ev {
            StoreEvent::Queued(stored) => self.wake.queued(stored),
            StoreEvent::Epoch => {
                if let Err(e) = self.adopt_store_epoch() {
                    tracing::warn!(error = %e.body, "cannot re-read the store's epoch");
                }
            }
            StoreEvent::Keys(keys) => {
                if let Err(e) = self.end_waiters_of_dead_keys_among(&keys) {
                    tracing::warn!(error = %e.body, "cannot check the keys with waiters");
                }
            }
            StoreEvent::Resumed => {
                if let Err(e) = self.poll_heads(heads, true) {
                    tracing::warn!(error = %e.body, "cannot read the queue heads of the keys with waiters");
                }
            }
        }
    }

    /// Read the queue heads of the keys with waiters and wake the waiters of each key whose
    /// head moved since the last poll or that the last poll did not cover (`all`: every key
    /// with a queue, after the watch reconnected); answers how many keys were woken.
    ///
    /// # Errors
    /// The store's read error (nothing is woken; the next poll retries).
    pub(crate) fn poll_heads(
        &self,
        last: &mut HashMap<Key32, u64>,
        all: bool,
    ) -> Result<usize, RelayError> {
        let keys = self.wake.keys(usize::MAX);
        let mut now = HashMap::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_READ) {
            now.extend(self.store.queue_heads(chunk)?);
        }
        let moved: Vec<(Key32, u64)> = now
            .iter()
            .filter(|(k, h)| all || last.get(*k) != Some(*h))
            .map(|(k, h)| (*k, *h))
            .collect();
        *last = now;
        self.wake.queued(moved.iter().copied());
        Ok(moved.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_view_serialises_flat() {
        let v = ProcessView {
            row: ProcessRow {
                id: "p".into(),
                address: "127.0.0.1:1".into(),
                version: "1".into(),
                started_ms: 1,
                heartbeat_ms: 2,
            },
            stale: true,
            this: false,
        };
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["id"], "p");
        assert_eq!(j["stale"], true);
        assert_eq!(j["heartbeat_ms"], 2);
    }
}
