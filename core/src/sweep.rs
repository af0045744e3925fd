//! The retention sweep (docs/protocol.md §4, §6): expired items leave in the same batch as the
//! relay-signed expiry notice queued for their sender; dedup tombstones are pruned retention +
//! 7 days after their item was acked or expired (the store indexes them from then on). Runs at
//! startup and every `sweep_interval`, from the background timers (`super::background`).

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
pub(crate) const SWEEP_ROUNDS: usize = 1_000;

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
}
