//! `mbx-relay host rotate`: this host's own key rotation (spec §2 "Rotation" T030, §8;
//! docs/protocol.md §3 "Key rotation"), resumable after a crash at any step.
//!
//! Steps, each durable before the next: (1) a new key in `host.key.new` (0600, fsynced);
//! (2) the intent (the rotation record both keys signed) in the store; (3) the POST to the relay
//! (a replay answered 404 counts as done once the new key is enrolled); (4) in one commit: the
//! receive position for that relay back to 0 (the relay re-sequenced our queue), the enrolment and
//! publication caches cleared, the old key listed as retired, receipts not yet pushed re-signed; (5) the old key kept as
//! `host.key.retired-<fp>` (0600) and `host.key.new` renamed over `host.key`; (6) enrol and publish
//! with the new key, then check the relay's signed `you` shows the new key and our enc ad (§8);
//! (7) the intent removed. `host rotate` and `host sync` both finish a pending intent first.

use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::RelayClient;
use super::enc_ad::RelayView;
use super::hostdir::HOST_KEY;
use super::identity::{read_secret, write_secret, Identity};
use super::store::{Checkpoint, HostStore, ItemKind, OutRow, RowState};
use super::sync::{Session, SyncOptions};
use super::{now_ms, HostError};
use relay_os::failpoint::hit;
use relay_wire::accept::wire_hash_hex;
use relay_wire::canonical::canonical_bytes;
use relay_wire::keys::{fingerprint, parse_pubkey, SigningKey};
use relay_wire::time::iso_ms;

/// The new key, written before the intent so a crash never loses the key the intent names.
const NEW_KEY: &str = "host.key.new";
/// Store record of a rotation under way.
const INTENT: &str = "rotation";
/// Store record of this host's retired keys.
const RETIRED: &str = "retired_keys";
/// Bound on retired keys remembered (the oldest is forgotten first; its file stays).
const MAX_RETIRED: usize = 64;

/// A rotation under way: the body to post and where it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Intent {
    /// `{"rotation":{"rec","old_sig","new_sig"}}` as posted.
    pub body: String,
    pub old_pub: String,
    pub new_pub: String,
    /// The relay took it (or a replay found the new key enrolled) and step (4) is committed.
    pub posted: bool,
    /// Items the relay moved (`None` after a replay, when the first answer was lost).
    pub moved: Option<u64>,
}

/// One of this host's former keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RetiredKey {
    pub pubkey: String,
    /// The key file it is kept in, in the host directory.
    pub file: String,
    pub(crate) retired_at: u64,
}

/// This host's retired keys, oldest first.
pub(crate) fn retired_keys(store: &HostStore) -> Result<Vec<RetiredKey>, HostError> {
    Ok(store.extra(RETIRED)?.unwrap_or_default())
}

/// The rotation under way, if any.
pub(crate) fn pending(store: &HostStore) -> Result<Option<Intent>, HostError> {
    store.extra(INTENT)
}

/// For `host status`: this host's retired keys and a rotation under way, as JSON and text lines.
///
/// # Errors
/// A damaged store record.
pub(crate) fn status(store: &HostStore) -> Result<(Value, Vec<String>), HostError> {
    let fp = |k: &str| parse_pubkey(k).map(|k| fingerprint(&k)).unwrap_or_default();
    let retired = retired_keys(store)?;
    let intent = pending(store)?;
    let mut lines: Vec<String> = retired
        .iter()
        .map(|r| {
            format!(
                "retired host key {} (since {}, in {})",
                fp(&r.pubkey),
                iso_ms(r.retired_at),
                r.file
            )
        })
        .collect();
    if let Some(i) = &intent {
        lines.push(format!(
            "KEY ROTATION INTERRUPTED (to {}): run `{}` to finish it",
            fp(&i.new_pub),
            store.command("rotate")
        ));
    }
    let v = json!({
        "retired": retired.iter().map(|r| json!({"pubkey": r.pubkey, "fingerprint": fp(&r.pubkey),
            "file": r.file, "retired_at": iso_ms(r.retired_at)})).collect::<Vec<_>>(),
        "rotation_pending": intent.map(|i| i.new_pub),
    });
    Ok((v, lines))
}

/// `host rotate`: finish a pending rotation, or start one. Returns the JSON and text to print.
///
/// # Errors
/// No name or relay, an unreachable relay (the intent stays: run it again), a refusal.
pub(crate) fn rotate(dir: &Path) -> Result<(Value, String), HostError> {
    let mut store = HostStore::open(dir)?;
    let (intent, resumed) = match pending(&store)? {
        Some(i) => (i, true),
        None => (start(dir, &mut store)?, false),
    };
    drop(store);
    let mut v = finish(dir, intent)?;
    // The record both keys signed, for the peers' `peer rotate --record` (it verifies the new
    // key by the old one's signature; a bare NEWKEY is only as good as how it was passed on).
    let new_fp = v["new_fingerprint"].as_str().unwrap_or_default().to_owned();
    let record = dir.join(format!("rotation-{new_fp}.json"));
    let body = v["rotation"].to_string();
    std::fs::write(&record, format!("{body}\n")).map_err(|e| {
        HostError::Store(format!(
            "rotated, but the record could not be written to {}: {e} (`host rotate --json` \
             prints it)",
            record.display()
        ))
    })?;
    v["record_file"] = record.display().to_string().into();
    let verb = if resumed {
        "finished the interrupted rotation"
    } else {
        "rotated"
    };
    let name = v["name"].as_str().unwrap_or_default();
    let text = format!(
        "{verb}: host key {new_fp} replaces {} (retired, kept in {}); {}\n\
         the rotation record both keys signed is {}: give it to every peer, who runs\n  \
         mbx-relay host --dir PEER_DIR peer rotate {name} --record rotation-{new_fp}.json\n\
         (a peer that confirmed the new key another way may give it instead of --record: {})",
        v["old_fingerprint"].as_str().unwrap_or(""),
        v["retired_file"].as_str().unwrap_or(""),
        v["relay"].as_str().unwrap_or(""),
        record.display(),
        v["new_pubkey"].as_str().unwrap_or(""),
    );
    Ok((v, text))
}

/// For `host sync`: finish a pending rotation first (nothing when none is pending).
///
/// # Errors
/// As [`rotate`]: the intent stays for the next run.
pub(crate) fn finish_pending(dir: &Path) -> Result<Option<Value>, HostError> {
    let intent = pending(&HostStore::open(dir)?)?;
    intent.map(|i| finish(dir, i)).transpose()
}

/// Steps (1) and (2): the new key file, the signed record, the intent.
fn start(dir: &Path, store: &mut HostStore) -> Result<Intent, HostError> {
    let name = store.name()?.ok_or_else(|| {
        HostError::Usage(format!(
            "host not initialised; run `{}`",
            store.command("init --name NAME")
        ))
    })?;
    if store.relay()?.is_none() {
        return Err(HostError::Usage(format!(
            "no relay configured; run `{}` (a rotation is announced to the relay)",
            store.command("relay set URL")
        )));
    }
    let id = Identity::load(dir)?;
    let new = new_key(dir)?;
    hit("host-rotate-after-new-key");
    let rec = json!({
        "v": 1, "type": "host-rotation", "host": name,
        "old_pub": id.host.public_b64(), "new_pub": new.public_b64(),
        "new_enc_pub": id.enc.public_b64(), "iat": iso_ms(now_ms()),
    });
    let body = json!({"rotation": {
        "rec": rec, "old_sig": id.host.sign_canonical(&rec), "new_sig": new.sign_canonical(&rec),
    }});
    let intent = Intent {
        body: body.to_string(),
        old_pub: id.host.public_b64(),
        new_pub: new.public_b64(),
        posted: false,
        moved: None,
    };
    let mut b = store.batch();
    b.set_extra(INTENT, Some(&intent))?;
    b.commit()?;
    hit("host-rotate-after-intent");
    Ok(intent)
}

/// The key in `host.key.new`: a valid one left by an interrupted start, else a fresh one.
fn new_key(dir: &Path) -> Result<SigningKey, HostError> {
    let path = dir.join(NEW_KEY);
    if path.exists() {
        if let Ok(k) = SigningKey::from_key_file(&read_secret(&path)?) {
            return Ok(k);
        }
        // A crash while writing it (no intent names it yet): write it again.
        std::fs::remove_file(&path)
            .map_err(|e| HostError::Store(format!("cannot remove {}: {e}", path.display())))?;
    }
    let k = SigningKey::generate();
    write_secret(&path, &k.seed_b64())?;
    sync_dir(dir)?;
    Ok(k)
}

/// Steps (3) to (7) from wherever the intent stands.
fn finish(dir: &Path, mut intent: Intent) -> Result<Value, HostError> {
    let opts = SyncOptions::from_env();
    let mut store = HostStore::open(dir)?;
    let name = store.name()?.unwrap_or_default();
    let relay = store.relay()?.ok_or_else(|| {
        HostError::Usage(format!(
            "no relay configured; run `{}`",
            store.command("relay set URL")
        ))
    })?;
    let new = load_new_key(dir, &intent)?;
    let relay_note;
    if !intent.posted {
        let client = RelayClient::new(&store.endpoint_of(&relay)?, &name, &new, opts.timeout)?;
        relay_note = match post(&client, &intent).map_err(super::trust::hint_ca)? {
            Posted::Moved(n) => {
                intent.moved = Some(n);
                format!("the relay moved {n} queued item(s) to the new key")
            }
            Posted::Replayed => {
                "the relay had taken it already (its first answer was lost)".to_string()
            }
            Posted::OldUnknown => {
                "the relay did not know the old key; the new key enrols afresh".to_string()
            }
            Posted::Refused(why) => return Err(abandon(dir, &mut store, &why)),
        };
        hit("host-rotate-after-post");
        intent.posted = true;
        let mut retired = retired_keys(&store)?;
        if !retired.iter().any(|r| r.pubkey == intent.old_pub) {
            retired.push(RetiredKey {
                pubkey: intent.old_pub.clone(),
                file: retired_file(&intent.old_pub),
                retired_at: now_ms(),
            });
        }
        let excess = retired.len().saturating_sub(MAX_RETIRED);
        retired.drain(..excess);
        let resigned = resign_receipts(&store, &new)?;
        let mut b = store.batch();
        for r in &resigned {
            b.put_row(r)?;
        }
        b.set_extra(INTENT, Some(&intent))?;
        b.set_extra(RETIRED, Some(&retired))?;
        // The relay re-sequenced our queue under the new key: pull it again from the start.
        b.set_checkpoint(&relay.url, &relay.relay_pubkey, Checkpoint::default())?;
        b.set_enrolled(None)?;
        b.set_published(None)?;
        b.set_published_ad(None)?;
        b.commit()?;
        hit("host-rotate-after-record");
    } else {
        relay_note = "the relay had taken it before the interruption".to_string();
    }
    swap_key_files(dir, &intent)?;
    hit("host-rotate-after-swap");
    let id = Identity::load(dir)?;
    republish_and_check(&mut store, &id, opts)?;
    hit("host-rotate-after-publish");
    let mut b = store.batch();
    b.set_extra::<Intent>(INTENT, None)?;
    b.commit()?;
    let fp = |k: &str| parse_pubkey(k).map(|k| fingerprint(&k)).unwrap_or_default();
    Ok(json!({
        "name": name, "old_pubkey": intent.old_pub, "new_pubkey": intent.new_pub,
        "old_fingerprint": fp(&intent.old_pub), "new_fingerprint": fp(&intent.new_pub),
        "retired_file": retired_file(&intent.old_pub), "moved": intent.moved, "relay": relay_note,
        "peer_command": format!("mbx-relay host --dir PEER_DIR peer rotate {name} {}", intent.new_pub),
        "rotation": serde_json::from_str::<Value>(&intent.body).unwrap_or(Value::Null),
    }))
}

/// Delivery receipts not yet pushed, signed again by the new key: the relay takes a receipt only
/// when the pushing host signed it (docs/protocol.md §3 "Push"), and from now on that is the new
/// key. Same record, same item id; the new wire bytes are fixed before any push, as always.
fn resign_receipts(store: &HostStore, new: &SigningKey) -> Result<Vec<OutRow>, HostError> {
    let mut out = Vec::new();
    for mut r in store.rows()? {
        if r.kind != ItemKind::Receipt || r.state != RowState::Pending {
            continue;
        }
        let Some(rec) = r
            .wire
            .as_deref()
            .and_then(|w| serde_json::from_slice::<Value>(w).ok())
            .and_then(|v| v.get("rec").cloned())
        else {
            continue;
        };
        let wire = canonical_bytes(&json!({"rec": rec, "sig": new.sign_canonical(&rec)}));
        r.wire_hash = wire_hash_hex(&wire);
        r.wire = Some(wire);
        out.push(r);
    }
    Ok(out)
}

/// How the relay took the rotation.
enum Posted {
    Moved(u64),
    /// 404 for the old key, and the new key is enrolled: an earlier post of ours went through.
    Replayed,
    /// 404 for the old key, and the new key is not enrolled: nothing on the relay to move.
    OldUnknown,
    /// 400 (a record the relay cannot take) or 409 (new key revoked there): trying again
    /// cannot help.
    Refused(String),
}

/// Step (3). The record authenticates itself: no hop.
fn post(client: &RelayClient<'_>, intent: &Intent) -> Result<Posted, HostError> {
    let body: Value = serde_json::from_str(&intent.body)
        .map_err(|e| HostError::Store(format!("damaged rotation intent: {e}")))?;
    let a = client.post("/v2/relay/rotate", &body, false)?;
    match a.status {
        200 => Ok(Posted::Moved(
            a.body.get("moved").and_then(Value::as_u64).unwrap_or(0),
        )),
        404 => {
            // Signed with the new key: `you` is present exactly when the new key is enrolled.
            let info = client.get("/v2/relay/info", None, true)?;
            let you = info.body.get("you").and_then(|y| y.get("pubkey"));
            if info.status == 200 && you.and_then(Value::as_str) == Some(intent.new_pub.as_str()) {
                Ok(Posted::Replayed)
            } else {
                Ok(Posted::OldUnknown)
            }
        }
        400 | 409 => Ok(Posted::Refused(a.error())),
        _ => Err(HostError::Relay(format!(
            "the relay did not take the rotation now ({}); run `host rotate` again later",
            a.error()
        ))),
    }
}

/// Drop a rotation the relay refused for good: the intent and the staged key go, the host keeps
/// its old key (nothing else changed before the post). Returns the error to report.
fn abandon(dir: &Path, store: &mut HostStore, why: &str) -> HostError {
    let mut b = store.batch();
    let cleared = b
        .set_extra::<Intent>(INTENT, None)
        .and_then(|()| b.commit());
    if let Err(e) = cleared {
        return e;
    }
    let _ = std::fs::remove_file(dir.join(NEW_KEY));
    HostError::Relay(format!(
        "the relay refused the rotation ({why}); it is abandoned and this host keeps its key"
    ))
}

/// The key in `host.key.new`, or in `host.key` once swapped; it must be the intent's new key.
fn load_new_key(dir: &Path, intent: &Intent) -> Result<SigningKey, HostError> {
    for file in [NEW_KEY, HOST_KEY] {
        let path = dir.join(file);
        if !path.exists() {
            continue;
        }
        if let Ok(k) = SigningKey::from_key_file(&read_secret(&path)?) {
            if k.public_b64() == intent.new_pub {
                return Ok(k);
            }
        }
    }
    Err(HostError::Store(format!(
        "the rotation under way names a new key found neither in {NEW_KEY} nor in {HOST_KEY}"
    )))
}

/// `host.key.retired-<fingerprint>`.
fn retired_file(pubkey: &str) -> String {
    let fp = parse_pubkey(pubkey)
        .map(|k| fingerprint(&k))
        .unwrap_or_default();
    format!("{HOST_KEY}.retired-{fp}")
}

/// Step (5), idempotent: keep the old key in its retired file, then rename the new key over
/// `host.key` (atomic), fsyncing the directory after each.
fn swap_key_files(dir: &Path, intent: &Intent) -> Result<(), HostError> {
    let host_path = dir.join(HOST_KEY);
    let current = SigningKey::from_key_file(&read_secret(&host_path)?)
        .map_err(|e| HostError::Store(format!("{}: {e}", host_path.display())))?;
    if current.public_b64() == intent.new_pub {
        return Ok(());
    }
    if current.public_b64() != intent.old_pub {
        return Err(HostError::Store(format!(
            "{} holds neither the old nor the new key of the rotation under way",
            host_path.display()
        )));
    }
    let retired = dir.join(retired_file(&intent.old_pub));
    let kept = retired.exists()
        && read_secret(&retired)
            .ok()
            .and_then(|t| SigningKey::from_key_file(&t).ok())
            .is_some_and(|k| k.public_b64() == intent.old_pub);
    if !kept {
        let _ = std::fs::remove_file(&retired);
        write_secret(&retired, &current.seed_b64())?;
        sync_dir(dir)?;
    }
    std::fs::rename(dir.join(NEW_KEY), &host_path)
        .map_err(|e| HostError::Store(format!("cannot install the new host key: {e}")))?;
    sync_dir(dir)
}

/// Step (6): enrol (the cache was cleared), publish the enc ads and allowlist with the new key,
/// then read the relay's signed `you` and check it shows the new key and our enc key (§8). On a
/// mismatch the publication caches are cleared so the next run publishes again.
fn republish_and_check(
    store: &mut HostStore,
    id: &Identity,
    opts: SyncOptions,
) -> Result<(), HostError> {
    let mut s = Session::open(store, id, opts)?;
    s.ensure_enrolled()?;
    s.publish()?;
    let info = s.client.get("/v2/relay/info", None, true)?;
    let enc_pub = id.enc.public_b64();
    let you = info.body.get("you");
    let problem =
        if you.and_then(|y| y.get("pubkey")).and_then(Value::as_str) != Some(s.my_pub().as_str()) {
            Some("the relay does not show the new key as enrolled")
        } else {
            match RelayView::from_info(&info.body) {
                RelayView::Known {
                    enc_pub: v2, v1, ..
                } => {
                    if opts.enc_ads.v2() && v2.as_deref() != Some(enc_pub.as_str()) {
                        Some("the relay does not hold the republished v2 enc-key ad")
                    } else if opts.enc_ads.v1() && v1.as_deref() != Some(enc_pub.as_str()) {
                        Some("the relay does not hold the republished v1 enc key")
                    } else {
                        None
                    }
                }
                // A relay without `you.enc_ad` cannot show it; the publish answers were 200.
                RelayView::Unknown => None,
            }
        };
    let Some(problem) = problem else {
        return Ok(());
    };
    let mut b = s.store.batch();
    b.set_published(None)?;
    b.set_published_ad(None)?;
    b.commit()?;
    Err(HostError::Relay(format!(
        "after the rotation {problem}; run `host rotate` or `host sync` again"
    )))
}

/// fsync a directory so a created or renamed file survives a crash.
fn sync_dir(dir: &Path) -> Result<(), HostError> {
    relay_os::durable_dir::sync_dir(dir)
        .map_err(|e| HostError::Store(format!("cannot sync {}: {e}", dir.display())))
}
