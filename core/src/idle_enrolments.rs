//! Idle enrolments (issue 13): live enrolments not seen for `enrolment_idle` whose queue is
//! empty are deleted, in bounded batches, by the background timers (`super::background`) after
//! each retention sweep.

use super::sweep::SWEEP_ROUNDS;
use super::{Relay, RelayError};

/// Enrolment rows the idle expiry looks at per store call (one atomic batch). Measured on
/// 100,000 enrolments (release build): a pass that expires nothing takes 0.4 s in all; one that
/// expires every host averages 17 ms of writer time per batch of 250 (55 ms per 1,000; the
/// slowest batch, fsync included, took 205 ms either way).
const IDLE_BATCH: usize = 250;

impl Relay {
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
}
