//! Shared pieces of the fuzz targets: a real relay over a real store (on tmpfs when available)
//! with two enrolled hosts, so targets drive the exact functions the HTTP layer calls on request
//! bodies and hop headers; plus small helpers to split fuzz input into fields.
//!
//! Nothing here is part of the relay; it only calls its public API.

pub mod seeds;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use relay_core::{start_relay, Caller, HopHeaders, Limits, Relay};
use relay_keyspace::{Clock, OpenOptions, Store, SystemClock};
use relay_wire::canonical::canonical_json;
use relay_wire::hop::sign_hop;
use relay_wire::keys::SigningKey;
use relay_wire::records::enrol_statement;
use serde_json::{json, Value};

/// A running relay with enrolled hosts `a` (sender) and `b` (target), and a host `r` whose key
/// the rotation mode rotates (replaced by the new key after each successful rotation).
pub struct Fixture {
    pub rt: tokio::runtime::Runtime,
    pub relay: Arc<Relay>,
    pub a: SigningKey,
    pub b: SigningKey,
    pub caller_a: Caller,
    pub caller_b: Caller,
    /// `s` as an authenticated caller (a host posts only its own list).
    pub caller_s: Caller,
    /// Signs sender lists (its own allowlist, so `b`'s queue stays open to `a`).
    pub s: SigningKey,
    /// The current key of the rotating host (name `rot`).
    pub r: Mutex<SigningKey>,
    /// Keeps the store directory alive for the process.
    _dir: tempfile::TempDir,
}

/// Where fuzz stores live: `/dev/shm` when present (fsync is cheap there), else the temp dir.
fn scratch_root() -> PathBuf {
    let shm = PathBuf::from("/dev/shm");
    if shm.is_dir() {
        shm
    } else {
        std::env::temp_dir()
    }
}

/// A temporary directory under [`scratch_root`].
pub fn scratch_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(scratch_root())
        .expect("temp dir")
}

/// Limits for fuzzing: the defaults with the per-minute windows lifted, so rate limits do not
/// hide deeper code after the first minute.
pub fn fuzz_limits() -> Limits {
    Limits {
        pushes_per_minute: u32::MAX,
        enrol_per_minute: u32::MAX,
        enrol_per_minute_v4_24: u32::MAX,
        enrol_per_minute_v6_48: u32::MAX,
        ..Limits::default()
    }
}

/// Now in ms.
pub fn now_ms() -> u64 {
    SystemClock.now_ms()
}

impl Fixture {
    /// The process-wide fixture (built on first use).
    pub fn get() -> &'static Fixture {
        static F: OnceLock<Fixture> = OnceLock::new();
        F.get_or_init(Fixture::build)
    }

    fn build() -> Fixture {
        let dir = scratch_dir("mbx-fuzz-relay-");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let store =
            Arc::new(Store::open(&dir.path().join("store"), OpenOptions::default()).expect("open"));
        let relay = rt
            .block_on(start_relay(
                store,
                SigningKey::generate(),
                fuzz_limits(),
                Arc::new(SystemClock),
            ))
            .expect("relay starts");
        let relay = Arc::new(relay);
        let a = SigningKey::generate();
        let b = SigningKey::generate();
        let r = SigningKey::generate();
        let s = SigningKey::generate();
        for (k, name) in [(&a, "alpha"), (&b, "bravo"), (&r, "rot"), (&s, "lists")] {
            enrol(&rt, &relay, k, name).expect("fixture enrolment");
        }
        let caller_a = authenticate(&rt, &relay, &a, "alpha");
        let caller_b = authenticate(&rt, &relay, &b, "bravo");
        let caller_s = authenticate(&rt, &relay, &s, "lists");
        Fixture {
            rt,
            relay,
            a,
            b,
            caller_a,
            caller_b,
            caller_s,
            s,
            r: Mutex::new(r),
            _dir: dir,
        }
    }
}

/// Challenge + enrol `key` as `name` through the relay's own functions.
///
/// # Errors
/// The relay's answer when it refuses.
pub fn enrol(
    rt: &tokio::runtime::Runtime,
    relay: &Relay,
    key: &SigningKey,
    name: &str,
) -> Result<(), Value> {
    let pk = key.public_b64();
    let c = rt
        .block_on(relay.challenge(&json!({"host": name, "pubkey": pk})))
        .map_err(|e| e.body)?;
    let challenge = c["challenge"].as_str().unwrap_or_default().to_owned();
    let sig = key.sign(canonical_json(&enrol_statement(&challenge, name, &pk, "")).as_bytes());
    rt.block_on(relay.enrol(&json!({"host": name, "pubkey": pk, "owner_fp": "", "sig": sig})))
        .map(|_| ())
        .map_err(|e| e.body)
}

/// Authenticate `key` with a correctly signed GET hop (panics if the relay refuses it: the
/// fixture is broken then).
pub fn authenticate(
    rt: &tokio::runtime::Runtime,
    relay: &Relay,
    key: &SigningKey,
    name: &str,
) -> Caller {
    let ts = now_ms().to_string();
    let path = "/v2/relay/items";
    let sig = sign_hop(key, "GET", path, &ts, "");
    let pk = key.public_b64();
    rt.block_on(relay.authenticate(&HopHeaders {
        host: Some(name),
        key: Some(&pk),
        ts: Some(&ts),
        sig: Some(&sig),
        method: "GET",
        path,
        body: b"",
    }))
    .expect("fixture hop authenticates")
}

/// Split `data` into at most `n` fields at 0xFF bytes (the last field takes the rest).
pub fn fields(data: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::with_capacity(n);
    let mut rest = data;
    while out.len() + 1 < n {
        match rest.iter().position(|&b| b == 0xFF) {
            Some(i) => {
                out.push(&rest[..i]);
                rest = &rest[i + 1..];
            }
            None => break,
        }
    }
    out.push(rest);
    while out.len() < n {
        out.push(&[]);
    }
    out
}

/// Lossy text of a field (fuzz input is arbitrary bytes; the HTTP layer only hands over UTF-8
/// header values, so targets use the text form where the relay takes `&str`).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
