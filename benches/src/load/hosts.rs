//! What the bench learns from the relay (`GET /v2/relay/info`) and how it enrols its own hosts
//! (host-key challenge + enrol, docs/protocol.md §3), so it needs no account on the relay under test.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rand::RngCore;
use serde_json::{json, Value};

use super::client::{Conn, Host};
use relay_core::defaults;
use relay_wire::keys::{parse_pubkey, verifying_key, VerifyingKey};
use relay_wire::records::enrol_statement;

/// The relay facts the bench needs: its key and epoch (to check accept statements) and limits.
pub(super) struct RelayInfo {
    pub relay_pubkey_b64: String,
    /// The relay key, decoded once (every accept statement is checked against it).
    pub relay_key: VerifyingKey,
    pub epoch: String,
    pub version: String,
    pub max_batch: usize,
    pub max_pull: usize,
    pub max_item_bytes: u64,
}

/// Read `GET /v2/relay/info`.
///
/// # Errors
/// A message naming what is missing or wrong.
pub(super) fn relay_info(conn: &Conn) -> Result<RelayInfo, String> {
    let r = conn.get("/v2/relay/info", None)?;
    if r.status != 200 {
        return Err(format!("GET /v2/relay/info: {}", r.error_kind()));
    }
    let v: Value =
        serde_json::from_str(&r.body).map_err(|_| "GET /v2/relay/info: not JSON".to_string())?;
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
    let limit = |k: &str| {
        v.get("limits")
            .and_then(|l| l.get(k))
            .and_then(Value::as_u64)
    };
    let relay_pubkey_b64 = s("relay_pubkey").ok_or("relay info has no relay_pubkey")?;
    let relay_key = parse_pubkey(&relay_pubkey_b64)
        .as_ref()
        .and_then(verifying_key)
        .ok_or("relay info: bad relay_pubkey")?;
    Ok(RelayInfo {
        relay_pubkey_b64,
        relay_key,
        epoch: s("epoch").ok_or("relay info has no epoch")?,
        version: s("version").unwrap_or_default(),
        max_batch: limit("max_batch").map_or(defaults::MAX_BATCH, |n| n as usize),
        max_pull: limit("max_pull").map_or(defaults::MAX_PULL, |n| n as usize),
        max_item_bytes: limit("max_item_bytes").unwrap_or(defaults::MAX_ITEM_BYTES),
    })
}

/// A short random tag so each run's host names are new (names shared by many hosts are legal
/// but crowd the relay's per-name table).
pub(super) fn run_tag() -> String {
    let mut b = [0u8; 4];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Enrol a fresh host named `name`: challenge, then the signed enrol statement (no account).
///
/// # Errors
/// The relay's answer, with a hint when enrolment is rate-limited.
pub(super) fn enrol(conn: &Conn, name: String) -> Result<Host, String> {
    let host = Host::generate(name);
    let body = json!({"host": host.name, "pubkey": host.pub_b64}).to_string();
    let r = conn.post("/v1/relay/challenge", &body, None)?;
    let challenge = match r.status {
        200 => serde_json::from_str::<Value>(&r.body)
            .ok()
            .and_then(|v| {
                v.get("challenge")
                    .and_then(Value::as_str)
                    .map(str::to_string)
            })
            .ok_or("challenge answer has no challenge")?,
        _ => return Err(enrol_error("challenge", &r)),
    };
    let stmt = enrol_statement(&challenge, &host.name, &host.pub_b64, "");
    let sig = host.key.sign_canonical(&stmt);
    let body =
        json!({"host": host.name, "pubkey": host.pub_b64, "owner_fp": "", "sig": sig}).to_string();
    let r = conn.post("/v1/relay/enrol", &body, None)?;
    if r.status != 200 {
        return Err(enrol_error("enrol", &r));
    }
    Ok(host)
}

fn enrol_error(step: &str, r: &super::client::Resp) -> String {
    let hint = if r.status == 429 {
        " (the relay limits enrolment calls per address and per /24 or /48: start it with higher \
         --enrol-per-minute, --enrol-per-minute-v4-24 and --enrol-per-minute-v6-48)"
    } else {
        ""
    };
    format!("{step}: {}{hint}", r.error_kind())
}

/// Concurrent enrolments of [`enrol_many`]: one at a time, 100,000 hosts (the growth bench)
/// took minutes of round trips; the relay's group commit makes concurrent ones share fsyncs.
const ENROL_THREADS: usize = 16;

/// Enrol `n` hosts named `<prefix><i>`, [`ENROL_THREADS`] at a time, in name order.
///
/// # Errors
/// The first failure (the other threads stop at their next host).
pub(super) fn enrol_many(conn: &Conn, prefix: &str, n: usize) -> Result<Vec<Host>, String> {
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let threads = n.clamp(1, ENROL_THREADS);
    let parts: Vec<Result<Vec<(usize, Host)>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (next, failed, conn) = (&next, &failed, conn.fresh());
                s.spawn(move || {
                    let mut mine = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n || failed.load(Ordering::Relaxed) {
                            return Ok(mine);
                        }
                        match enrol(&conn, format!("{prefix}{i}")) {
                            Ok(h) => mine.push((i, h)),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("enrolment thread panicked".into()))
            })
            .collect()
    });
    let mut all = Vec::with_capacity(n);
    for p in parts {
        all.extend(p?);
    }
    all.sort_unstable_by_key(|(i, _)| *i);
    Ok(all.into_iter().map(|(_, h)| h).collect())
}
