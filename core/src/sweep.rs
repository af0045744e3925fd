//! The retention sweep (docs/protocol.md §4, §6): expired items leave in the same batch as the
//! relay-signed expiry notice queued for their sender; dedup tombstones are pruned retention +
//! 7 days after their item was acked or expired (the store indexes them from then on); live enrolments idle for `enrolment_idle` with an empty queue are
//! deleted (issue 13). Runs at startup and every `sweep_interval`.

use std::sync::Arc;

use relay_store::{
    ExpiredItem, ItemKind, NewItem, NewTarget, NoticeFn, SweepReport, NEVER_EXPIRES,
};

use super::config::DEDUP_GRACE;
use super::{Relay, RelayError};
use relay_wire::accept::sha256;
use relay_wire::keys::{b64, SigningKey};
use relay_wire::records::expiry_notice_wire;

/// Items expired per store call (one atomic batch).
const SWEEP_BATCH: usize = 1_000;
/// Store calls per sweep run, so one run is bounded; the next run continues.
const SWEEP_ROUNDS: usize = 1_000;
/// Enrolment rows the idle expiry looks at per store call (one atomic batch). Measured on
/// 100,000 enrolments (release build): a pass that expires nothing takes 0.4 s in all; one that
/// expires every host averages 17 ms of writer time per batch of 250 (55 ms per 1,000; the
/// slowest batch, fsync included, took 205 ms either way).
const IDLE_BATCH: usize = 250;

/// The store lease naming the process that runs the sweep, the idle expiry and the heartbeat.
pub(crate) const LEADER_LEASE: &str = "background";
/// How long the lease lasts unrenewed: three heartbeats, so a live leader renews it well before
/// it lapses and a dead one's successor takes over within that time.
fn leader_lease_ttl() -> std::time::Duration {
    3 * super::config::heartbeat_every()
}

/// The notice builder handed to the store (the sweep, and an admin's purge): envelopes get a
/// signed `expired` item for their sender; receipts and notices expire silently.
pub(crate) fn notice_fn(key: Arc<SigningKey>) -> NoticeFn {
    let relay_pub = key.public();
    Box::new(move |item: &ExpiredItem, now_ms: u64| {
        // Legacy v1 mail never expires and gets no notice (docs/protocol.md §3); an admin's purge
        // of it tells no one either.
        if item.kind != ItemKind::Envelope || item.expires_at_ms == NEVER_EXPIRES {
            return None;
        }
        let target = b64(&item.target);
        let wire = expiry_notice_wire(&key, &item.item_id, &target, item.accepted_at_ms, now_ms);
        let wire_hash = sha256(&wire);
        Some(NewItem {
            kind: ItemKind::Expired,
            item_id: format!("expired:{}:{target}", item.item_id),
            sender: relay_pub,
            targets: vec![NewTarget {
                target: item.sender,
                wire,
                wire_hash,
            }],
        })
    })
}

impl Relay {
    /// One bounded sweep run: expire, notify, prune, until done or [`SWEEP_ROUNDS`] calls.
    ///
    /// # Errors
    /// 503-class error when the store fails (the next run retries).
    pub async fn sweep(&self) -> Result<SweepReport, RelayError> {
        let mut total = SweepReport::default();
        let dedup_grace = u64::try_from(DEDUP_GRACE.as_millis()).unwrap_or(u64::MAX);
        for _ in 0..SWEEP_ROUNDS {
            let now = self.now_ms();
            let horizon =
                now.saturating_sub(self.limits.retention_ms().saturating_add(dedup_grace));
            let report = self
                .write(self.store.sweep(
                    now,
                    horizon,
                    self.limits.quotas(),
                    self.limits.retention_ms(),
                    SWEEP_BATCH,
                    notice_fn(self.key.clone()),
                ))
                .await?;
            self.metrics.expired(report.expired);
            total.expired += report.expired;
            total.notices += report.notices;
            total.dedup_pruned += report.dedup_pruned;
            total.more = report.more;
            if !report.more {
                break;
            }
        }
        if total.expired > 0 || total.dedup_pruned > 0 {
            tracing::info!(
                expired = total.expired,
                notices = total.notices,
                dedup_pruned = total.dedup_pruned,
                "retention sweep"
            );
        }
        Ok(total)
    }

    /// Delete live enrolments not seen for `enrolment_idle` whose queue is empty: one pass over
    /// the enrolments in batches of [`IDLE_BATCH`] rows (each one atomic, logged operation),
    /// at most [`SWEEP_ROUNDS`] batches (a longer table is continued by the next run).
    /// Sightings still in memory are written first. Returns how many expired.
    ///
    /// # Errors
    /// 503-class error when the store fails (the next run retries).
    pub(crate) async fn expire_idle_enrolments(&self) -> Result<u64, RelayError> {
        let Some(idle_ms) = self.limits.enrolment_idle_ms() else {
            return Ok(0);
        };
        self.flush_seen().await?;
        let mut after = *self.idle_cursor.lock().unwrap_or_else(|p| p.into_inner());
        let mut expired = 0;
        for _ in 0..SWEEP_ROUNDS {
            let report = self
                .write(
                    self.store
                        .expire_idle(self.now_ms(), idle_ms, after, IDLE_BATCH),
                )
                .await?;
            expired += report.expired;
            after = report.next;
            if after.is_none() {
                break;
            }
        }
        *self.idle_cursor.lock().unwrap_or_else(|p| p.into_inner()) = after;
        if expired > 0 {
            tracing::info!(expired, "idle enrolments expired");
            // An expired key waiting somewhere here is no longer live: end its waiters.
            if let Err(e) = self.end_waiters_of_dead_keys() {
                tracing::warn!(error = %e.body, "cannot check the keys with waiters");
            }
        }
        Ok(expired)
    }

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
