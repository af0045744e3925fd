//! The epoch of a store several relay processes share can change under a running relay
//! (`relay-tool rotate-epoch` on PostgreSQL, another process's start-up rotation): every
//! process re-reads it every [`EPOCH_REFRESH`], and at once when a host presents an epoch it
//! does not hold, so processes behind one load balancer never answer two epochs for long nor
//! send a host back and forth between them. A store one process owns changes its epoch only
//! through that process: there the epoch is never re-read.

use std::time::Duration;

use super::{Relay, RelayError};

/// How often a relay on a shared store re-reads the store's epoch.
pub const EPOCH_REFRESH: Duration = Duration::from_secs(5);

impl Relay {
    /// True when other processes share the store (and may change its epoch).
    pub(crate) fn store_is_shared(&self) -> bool {
        self.shared_store
    }

    /// Take the store's epoch when it differs from the one served: waiting pulls and event
    /// streams are woken as after any epoch change. True when it changed.
    ///
    /// # Errors
    /// The store's read error.
    pub(crate) fn adopt_store_epoch(&self) -> Result<bool, RelayError> {
        let stored = self.store.meta()?.epoch;
        {
            let mut served = self.epoch.write().unwrap_or_else(|p| p.into_inner());
            if *served == stored {
                return Ok(false);
            }
            tracing::warn!(old = %served, new = %stored, "the store's epoch changed under this relay; serving the new one");
            *served = stored;
        }
        self.wake.epoch_changed();
        Ok(true)
    }

    /// [`Relay::adopt_store_epoch`] when a host presented `given` and it is not the epoch
    /// served, on a shared store (a store one process owns: nothing to re-read).
    pub(crate) fn recheck_epoch(&self, given: Option<&str>) {
        let Some(given) = given else { return };
        if !self.store_is_shared() || given == self.epoch() {
            return;
        }
        if let Err(e) = self.adopt_store_epoch() {
            tracing::warn!(error = %e.body, "cannot re-read the store's epoch");
        }
    }
}
