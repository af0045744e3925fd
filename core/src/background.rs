//! The background timers of a running relay: the heartbeat, the retention sweep and idle
//! expiry (on a shared store only in the process holding the leader lease), last-seen days
//! written, and on a shared store the epoch re-read and the keys with waiters re-checked. Each
//! job lives in its own module; this one only decides when it runs.

use std::sync::Arc;

use super::{Relay, RelayError};

/// The store lease naming the process that runs the sweep, the idle expiry and the heartbeat.
pub(crate) const LEADER_LEASE: &str = "background";
/// How long the lease lasts unrenewed: three heartbeats, so a live leader renews it well before
/// it lapses and a dead one's successor takes over within that time.
fn leader_lease_ttl() -> std::time::Duration {
    3 * super::config::heartbeat_every()
}

impl Relay {
    /// Write the heartbeat now.
    ///
    /// # Errors
    /// Store failure.
    pub async fn heartbeat(&self) -> Result<(), RelayError> {
        self.write(self.store.heartbeat(self.now_ms())).await
    }

    /// Whether this process leads the background work (sweep, idle expiry, heartbeat) now:
    /// takes or renews the store's [`LEADER_LEASE`]. Always true on a store one process owns;
    /// on a shared store one process at a time, another taking over once it lapses.
    async fn leads(&self) -> bool {
        let ttl_ms = u64::try_from(leader_lease_ttl().as_millis()).unwrap_or(u64::MAX);
        match self
            .store
            .try_lease(LEADER_LEASE, &self.lease_holder, ttl_ms)
            .await
        {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "cannot take the background-work lease");
                false
            }
        }
    }

    /// Sweep now (the startup sweep), then heartbeat every 30 s, write last-seen days every
    /// [`super::seen::FLUSH_EVERY`] and sweep every `sweep_interval` until `stop` fires (then
    /// write the last sightings); each sweep also checks live enrolments against the cap. On a
    /// shared store the epoch is also re-read every [`super::epoch_watch::EPOCH_REFRESH`], and
    /// the keys with waiters checked every [`super::revoke_watch::REVOKE_REFRESH`].
    pub async fn run_background(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let mut hb = tokio::time::interval(super::config::heartbeat_every());
        let mut sw = tokio::time::interval(self.limits.sweep_interval);
        let mut seen = tokio::time::interval(super::seen::FLUSH_EVERY);
        hb.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sw.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        seen.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A shared store's epoch may change under this process (`super::epoch_watch`).
        let shared = self.store_is_shared();
        let mut ep = tokio::time::interval(super::epoch_watch::EPOCH_REFRESH);
        ep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // ... and keys with waiters may be revoked by another process (`super::revoke_watch`).
        let mut rv = tokio::time::interval(super::revoke_watch::REVOKE_REFRESH);
        rv.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        hb.tick().await; // written at startup already
                         // The other processes on a shared store: their changes, this one's row (`super::peers`).
        let mut peers = shared.then(|| tokio::spawn(self.clone().run_peers(stop.clone())));
        loop {
            tokio::select! {
                _ = stop.changed() => {
                    if let Err(e) = self.flush_seen().await {
                        tracing::warn!(error = %e, "writing last-seen days at shutdown failed");
                    }
                    if let Some(p) = peers.take() {
                        let _ = p.await;
                    }
                    break;
                }
                _ = ep.tick(), if shared => {
                    if let Err(e) = self.adopt_store_epoch() {
                        tracing::warn!(error = %e.body, "cannot re-read the store's epoch");
                    }
                }
                _ = rv.tick(), if shared => {
                    if let Err(e) = self.end_waiters_of_dead_keys() {
                        tracing::warn!(error = %e.body, "cannot check the keys with waiters");
                    }
                }
                _ = seen.tick() => {
                    if let Err(e) = self.flush_seen().await {
                        tracing::warn!(error = %e, "writing last-seen days failed");
                    }
                }
                _ = hb.tick() => {
                    if !self.leads().await {
                        continue;
                    }
                    if let Err(e) = self.heartbeat().await {
                        tracing::error!(error = %e, "heartbeat write failed");
                    }
                }
                _ = sw.tick() => {
                    if !self.leads().await {
                        continue;
                    }
                    if let Err(e) = self.sweep().await {
                        tracing::error!(error = %e, "retention sweep failed");
                    }
                    if let Err(e) = self.expire_idle_enrolments().await {
                        tracing::error!(error = %e, "idle enrolment expiry failed");
                    }
                    self.watch_enrolments();
                }
            }
        }
    }
}
