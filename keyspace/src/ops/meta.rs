//! Meta writes: relay key pinning, epoch rotation, heartbeat.

use crate::api::{Key32, Pending, StoreError};
use crate::codec::{self, fingerprint, meta_key};
use crate::migrate::new_epoch;
use crate::parts::Part;
use crate::reader;
use crate::Store;

impl Store {
    /// Record the relay public key on first use; refuse a different one (`RelayKeyMismatch`).
    pub fn pin_relay_pubkey(&self, pk: Key32) -> Pending<()> {
        self.submit(move |tx| match reader::relay_pubkey(tx)? {
            Some(stored) if stored == pk => Ok(()),
            Some(stored) => Err(StoreError::RelayKeyMismatch {
                stored_fp: fingerprint(&stored),
                given_fp: fingerprint(&pk),
            }),
            None => {
                tx.put(Part::Meta, meta_key::RELAY_PUBKEY, codec::enc(&pk));
                Ok(())
            }
        })
    }

    /// Write a new random epoch (UUID v4) and an ops entry with `reason`; returns the new epoch.
    pub fn rotate_epoch(&self, reason: &str) -> Pending<String> {
        let reason = reason.to_string();
        self.submit(move |tx| {
            let old = reader::epoch(tx)?;
            let epoch = new_epoch();
            tx.put(Part::Meta, meta_key::EPOCH, codec::enc(&epoch));
            super::oplog::append(tx, "epoch-rotate", &format!("{old} -> {epoch}: {reason}"))?;
            Ok(epoch)
        })
    }

    /// Record the heartbeat (ms).
    pub fn heartbeat(&self, now_ms: u64) -> Pending<()> {
        self.submit(move |tx| {
            tx.put(Part::Meta, meta_key::HEARTBEAT, codec::enc(&now_ms));
            Ok(())
        })
    }
}
