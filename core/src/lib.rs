//! The relay's rules (docs/protocol.md) over the durable store, with no HTTP types: each public method
//! takes parsed request parts and answers a JSON body or a [`RelayError`]. The HTTP adapter
//! (the server crate `mbx-relay`) only moves bytes and maps [`Status`] to status codes.
//!
//! Layering: `relay-core` sees storage only through `relay_store::RelayStore` and links no
//! HTTP crate and no storage backend (Cargo.toml); the server picks the backend.

mod allowlist;
mod authority;
mod authority_choice;
mod authority_jwks;
mod authority_jwt;
mod authority_token;
mod background;
mod capacity;
mod challenge;
mod code;
mod config;
mod enc_ad;
mod enrol;
mod epoch_watch;
mod error;
mod hop;
mod idle_enrolments;
mod info;
mod invite;
mod item_ids;
mod key;
mod keycache;
mod legacy;
mod metrics;
mod peers;
mod pull;
mod push;
mod rate;
mod reason;
mod revoke;
mod revoke_watch;
mod rotate;
mod seen;
mod senders;
mod startup;
mod sweep;
mod wake;

use std::sync::{Arc, RwLock};

use relay_store::{ChallengeBook, Clock, SharedStore};

// The public surface: exactly what the server (src/), relay-tool, the benches, the fuzz targets
// and the tests name; every module stays private.
pub use authority::{EnrolmentAuthority, Settle};
pub use authority_choice::{for_serve, AuthorityFiles, AuthorityKind, ForServe};
pub use authority_jwks::{Jwks, JwksSource, JwksTiming, MAX_JWKS_BYTES};
pub use authority_token::{TokenAuthority, TokenSettings};
pub use code::ErrorCode;
pub use config::{default_duration, defaults, parse_bytes, parse_duration, Limits};
pub use enc_ad::EncLookup;
pub use epoch_watch::EPOCH_REFRESH;
pub use error::{AuthFailure, RelayError, Reply, Status, STORE_UNAVAILABLE};
pub use hop::{Caller, HopCheck, HopHeaders};
pub use invite::issue as issue_invite;
pub use key::{
    keygen_text, load_existing as load_existing_key, load_or_create as load_or_create_key,
};
pub use key::{KeySource, KEY_ENV, KEY_FILE};
pub use metrics::{encode_commit_stats, latency_histogram, Metrics};
pub use pull::{Pull, PullQuery};
pub use push::{check_wire, parse_push};
pub use rate::{address_key, ip_key, AddrKey, RateTable};
/// The key every layer names a host by (a hop's key, a queue's target), and the largest item the
/// store accepts: re-exported so the HTTP layer sees the relay, never the store.
pub use relay_store::{Key32, MAX_ITEM_BYTES_ACCEPTED};
pub use revoke::Revoker;
pub use startup::start as start_relay;
pub use wake::{Refused, Ticket, Wake, Woken, MAX_WAIT_SECS, PER_KEY_WAITERS};

/// Milliseconds since the Unix epoch by the system clock: the clock every rate window of the
/// relay reads (so its callers need not name the store's clock).
pub fn now_ms() -> u64 {
    relay_store::Clock::now_ms(&relay_store::SystemClock)
}
use relay_wire::keys::SigningKey;

/// Most sender keys whose push windows are tracked at once (rate table cap).
const SENDER_RATE_CAP: usize = 200_000;
/// Most client addresses (and, apiece, IPv4 /24s and IPv6 /48s) whose enrolment windows are
/// tracked at once (rate table cap).
const ADDRESS_RATE_CAP: usize = 100_000;

/// A call refused by a rate window: the answer, and how long until the window frees (the
/// HTTP layer's `Retry-After`).
#[derive(Debug)]
pub struct RateLimited {
    /// The 429 answer.
    pub error: RelayError,
    /// Until the window frees.
    pub wait: std::time::Duration,
}

/// The relay: the store, its key, limits and the bounded in-memory tables.
pub struct Relay {
    store: SharedStore,
    key: Arc<SigningKey>,
    pubkey: Key32,
    pubkey_b64: String,
    limits: Limits,
    clock: Arc<dyn Clock>,
    epoch: RwLock<String>,
    /// The store's shared book when several processes share the store, else this process's.
    challenges: Arc<dyn ChallengeBook>,
    /// Whether other processes share the store (and may change its epoch: `epoch_watch`).
    shared_store: bool,
    /// This process's name in store leases (`RelayStore::try_lease`): random per start.
    lease_holder: String,
    address_rate: rate::NestedWindows,
    sender_rate: rate::RateTable<Key32>,
    /// Who may enrol (spec §8); [`authority::HostKeyChallenge`] unless set otherwise.
    authority: Arc<dyn authority::EnrolmentAuthority>,
    /// Counters exposed on `/metrics`.
    pub metrics: metrics::Metrics,
    /// Last-seen days noted in memory, written in batches.
    seen: seen::Seen,
    /// Where the idle-enrolment expiry continues when a run stopped at its round cap.
    idle_cursor: std::sync::Mutex<Option<Key32>>,
    /// Long-poll pulls and event streams waiting for their queue to grow.
    wake: Arc<wake::Wake>,
    /// This process as its store row describes it (`peers`).
    this: peers::ThisProcess,
}

impl Relay {
    /// A relay over an opened store whose relay key is already pinned and whose epoch is `epoch`.
    pub fn new(
        store: SharedStore,
        key: SigningKey,
        limits: Limits,
        clock: Arc<dyn Clock>,
        epoch: String,
    ) -> Self {
        let pubkey = key.public();
        let pubkey_b64 = key.public_b64();
        let shared = store.shared_challenges();
        let shared_store = shared.is_some();
        let challenges = shared.unwrap_or_else(|| Arc::new(challenge::Challenges::default()));
        let started_ms = clock.now_ms();
        Relay {
            store,
            key: Arc::new(key),
            pubkey,
            pubkey_b64,
            challenges,
            shared_store,
            lease_holder: uuid::Uuid::new_v4().to_string(),
            address_rate: rate::NestedWindows::new(limits.enrol_windows(), ADDRESS_RATE_CAP),
            sender_rate: rate::RateTable::new(limits.pushes_per_minute, SENDER_RATE_CAP),
            authority: Arc::new(authority::HostKeyChallenge),
            limits,
            clock,
            epoch: RwLock::new(epoch),
            metrics: metrics::Metrics::default(),
            seen: seen::Seen::default(),
            idle_cursor: std::sync::Mutex::new(None),
            wake: Arc::default(),
            this: peers::ThisProcess::new(started_ms),
        }
    }

    /// This relay with another enrolment authority.
    pub fn with_authority(mut self, authority: Arc<dyn authority::EnrolmentAuthority>) -> Self {
        self.authority = authority;
        self
    }

    /// The store (for the admin socket, health checks and shutdown).
    pub fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The registry of waiting pulls and event streams.
    pub fn wake(&self) -> &Arc<wake::Wake> {
        &self.wake
    }

    /// The current epoch.
    pub fn epoch(&self) -> String {
        self.epoch.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Count one enrolment-class call (challenge, enrol, rotate) for a client address in its
    /// nested windows ([`rate::NestedWindows`]: the address, IPv6 by /64, and its IPv4 /24 or
    /// IPv6 /48).
    ///
    /// # Errors
    /// 429 when one of those windows is used up for this minute (then nothing is counted),
    /// with the time until it frees.
    pub fn check_address_rate(&self, addr: &str) -> Result<(), RateLimited> {
        self.address_rate
            .try_hit_addr(addr, self.now_ms())
            .map_err(|wait| RateLimited {
                error: RelayError::rate_limited(),
                wait,
            })
    }

    /// Await a store write, timing it for `/metrics`.
    async fn write<T>(&self, p: relay_store::Pending<T>) -> Result<T, RelayError> {
        let t = std::time::Instant::now();
        let r = p.await;
        self.metrics.store_write.observe(t.elapsed().as_secs_f64());
        match r {
            Ok(v) => {
                self.metrics.note_write_ok(self.now_ms());
                Ok(v)
            }
            Err(e) => {
                self.metrics.note_write_failed();
                Err(e.into())
            }
        }
    }
}

/// A JSON object from fields, moving the values (the `json!` macro would deep-copy a `Value`
/// variable by re-serialising it, which is measurable on large push and pull answers).
pub fn object<const N: usize>(fields: [(&str, serde_json::Value); N]) -> serde_json::Value {
    serde_json::Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The `error` text of a JSON value that must be an object, for 400 answers.
fn expect_object(
    v: &serde_json::Value,
) -> Result<&serde_json::Map<String, serde_json::Value>, RelayError> {
    v.as_object()
        .ok_or_else(|| RelayError::bad_request("body must be a JSON object"))
}

/// Parse a request body as JSON (400 on anything else).
///
/// # Errors
/// 400 `{"error": "malformed JSON: ..."}`.
pub fn parse_json(body: &[u8]) -> Result<serde_json::Value, RelayError> {
    parse_json_as(body)
}

/// [`parse_json`] into any tree `serde_json` reads through `deserialize_any` (a `Value`, or a
/// borrowed `relay_wire::json_node::Node`): the same parser, so the same error texts.
pub(crate) fn parse_json_as<'a, T: serde::Deserialize<'a>>(
    body: &'a [u8],
) -> Result<T, RelayError> {
    serde_json::from_slice(body)
        .map_err(|e| RelayError::bad_request(format!("malformed JSON: {e}")))
}
