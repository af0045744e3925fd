//! `impl RelayStore for PgStore`: the trait calls the store's operations (`ops/`) of the same
//! names (`relay_store::delegate_relay_store!`, the one list of them). An operation this backend
//! did not implement would answer a clear error, never a wrong answer, and be named in
//! [`UNIMPLEMENTED`] (empty now: backup was the last).

use std::sync::Arc;

use relay_store::{
    Admission, ChallengeBook, CommitStats, Enrolment, Key32, Pending, ProcessRow, Result,
    StoreEvents,
};

use crate::ops::lease::PgChallenges;
use crate::store::PgStore;

/// The operations this backend does not implement yet; `serve --store postgres://` names them
/// at start when there are any.
pub const UNIMPLEMENTED: &[&str] = &[];

relay_store::delegate_relay_store!(PgStore {
    fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Pending<bool> {
        PgStore::try_lease(self, name, holder, ttl_ms)
    }
    fn shared_challenges(&self) -> Option<Arc<dyn ChallengeBook>> {
        Some(PgChallenges::shared(self))
    }
    fn watch(&self) -> Option<StoreEvents> {
        Some(self.start_watch())
    }
    fn beat_process(&self, row: ProcessRow) -> Pending<()> {
        PgStore::beat_process(self, row)
    }
    fn leave_process(&self, id: &str) -> Pending<()> {
        PgStore::leave_process(self, id)
    }
    fn processes(&self) -> Result<Vec<ProcessRow>> {
        PgStore::processes(self)
    }
    fn queue_heads(&self, keys: &[Key32]) -> Result<Vec<(Key32, u64)>> {
        PgStore::queue_heads(self, keys)
    }
    fn live_keys(&self, keys: &[Key32]) -> Result<Vec<Key32>> {
        PgStore::live_keys(self, keys)
    }
    fn enrolment_async(&self, key: &Key32) -> Pending<Option<Enrolment>> {
        PgStore::enrolment_async(self, key)
    }
    fn admission(&self, target: &Key32) -> Result<Admission> {
        PgStore::admission(self, target)
    }
    fn admissions(&self, targets: &[Key32]) -> Pending<Vec<Admission>> {
        PgStore::admissions(self, targets)
    }
    fn commit_stats(&self) -> CommitStats {
        CommitStats::default()
    }
    fn reopen_count(&self) -> u64 {
        0
    }
    fn close(&self) -> Result<()> {
        self.inner.shutdown();
        Ok(())
    }
});
