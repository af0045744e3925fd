//! Startup of a relay over its store (docs/protocol.md §6): pin the relay key, rotate the epoch when
//! the stored heartbeat is stale or from the future (one log line saying why), then write the
//! heartbeat so a quick restart keeps the epoch.

use std::sync::Arc;
use std::time::Duration;

use relay_store::{Clock, SharedStore};

use super::{Limits, Relay, RelayError};
use relay_wire::keys::{fingerprint, SigningKey};

/// Why the epoch must rotate at startup, if it must.
pub(crate) fn stale_reason(
    heartbeat_ms: Option<u64>,
    now_ms: u64,
    stale: Duration,
) -> Option<String> {
    let hb = heartbeat_ms?;
    let stale_ms = u64::try_from(stale.as_millis()).unwrap_or(u64::MAX);
    if now_ms > hb && now_ms - hb > stale_ms {
        Some(format!(
            "stored heartbeat is {}s old (more than {}s): the store may be a restored copy or the relay was down",
            (now_ms - hb) / 1000,
            stale_ms / 1000
        ))
    } else if hb > now_ms && hb - now_ms > stale_ms {
        Some(format!(
            "stored heartbeat is {}s in the future (more than {}s): the clock or the store went back in time",
            (hb - now_ms) / 1000,
            stale_ms / 1000
        ))
    } else {
        None
    }
}

/// Pin the key, do the stale-heartbeat check and write the heartbeat; returns the ready relay.
///
/// # Errors
/// The store refuses the key (`RelayKeyMismatch`) or a write fails.
pub async fn start(
    store: SharedStore,
    key: SigningKey,
    limits: Limits,
    clock: Arc<dyn Clock>,
) -> Result<Relay, String> {
    let store_err = |what: &str, e: relay_store::StoreError| format!("{what}: {e}");
    store
        .pin_relay_pubkey(key.public())
        .await
        .map_err(|e| store_err("relay key refused", e))?;
    let meta = store
        .meta()
        .map_err(|e| store_err("cannot read store meta", e))?;
    let now = clock.now_ms();
    let mut epoch = meta.epoch;
    if let Some(why) = stale_reason(meta.heartbeat_ms, now, limits.heartbeat_stale) {
        epoch = store
            .rotate_epoch(&format!("startup: {why}"))
            .await
            .map_err(|e| store_err("cannot rotate epoch", e))?;
        tracing::warn!(epoch = %epoch, "epoch rotated at startup: {why}");
    }
    let relay = Relay::new(store, key, limits, clock, epoch);
    relay
        .heartbeat()
        .await
        .map_err(|e: RelayError| e.message().to_owned())?;
    tracing::info!(
        relay_key = %fingerprint(&relay.pubkey),
        epoch = %relay.epoch(),
        "relay store ready"
    );
    Ok(relay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_in_both_directions() {
        let ten_min = Duration::from_secs(600);
        assert!(
            stale_reason(None, 1_000_000, ten_min).is_none(),
            "fresh store"
        );
        assert!(
            stale_reason(Some(1_000_000), 1_000_000 + 600_000, ten_min).is_none(),
            "exactly the limit"
        );
        assert!(stale_reason(Some(1_000_000), 1_000_000 + 600_001, ten_min)
            .unwrap()
            .contains("old"));
        assert!(stale_reason(Some(2_000_000), 1_000_000, ten_min)
            .unwrap()
            .contains("future"));
        assert!(stale_reason(Some(1_000_000 + 600_000), 1_000_000, ten_min).is_none());
    }
}
