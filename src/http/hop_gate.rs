//! The gate in front of every signed hop: failed authentications are counted per client address
//! (IPv4 address, IPv6 /64) over a one-minute window, and an address past it is answered 429
//! before its hop is looked at; a hop is checked from its headers before any body memory is
//! reserved, and its signature where [`OffWorker`] puts it.

use std::time::Duration;

use super::off_worker::OffWorker;
use relay_core::{address_key, AddrKey, RateTable};
use relay_core::{Caller, HopCheck, HopHeaders, Relay, RelayError, Status};

/// Most client addresses whose failure windows are tracked at once (the oldest window is
/// evicted when full, like the other address tables).
const FAILURE_TABLE_CAP: usize = 100_000;

/// What the gate decided against a hop.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// The hop failed (401 `bad relay hop`), counted against the address.
    BadHop,
    /// The address is past its failure window: 429, nothing checked; the window frees after
    /// this long.
    TooManyFailures(Duration),
    /// The store could not be read (503).
    Store(RelayError),
}

/// The per-address failure window.
pub(crate) struct HopGate {
    failures: RateTable<AddrKey>,
}

impl HopGate {
    /// A gate allowing `per_minute` failed authentications per address.
    pub(crate) fn new(per_minute: u32) -> Self {
        HopGate {
            failures: RateTable::new(per_minute, FAILURE_TABLE_CAP),
        }
    }

    /// The header checks of a hop from `addr` (see [`Relay::check_hop_head`]), unless the
    /// address has already used up its failures.
    ///
    /// # Errors
    /// A [`Refusal`]; a failed check is counted.
    pub(crate) async fn check_head(
        &self,
        relay: &Relay,
        addr: &str,
        hop: &HopHeaders<'_>,
    ) -> Result<HopCheck, Refusal> {
        let key = address_key(addr);
        if let Some(wait) = self.failures.wait(&key, relay_core::now_ms()) {
            return Err(Refusal::TooManyFailures(wait));
        }
        relay
            .check_hop_head(hop)
            .await
            .map_err(|e| self.refusal(&key, e))
    }

    /// The signature check of `check` over `body` (run where `pool` puts it); the body comes
    /// back.
    ///
    /// # Errors
    /// A [`Refusal`]; a failed check is counted.
    pub(crate) async fn verify(
        &self,
        pool: &OffWorker,
        addr: &str,
        check: HopCheck,
        body: Vec<u8>,
    ) -> (Result<Caller, Refusal>, Vec<u8>) {
        let (r, body) = pool.verify(check, body).await;
        (r.map_err(|e| self.refusal(&address_key(addr), e)), body)
    }

    /// Count a hop that never proved itself (its body was cut off after holding memory) as a
    /// failed authentication of `addr`.
    pub(crate) fn count_failure(&self, addr: &str) {
        let _ = self
            .failures
            .try_hit(&address_key(addr), relay_core::now_ms());
    }

    /// Count a failed hop; the failure that uses up the window is already answered 429.
    fn refusal(&self, key: &AddrKey, e: RelayError) -> Refusal {
        if e.status != Status::Unauthorized {
            return Refusal::Store(e);
        }
        match self.failures.try_hit(key, relay_core::now_ms()) {
            Ok(()) => Refusal::BadHop,
            Err(wait) => Refusal::TooManyFailures(wait),
        }
    }
}
