//! Where hop signatures are checked: a small body on the async worker that read it (its hash
//! costs about what the signature check does), a larger one on the blocking pool with at most a
//! few checks at once, so a flood of large badly signed bodies keeps its hashing off the
//! workers that answer everyone else and cannot take more than those threads.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::relay::{Caller, HopCheck, RelayError};

/// Runs [`HopCheck::verify`] with bounded concurrency for large bodies.
pub struct Verifier {
    slots: Arc<Semaphore>,
}

impl Default for Verifier {
    /// Half the cores (at least one) for checks of large bodies: the rest stay with the workers.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Verifier::new((cores / 2).max(1))
    }
}

impl Verifier {
    /// At most `slots` large-body checks at once (at least one).
    pub fn new(slots: usize) -> Self {
        Verifier {
            slots: Arc::new(Semaphore::new(slots.max(1))),
        }
    }

    /// Check `check` over `body`; the body comes back with the answer.
    pub async fn verify(
        &self,
        check: HopCheck,
        body: Vec<u8>,
    ) -> (Result<Caller, RelayError>, Vec<u8>) {
        if body.len() <= HopCheck::INLINE_BODY_MAX {
            return (check.verify(&body), body);
        }
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return (Err(RelayError::bad_hop()), body);
        };
        let job = tokio::task::spawn_blocking(move || {
            let r = check.verify(&body);
            drop(slot);
            (r, body)
        });
        match job.await {
            Ok(done) => done,
            // The check panicked (it does not: verification returns false on any input); the
            // body is gone with it, and the request is refused like any failed hop.
            Err(_) => (Err(RelayError::bad_hop()), Vec::new()),
        }
    }
}
