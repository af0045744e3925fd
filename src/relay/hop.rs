//! Signed-hop authentication (PROTOCOL.md §2): by `x-mbx-key` when present, else by name among
//! at most `max_per_name` live enrolments. Any failure is `401 {"error":"bad relay hop"}`.

use relay_keyspace::{Enrolment, Key32};

use super::{keycache, Relay, RelayError};
use crate::wire::hop::{ts_fresh, verify_hop_with};
use crate::wire::keys::parse_pubkey;

/// The hop headers and what they sign, as received.
#[derive(Debug, Clone, Copy)]
pub struct HopHeaders<'a> {
    pub host: Option<&'a str>,
    pub key: Option<&'a str>,
    pub ts: Option<&'a str>,
    pub sig: Option<&'a str>,
    pub method: &'a str,
    /// The signed path: with its query for `/v2/`, bare for `/v1/` (see `wire::hop::signed_path`).
    pub path: &'a str,
    pub body: &'a [u8],
}

impl HopHeaders<'_> {
    /// True when the caller sent any hop header (for `info`, where a hop is optional).
    pub fn present(&self) -> bool {
        self.sig.is_some() || self.key.is_some()
    }
}

/// An authenticated caller: its key and live enrolment.
#[derive(Debug, Clone)]
pub struct Caller {
    pub key: Key32,
    pub enrolment: Enrolment,
}

impl Relay {
    /// Authenticate a signed hop.
    ///
    /// # Errors
    /// 401 `bad relay hop` for a stale timestamp, an unknown or revoked key, a bad signature or an
    /// ambiguous name; 503 when the store cannot be read.
    pub fn authenticate(&self, hop: &HopHeaders<'_>) -> Result<Caller, RelayError> {
        let (Some(ts), Some(sig)) = (hop.ts, hop.sig) else {
            return Err(RelayError::bad_hop());
        };
        if !ts_fresh(ts, i64::try_from(self.now_ms()).unwrap_or(i64::MAX)) {
            return Err(RelayError::bad_hop());
        }
        let Ok(body) = std::str::from_utf8(hop.body) else {
            return Err(RelayError::bad_hop());
        };
        let verifies = |pk: &Key32| {
            keycache::shared()
                .get(pk)
                .is_some_and(|k| verify_hop_with(&k, hop.method, hop.path, ts, body, sig))
        };
        if let Some(key) = hop.key {
            let pk = parse_pubkey(key).ok_or_else(RelayError::bad_hop)?;
            let enrolment = self.store.enrolment(&pk)?;
            return match enrolment {
                Some(e) if e.revoked_at_ms.is_none() && verifies(&pk) => Ok(Caller {
                    key: pk,
                    enrolment: e,
                }),
                _ => Err(RelayError::bad_hop()),
            };
        }
        let name = hop.host.ok_or_else(RelayError::bad_hop)?;
        let live = self
            .store
            .live_enrolments_by_name(name, self.limits.max_per_name + 1)?;
        if live.len() > self.limits.max_per_name {
            return Err(RelayError::bad_hop());
        }
        live.into_iter()
            .find(|e| e.revoked_at_ms.is_none() && verifies(&e.host_pubkey))
            .map(|e| Caller {
                key: e.host_pubkey,
                enrolment: e,
            })
            .ok_or_else(RelayError::bad_hop)
    }
}
