//! [`RelayStore`] for the fjall [`Store`]: the trait's methods call the inherent operations of
//! the same names (`relay_store::delegate_relay_store!`, the one list of them), so the relay
//! reaches this backend through the interface at the cost of one indirect call.
//! One process owns a fjall store (its lock file), so leases are always held and challenges
//! stay in the relay's memory.

use std::sync::Arc;

use relay_store::{ChallengeBook, CommitStats, Pending, Result};

use crate::Store;

relay_store::delegate_relay_store!(Store {
    /// The store lock admits one process: it always holds every lease.
    fn try_lease(&self, _name: &str, _holder: &str, _ttl_ms: u64) -> Pending<bool> {
        Pending::ready(Ok(true))
    }
    /// One process: the relay's in-memory book is the only one.
    fn shared_challenges(&self) -> Option<Arc<dyn ChallengeBook>> {
        None
    }
    fn commit_stats(&self) -> CommitStats {
        Store::commit_stats(self)
    }
    fn reopen_count(&self) -> u64 {
        Store::reopen_count(self)
    }
    fn close(&self) -> Result<()> {
        self.clone().close()
    }
});
