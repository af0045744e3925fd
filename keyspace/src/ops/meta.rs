//! Meta writes: relay key pinning, epoch rotation, heartbeat.

use crate::codec::{self, fingerprint, meta_key};
use crate::migrate::new_epoch;
use crate::parts::Part;
use crate::reader;
use crate::writer::Tx;
use relay_store::{Key32, Result, StoreError};

/// Record the relay public key on first use; refuse a different one (`RelayKeyMismatch`).
pub(crate) fn pin_relay_pubkey(tx: &mut Tx<'_>, pk: &Key32) -> Result<()> {
    match reader::relay_pubkey(tx)? {
        Some(stored) if stored == *pk => Ok(()),
        Some(stored) => Err(StoreError::RelayKeyMismatch {
            stored_fp: fingerprint(&stored),
            given_fp: fingerprint(pk),
        }),
        None => {
            tx.put(Part::Meta, meta_key::RELAY_PUBKEY, codec::enc(pk));
            Ok(())
        }
    }
}

/// Write a new random epoch (UUID v4) and an ops entry with `reason`; answers the new epoch.
pub(crate) fn rotate_epoch(tx: &mut Tx<'_>, reason: &str) -> Result<String> {
    let old = reader::epoch(tx)?;
    let epoch = new_epoch();
    tx.put(Part::Meta, meta_key::EPOCH, codec::enc(&epoch));
    super::oplog::append(tx, "epoch-rotate", &format!("{old} -> {epoch}: {reason}"))?;
    Ok(epoch)
}

/// Record the heartbeat (ms).
pub(crate) fn heartbeat(tx: &mut Tx<'_>, now_ms: u64) {
    tx.put(Part::Meta, meta_key::HEARTBEAT, codec::enc(&now_ms));
}
