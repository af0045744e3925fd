//! What this host builds: agentmbx v3 envelopes (plaintext drafts, sealed at sync time) and T218
//! delivery receipts. Addresses are `owner@<host>`: this host speaks for its owner.

use rand::RngCore;
use serde_json::{json, Value};

use super::HostError;
use relay_wire::canonical::canonical_bytes;
use relay_wire::keys::SigningKey;
use relay_wire::receipt::{receipt_item_id, receipt_record_valid};
use relay_wire::time::iso_ms;

/// agentmbx's plaintext body limit (256 KiB).
pub const MAX_BODY: usize = 256 * 1024;
/// agentmbx's subject limit, in characters.
pub(crate) const MAX_SUBJECT: usize = 200;

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A new ULID: 48-bit millisecond time, 80 random bits, Crockford base32 (26 chars).
pub fn ulid(now_ms: u64) -> String {
    let mut rnd = [0u8; 10];
    rand::rngs::OsRng.fill_bytes(&mut rnd);
    let mut v: u128 = u128::from(now_ms & 0xFFFF_FFFF_FFFF) << 80;
    for (i, b) in rnd.iter().enumerate() {
        v |= u128::from(*b) << (8 * (9 - i));
    }
    (0..26)
        .map(|i| CROCKFORD[((v >> (5 * (25 - i))) & 31) as usize] as char)
        .collect()
}

/// The owner address of a host.
pub(crate) fn owner_address(host: &str) -> String {
    format!("owner@{host}")
}

/// Whether a subject carries characters agentmbx refuses (control, U+007F, U+0085, U+2028, U+2029).
fn bad_subject_char(c: char) -> bool {
    (c as u32) < 0x20 || matches!(c, '\u{7f}' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// A plaintext v3 envelope from this host's owner to the peer's owner.
///
/// # Errors
/// [`HostError::Usage`] for an empty or over-long subject, control characters in it, or a body
/// over 256 KiB.
pub fn draft_envelope(
    id: &str,
    from_host: &str,
    to_host: &str,
    subject: &str,
    body: &str,
    now_ms: u64,
) -> Result<Value, HostError> {
    if subject.trim().is_empty() {
        return Err(HostError::Usage("subject is required".into()));
    }
    if subject.chars().count() > MAX_SUBJECT {
        return Err(HostError::Usage(format!(
            "subject is over {MAX_SUBJECT} characters"
        )));
    }
    if subject.chars().any(bad_subject_char) {
        return Err(HostError::Usage(
            "subject contains control characters".into(),
        ));
    }
    if body.len() > MAX_BODY {
        return Err(HostError::Usage(format!(
            "body is over {} KiB",
            MAX_BODY / 1024
        )));
    }
    Ok(json!({
        "v": 3, "id": id, "ts": iso_ms(now_ms), "from": owner_address(from_host),
        "to": [owner_address(to_host)], "thread": id, "reply_to": null, "kind": "message",
        "subject": subject, "body": body, "needs_reply": false, "refs": [],
        "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
        "authority": null, "enc": null
    }))
}

/// A signed T218 "delivered" receipt for message `msg`, from this host's owner: returns its item
/// id (`receipt:<msg>:<recipient>:<seq>`) and its wire bytes (canonical `{rec, sig}`).
///
/// # Errors
/// [`HostError::Relay`] if the record would not be a valid T218 record (e.g. a message id outside
/// 10..40 characters), so it is never pushed.
pub fn receipt_wire(
    key: &SigningKey,
    msg: &str,
    my_host: &str,
    seq: u64,
    at_ms: u64,
) -> Result<(String, Vec<u8>), HostError> {
    let rec = json!({
        "v": 1, "type": "receipt", "msg": msg, "recipient": owner_address(my_host),
        "state": "delivered", "at": iso_ms(at_ms), "seq": seq
    });
    if !receipt_record_valid(&rec) {
        return Err(HostError::Relay(format!(
            "cannot build a valid receipt for message {msg}"
        )));
    }
    let item_id = receipt_item_id(&rec)
        .ok_or_else(|| HostError::Relay("receipt without an item id".into()))?;
    let sig = key.sign_canonical(&rec);
    Ok((item_id, canonical_bytes(&json!({"rec": rec, "sig": sig}))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::names::is_ulid;

    #[test]
    fn ulids_are_valid_and_time_ordered() {
        let a = ulid(1_764_427_167_000);
        let b = ulid(1_764_427_167_001);
        assert!(is_ulid(&a), "{a}");
        assert!(a < b);
        assert_ne!(ulid(5), ulid(5));
    }

    #[test]
    fn drafts_refuse_what_agentmbx_refuses() {
        assert!(draft_envelope("X", "a", "b", "", "x", 0).is_err());
        assert!(draft_envelope("X", "a", "b", "line\nbreak", "x", 0).is_err());
        assert!(draft_envelope("X", "a", "b", &"s".repeat(201), "x", 0).is_err());
        assert!(draft_envelope("X", "a", "b", "ok", &"x".repeat(MAX_BODY + 1), 0).is_err());
        let e = draft_envelope("X", "a", "b", "ok", "body", 0).unwrap();
        assert_eq!(e["to"][0], "owner@b");
    }

    #[test]
    fn receipts_are_valid_t218_records_signed_by_the_host() {
        let k = SigningKey::generate();
        let id = ulid(1_764_427_167_000);
        let (item, wire) = receipt_wire(&k, &id, "desk", 3, 1_764_427_167_000).unwrap();
        assert_eq!(item, format!("receipt:{id}:owner@desk:3"));
        relay_wire::receipt::check_receipt_wire(&wire, &item, &k.public()).unwrap();
    }
}
