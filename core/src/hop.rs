//! Signed-hop authentication (docs/protocol.md §2): by `x-mbx-key` when present, else by name among
//! at most `max_per_name` live enrolments. Any failure is `401 {"error":"bad relay hop"}`.
//!
//! It runs in two steps so that a request costs nothing before its headers could belong to a
//! live host: [`Relay::check_hop_head`] looks at the headers alone (a fresh `ts`, a key with a
//! live enrolment or a name that some live enrolment carries) and only then is the body read and
//! the signature checked by [`HopCheck::verify`], which reuses the enrolments the first step read
//! and touches no store (so it may run on a blocking thread).

use relay_store::{Enrolment, Key32};

use super::{keycache, Relay, RelayError};
use relay_wire::hop::{ts_fresh, verify_hop_with};
use relay_wire::keys::parse_pubkey;

/// The hop headers and what they sign, as received.
#[derive(Debug, Clone, Copy)]
pub struct HopHeaders<'a> {
    /// `x-mbx-host`: the name a v1 caller is looked up by.
    pub host: Option<&'a str>,
    /// `x-mbx-key`: the caller's public key (base64), when it names itself by key.
    pub key: Option<&'a str>,
    /// `x-mbx-ts`: when the caller signed (within 300 s of the relay's clock).
    pub ts: Option<&'a str>,
    /// `x-mbx-sig`: the signature over method, path, timestamp and body.
    pub sig: Option<&'a str>,
    /// The request method, part of what is signed.
    pub method: &'a str,
    /// The signed path: with its query for `/v2/`, bare for `/v1/` (see `wire::hop::signed_path`).
    pub path: &'a str,
    /// The request body, part of what is signed.
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
    /// The caller's public key, proven by the hop signature.
    pub key: Key32,
    /// Its live enrolment, as the store held it when the hop was checked.
    pub enrolment: Enrolment,
}

/// A hop whose headers passed: what the signature must cover and the live enrolments that may
/// have made it (one with `x-mbx-key`; for a v1 name, up to `max_per_name`, in store order).
/// Owned, so the signature check can move to another thread.
#[derive(Debug)]
pub struct HopCheck {
    candidates: Vec<Enrolment>,
    /// The signed fields, one copy: method, path, ts and sig back to back.
    signed: String,
    /// Where the path, ts and sig start in `signed`.
    starts: [usize; 3],
}

impl Relay {
    /// Authenticate a signed hop: [`Relay::check_hop_head`], then [`HopCheck::verify`].
    ///
    /// # Errors
    /// 401 `bad relay hop` for a stale timestamp, an unknown or revoked key, a bad signature or an
    /// ambiguous name; 503 when the store cannot be read.
    pub async fn authenticate(&self, hop: &HopHeaders<'_>) -> Result<Caller, RelayError> {
        self.check_hop_head(hop).await?.verify(hop.body)
    }

    /// The checks a hop's headers allow (the body is ignored): `ts` fresh, a signature present,
    /// and a key with a live enrolment, or (v1, no key) a name that 1..=`max_per_name` live
    /// enrolments carry. Reads the store once (a key's enrolment without blocking the worker).
    ///
    /// # Errors
    /// 401 `bad relay hop` when any of these fails; 503 when the store cannot be read.
    pub async fn check_hop_head(&self, hop: &HopHeaders<'_>) -> Result<HopCheck, RelayError> {
        let (Some(ts), Some(sig)) = (hop.ts, hop.sig) else {
            return Err(RelayError::bad_hop());
        };
        if !ts_fresh(ts, i64::try_from(self.now_ms()).unwrap_or(i64::MAX)) {
            return Err(RelayError::bad_hop());
        }
        let candidates = if let Some(key) = hop.key {
            let pk = parse_pubkey(key).ok_or_else(RelayError::bad_hop)?;
            match self.store.enrolment_async(&pk).await? {
                Some(e) if e.revoked_at_ms.is_none() => vec![e],
                _ => return Err(RelayError::bad_hop()),
            }
        } else {
            let name = hop.host.ok_or_else(RelayError::bad_hop)?;
            let mut live = self
                .store
                .live_enrolments_by_name(name, self.limits.max_per_name + 1)?;
            if live.len() > self.limits.max_per_name {
                return Err(RelayError::bad_hop());
            }
            live.retain(|e| e.revoked_at_ms.is_none());
            if live.is_empty() {
                return Err(RelayError::bad_hop());
            }
            live
        };
        let mut signed =
            String::with_capacity(hop.method.len() + hop.path.len() + ts.len() + sig.len());
        let mut starts = [0; 3];
        for (i, part) in [hop.method, hop.path, ts, sig].into_iter().enumerate() {
            if i > 0 {
                starts[i - 1] = signed.len();
            }
            signed.push_str(part);
        }
        Ok(HopCheck {
            candidates,
            signed,
            starts,
        })
    }
}

impl HopCheck {
    /// Bytes a body may have for its check to run where it is called (on an async worker): the
    /// hashing then costs no more than the signature check every request pays. Larger bodies
    /// are checked on the relay's blocking pool (`http::verify`).
    pub const INLINE_BODY_MAX: usize = 16 * 1024;

    /// The key whose share of in-flight body bytes the request counts against: the hop's key,
    /// or for a v1 name the first live enrolment carrying it (so one name is one share).
    pub fn share_key(&self) -> Option<Key32> {
        self.candidates.first().map(|e| e.host_pubkey)
    }

    /// Check the signature over `body`: the caller is the first candidate whose key verifies.
    ///
    /// # Errors
    /// 401 `bad relay hop` when the body is not UTF-8 or no candidate's key verifies.
    pub fn verify(self, body: &[u8]) -> Result<Caller, RelayError> {
        let Ok(body) = std::str::from_utf8(body) else {
            return Err(RelayError::bad_hop());
        };
        let [p, t, g] = self.starts;
        let s = self.signed.as_str();
        let (method, path, ts, sig) = (&s[..p], &s[p..t], &s[t..g], &s[g..]);
        let verifies = |pk: &Key32| {
            keycache::shared()
                .get(pk)
                .is_some_and(|k| verify_hop_with(&k, method, path, ts, body, sig))
        };
        self.candidates
            .into_iter()
            .find(|e| verifies(&e.host_pubkey))
            .map(|e| Caller {
                key: e.host_pubkey,
                enrolment: e,
            })
            .ok_or_else(RelayError::bad_hop)
    }
}
