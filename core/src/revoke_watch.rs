//! A key that loses its live enrolment (an admin's revoke, a rotation away from it, idle expiry)
//! loses its live delivery at once: its waiting pulls answer `401 bad relay hop` and its event
//! streams end ([`super::wake::Wake::end_key`]); an admin's purge ends them as an eviction does.
//! This process's own changes end them as they commit. On a store other processes share (where
//! `relay-tool revoke` may also write beside the relays), every [`REVOKE_REFRESH`] the relay asks
//! the store which of the keys with waiters are still live, and ends the others': a poll of the
//! state itself, so nothing is lost while a connection is down (as a missed `NOTIFY` would be),
//! no schema, connection or pooler feature is needed, and it costs one statement per second
//! only while someone waits.

use std::time::Duration;

use relay_store::Key32;

use super::{Relay, RelayError};

/// How often a relay on a shared store checks that the keys with waiters are still live.
pub(crate) const REVOKE_REFRESH: Duration = Duration::from_secs(1);
/// Most keys asked about in one store read (the keys with waiters are at most the waiter cap).
const KEYS_PER_READ: usize = 1024;

impl Relay {
    /// End the waiters of `key` now: `revoked` when it lost its live enrolment, else (a purge)
    /// as an eviction.
    pub(crate) fn end_waiters(&self, key: &Key32, revoked: bool) {
        self.wake.end_key(key, revoked);
    }

    /// 401 `bad relay hop` unless `key` has a live enrolment now: a waiter registered after a
    /// revocation ended the others is refused by this look.
    ///
    /// # Errors
    /// 401 as above; 503 when the store cannot be read.
    pub fn ensure_live(&self, key: &Key32) -> Result<(), RelayError> {
        match self.store.enrolment(key)? {
            Some(e) if e.revoked_at_ms.is_none() => Ok(()),
            _ => Err(RelayError::bad_hop()),
        }
    }

    /// End the waiters of every key with waiters that is no longer live; answers how many keys.
    ///
    /// # Errors
    /// The store's read error (nothing is ended then; the next round retries).
    pub(crate) fn end_waiters_of_dead_keys(&self) -> Result<usize, RelayError> {
        self.end_dead(self.wake.keys(usize::MAX))
    }

    /// [`Relay::end_waiters_of_dead_keys`] for those of `keys` with waiters here (another
    /// process said they may have lost their enrolment: `super::peers`).
    ///
    /// # Errors
    /// The store's read error.
    pub(crate) fn end_waiters_of_dead_keys_among(
        &self,
        keys: &[Key32],
    ) -> Result<usize, RelayError> {
        let waiting: std::collections::HashSet<Key32> =
            self.wake.keys(usize::MAX).into_iter().collect();
        self.end_dead(
            keys.iter()
                .filter(|k| waiting.contains(*k))
                .copied()
                .collect(),
        )
    }

    fn end_dead(&self, keys: Vec<Key32>) -> Result<usize, RelayError> {
        if keys.is_empty() {
            return Ok(0);
        }
        let mut live = std::collections::HashSet::with_capacity(keys.len());
        for chunk in keys.chunks(KEYS_PER_READ) {
            live.extend(self.store.live_keys(chunk)?);
        }
        let dead: Vec<&Key32> = keys.iter().filter(|k| !live.contains(*k)).collect();
        for k in &dead {
            self.wake.end_key(k, true);
        }
        Ok(dead.len())
    }
}
