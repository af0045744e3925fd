//! A peer's retired keys (spec §4, §2 "Rotation"): `host peer rotate NAME NEWKEY` (or a rotation
//! record both keys signed) pins the new key, keeps the old one as retired rather than forgetting
//! it, moves the peer's active outbox rows to the new key, and makes the next sync republish the
//! allowlist (which names pinned keys only, so the old key leaves it). Delivery receipts and
//! envelopes are checked against the pinned and the retired keys ([`peer_keys`], [`peer_for_key`]).

use std::path::Path;

use serde_json::{json, Value};

use super::store::{HostStore, Peer};
use super::HostError;
use relay_wire::keys::{b64, fingerprint, parse_pubkey};
use relay_wire::records::parse_rotation;

/// Bound on retired keys kept per peer (the oldest is forgotten first).
pub(crate) const MAX_RETIRED_PER_PEER: usize = 16;

fn key(name: &str) -> String {
    format!("peer_retired:{name}")
}

/// The peer's retired keys, oldest first.
pub(crate) fn retired(store: &HostStore, name: &str) -> Result<Vec<String>, HostError> {
    Ok(store.extra(&key(name))?.unwrap_or_default())
}

/// The keys a peer's signature may come from: the pinned key first, then the retired ones,
/// newest first (a receipt signed before the peer rotated still settles our row).
pub(crate) fn peer_keys(store: &HostStore, peer: &Peer) -> Result<Vec<String>, HostError> {
    let mut keys = vec![peer.pubkey.clone()];
    keys.extend(retired(store, &peer.name)?.into_iter().rev());
    Ok(keys)
}

/// The peer whose pinned or retired key this is.
pub(crate) fn peer_for_key(store: &HostStore, key: &str) -> Result<Option<Peer>, HostError> {
    if let Some(p) = store.peer_by_key(key)? {
        return Ok(Some(p));
    }
    for p in store.peers()? {
        if retired(store, &p.name)?.iter().any(|k| k == key) {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

/// `host peer rotate NAME [NEWKEY] [--record FILE]`.
///
/// # Errors
/// Not a pinned peer, a bad key, a record that does not verify or is not for this peer's pinned
/// key, or a key already pinned as another peer (usage errors; nothing changes).
pub(crate) fn peer_rotate(
    dir: &Path,
    name: &str,
    new_key: Option<&str>,
    record: Option<&Path>,
) -> Result<(Value, String), HostError> {
    let mut store = HostStore::open(dir)?;
    let peer = store
        .peer(name)?
        .ok_or_else(|| HostError::Usage(format!("{name} is not a pinned peer")))?;
    let new = match (record, new_key) {
        (Some(file), given) => {
            let from_record = key_from_record(file, &peer)?;
            if given.is_some_and(|g| g != from_record) {
                return Err(HostError::Usage(
                    "NEWKEY differs from the rotation record's new key".into(),
                ));
            }
            from_record
        }
        (None, Some(k)) => {
            parse_pubkey(k)
                .ok_or_else(|| HostError::Usage("not a base64 Ed25519 public key".into()))?;
            k.to_string()
        }
        (None, None) => {
            return Err(HostError::Usage(
                "give the peer's new key or --record FILE".into(),
            ))
        }
    };
    let fp = |k: &str| parse_pubkey(k).map(|k| fingerprint(&k)).unwrap_or_default();
    if new == peer.pubkey {
        return Ok((
            json!({"name": name, "pubkey": new, "fingerprint": fp(&new), "retired": retired(&store, name)?}),
            format!("peer {name} is already pinned to {}", fp(&new)),
        ));
    }
    if let Some(other) = store.peer_by_key(&new)? {
        return Err(HostError::Usage(format!(
            "that key is already pinned as peer {}",
            other.name
        )));
    }
    let mut old_keys = retired(&store, name)?;
    old_keys.retain(|k| k != &peer.pubkey && k != &new);
    old_keys.push(peer.pubkey.clone());
    let excess = old_keys.len().saturating_sub(MAX_RETIRED_PER_PEER);
    old_keys.drain(..excess);
    let rows = store.rows()?;
    let mut b = store.batch();
    b.put_peer(&Peer {
        name: name.to_string(),
        pubkey: new.clone(),
    })?;
    b.set_extra(&key(name), Some(&old_keys))?;
    // Rows still to be pushed or confirmed go to the new key: the relay moved the peer's queue
    // and revoked the old key, so a (re-)push to it would be refused.
    let mut moved = 0u64;
    for mut r in rows
        .into_iter()
        .filter(|r| r.state.active() && r.target_pubkey == peer.pubkey)
    {
        r.target_pubkey = new.clone();
        b.put_row(&r)?;
        moved += 1;
    }
    // The allowlist names pinned keys: the next sync republishes it with the new key.
    b.set_published(None)?;
    b.commit()?;
    Ok((
        json!({"name": name, "pubkey": new, "fingerprint": fp(&new), "retired": old_keys,
               "rows_moved": moved}),
        format!(
            "peer {name} now pinned to {} (retired {}); {moved} waiting row(s) moved to the new key; \
             the next sync republishes the allowlist",
            fp(&new),
            fp(&peer.pubkey)
        ),
    ))
}

/// The new key of a rotation record (`{"rotation":{...}}` or the inner object) for this peer's
/// pinned key, after checking both signatures.
fn key_from_record(file: &Path, peer: &Peer) -> Result<String, HostError> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| HostError::Usage(format!("cannot read {}: {e}", file.display())))?;
    let v: Value = serde_json::from_str(&text)
        .map_err(|_| HostError::Usage(format!("{} is not JSON", file.display())))?;
    let v = if v.get("rotation").is_some() {
        v
    } else {
        json!({ "rotation": v })
    };
    let rot =
        parse_rotation(&v).map_err(|e| HostError::Usage(format!("bad rotation record: {e}")))?;
    if !rot.host.eq_ignore_ascii_case(&peer.name) {
        return Err(HostError::Usage(format!(
            "the rotation record is for host {}, not {}",
            rot.host, peer.name
        )));
    }
    let new = b64(&rot.new_pub);
    if b64(&rot.old_pub) != peer.pubkey && new != peer.pubkey {
        return Err(HostError::Usage(format!(
            "the rotation record does not start from {}'s pinned key",
            peer.name
        )));
    }
    Ok(new)
}
