//! The signed records the relay verifies or produces (docs/protocol.md §3, §4): enrolment and
//! encryption-key statements, sender allowlists, key rotations and expiry notices.
//!
//! Parsers return a typed value or a [`RecordError`]; the relay maps `Malformed` and
//! `FutureIat` to 400 and `BadSignature` to 401 (rotation answers 400 for every failure).
//! Error texts name the failed field, never key material.

use super::canonical::{canonical_bytes, canonical_json};
use super::keys::{parse_pubkey, verify, SigningKey};
use super::names::is_host_name;
use super::time::{iso_ms, parse_iso_strict};
use serde_json::{json, Map, Value};

/// Most sender keys one allowlist may hold.
pub const MAX_SENDERS: usize = 1024;
/// How far ahead of the relay clock a sender list's `iat` may be.
pub(crate) const MAX_IAT_AHEAD_MS: u64 = 300_000;
/// Largest canonical(list) the relay stores (docs/protocol.md §3; a list of 1,024 keys is ~47 KB).
pub(crate) const MAX_SENDER_LIST_BYTES: usize = 65_536;

/// Why a signed record was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The record does not have the required shape (the text says which part).
    Malformed(String),
    /// The record's `iat` is too far in the future.
    FutureIat,
    /// A signature does not verify.
    BadSignature,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Malformed(why) => f.write_str(why),
            RecordError::FutureIat => f.write_str("iat is in the future"),
            RecordError::BadSignature => f.write_str("bad signature"),
        }
    }
}

impl std::error::Error for RecordError {}

fn malformed(why: &str) -> RecordError {
    RecordError::Malformed(why.to_string())
}

/// The statement an enrolment signature covers: `{"v":1,"challenge","host","pubkey","owner_fp"}`.
pub fn enrol_statement(challenge: &str, host: &str, pubkey: &str, owner_fp: &str) -> Value {
    json!({"v": 1, "challenge": challenge, "host": host, "pubkey": pubkey, "owner_fp": owner_fp})
}

/// The statement an encryption-key advertisement covers: `{"v":1,"host","enc_pub"}`.
pub fn enc_ad_statement(host: &str, enc_pub: &str) -> Value {
    json!({"v": 1, "host": host, "enc_pub": enc_pub})
}

/// A verified sender allowlist.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderListRecord {
    /// The target host that signed the list.
    pub host_pubkey: [u8; 32],
    /// The accepted sender keys, in the order given (a repeated key once).
    pub senders: Vec<[u8; 32]>,
    /// `iat` in milliseconds since the epoch.
    pub iat_ms: u64,
    /// canonical(list), what the signature covers (for storage and re-serving).
    pub canonical: String,
}

fn object<'a>(v: Option<&'a Value>, what: &str) -> Result<&'a Map<String, Value>, RecordError> {
    v.and_then(Value::as_object)
        .ok_or_else(|| RecordError::Malformed(format!("{what} is not an object")))
}

fn string<'a>(o: &'a Map<String, Value>, key: &str, what: &str) -> Result<&'a str, RecordError> {
    o.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RecordError::Malformed(format!("{what}.{key} is not a string")))
}

fn key_field(o: &Map<String, Value>, key: &str, what: &str) -> Result<[u8; 32], RecordError> {
    parse_pubkey(string(o, key, what)?)
        .ok_or_else(|| RecordError::Malformed(format!("{what}.{key} is not a valid key")))
}

fn expect_header(o: &Map<String, Value>, ty: &str, what: &str) -> Result<(), RecordError> {
    if o.get("v").and_then(Value::as_f64) != Some(1.0) {
        return Err(RecordError::Malformed(format!("{what}.v is not 1")));
    }
    if o.get("type").and_then(Value::as_str) != Some(ty) {
        return Err(RecordError::Malformed(format!("{what}.type is not {ty}")));
    }
    Ok(())
}

fn iat_field(o: &Map<String, Value>, what: &str) -> Result<u64, RecordError> {
    parse_iso_strict(string(o, "iat", what)?)
        .ok_or_else(|| RecordError::Malformed(format!("{what}.iat is not an ISO datetime")))
}

/// Parses and verifies `{"list":{"v":1,"type":"relay-senders","host_pubkey","senders","iat"},"sig"}`
/// posted by `caller` and signed by `host_pubkey`. Checks, in order: shape (Malformed; more
/// than [`MAX_SENDERS`] keys or any invalid key is Malformed), `host_pubkey` is `caller`
/// (Malformed: a host stores only its own list), canonical(list) at most
/// [`MAX_SENDER_LIST_BYTES`] (Malformed), `iat` no more than [`MAX_IAT_AHEAD_MS`] past `now_ms`
/// (FutureIat), signature (BadSignature; also a `sig` that is missing or not a string). Returns the record (senders without repeats, in
/// first-seen order) and its signature.
pub fn parse_sender_list(
    body: &Value,
    now_ms: u64,
    caller: &[u8; 32],
) -> Result<(SenderListRecord, String), RecordError> {
    let outer = object(Some(body), "body")?;
    let list_value = outer.get("list");
    let list = object(list_value, "list")?;
    // Missing or not a string: a signature that does not verify (401), as the reference reads
    // `String(sig ?? "")`; checked last, like any signature.
    let sig = outer.get("sig").and_then(Value::as_str);
    expect_header(list, "relay-senders", "list")?;
    let host_pubkey = key_field(list, "host_pubkey", "list")?;
    let entries = list
        .get("senders")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("list.senders is not an array"))?;
    if entries.len() > MAX_SENDERS {
        return Err(RecordError::Malformed(format!(
            "list.senders has more than {MAX_SENDERS} keys"
        )));
    }
    let mut senders = Vec::with_capacity(entries.len());
    for e in entries {
        let s = e
            .as_str()
            .and_then(parse_pubkey)
            .ok_or_else(|| malformed("list.senders holds an invalid key"))?;
        if !senders.contains(&s) {
            senders.push(s);
        }
    }
    let iat_ms = iat_field(list, "list")?;
    if host_pubkey != *caller {
        return Err(malformed("list.host_pubkey is not the caller's key"));
    }
    let list_value = list_value.ok_or_else(|| malformed("list is not an object"))?;
    let canonical = canonical_json(list_value);
    if canonical.len() > MAX_SENDER_LIST_BYTES {
        return Err(RecordError::Malformed(format!(
            "canonical list over {MAX_SENDER_LIST_BYTES} bytes"
        )));
    }
    if iat_ms > now_ms.saturating_add(MAX_IAT_AHEAD_MS) {
        return Err(RecordError::FutureIat);
    }
    let sig = sig.ok_or(RecordError::BadSignature)?;
    if !verify(&host_pubkey, canonical.as_bytes(), sig) {
        return Err(RecordError::BadSignature);
    }
    let record = SenderListRecord {
        host_pubkey,
        senders,
        iat_ms,
        canonical,
    };
    Ok((record, sig.to_string()))
}

/// A verified key rotation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    /// The host name both keys claim.
    pub host: String,
    /// The key being retired.
    pub old_pub: [u8; 32],
    /// The key taking over.
    pub new_pub: [u8; 32],
    /// The new key's encryption public key (protocol base64 form).
    pub new_enc_pub: String,
    /// The record's `iat`, as sent.
    pub iat: String,
}

/// Why the relay refuses the rotation record of an enrolled key (docs/protocol.md §3 "Key
/// rotation"), in the order [`check_rotation`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RotationRefusal {
    /// A `rec` field, `old_sig` or `new_sig` missing or of the wrong type.
    NotARecord,
    /// `rec.old_pub` is not the key being rotated away from.
    OtherOldKey,
    /// `rec.new_pub` is `rec.old_pub`.
    SameKey,
    /// `old_sig` does not verify.
    NotSignedByOld,
    /// `new_sig` does not verify (or `rec.new_pub` is not a key).
    NotSignedByNew,
    /// `rec.host` is not the old key's name.
    OtherHost,
}

impl RotationRefusal {
    /// The reference relay's text (older hosts match on it).
    pub const fn text(self) -> &'static str {
        match self {
            RotationRefusal::NotARecord => "not a rotation record",
            RotationRefusal::OtherOldKey => "rotation does not start from the pinned host key",
            RotationRefusal::SameKey => "rotation keeps the same host key",
            RotationRefusal::NotSignedByOld => "rotation is not signed by the pinned host key",
            RotationRefusal::NotSignedByNew => "rotation is not signed by the new host key",
            RotationRefusal::OtherHost => "rotation names another host",
        }
    }
}

/// `rotation.rec.old_pub` when it is a key: the enrolment a rotation is checked against.
pub fn rotation_old_pub(rotation: Option<&Value>) -> Option<[u8; 32]> {
    rotation?
        .get("rec")?
        .get("old_pub")?
        .as_str()
        .and_then(parse_pubkey)
}

/// Checks `rotation` (`{"rec":{"v":1,"type":"host-rotation","host","old_pub","new_pub",
/// "new_enc_pub","iat"},"old_sig","new_sig"}`) against the key it rotates away from (`pinned`)
/// and that key's name, in the reference relay's order: every field present with its type
/// (only that: `new_enc_pub` and `iat` are not read further), `rec.old_pub` is `pinned`, the
/// keys differ, `old_sig` then `new_sig` over canonical(rec), `rec.host` is exactly `name`.
///
/// # Errors
/// The first [`RotationRefusal`] met.
pub fn check_rotation(
    rotation: &Value,
    pinned: &[u8; 32],
    name: &str,
) -> Result<Rotation, RotationRefusal> {
    let rec_value = rotation.get("rec").ok_or(RotationRefusal::NotARecord)?;
    fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
        v.get(key).and_then(Value::as_str)
    }
    let fields = (
        rec_value.get("v").and_then(Value::as_f64) == Some(1.0),
        text(rec_value, "type") == Some("host-rotation"),
        text(rec_value, "host"),
        text(rec_value, "iat"),
        text(rec_value, "old_pub"),
        text(rec_value, "new_pub"),
        text(rec_value, "new_enc_pub"),
        text(rotation, "old_sig"),
        text(rotation, "new_sig"),
    );
    let (
        true,
        true,
        Some(host),
        Some(iat),
        Some(old_pub),
        Some(new_pub),
        Some(enc),
        Some(old_sig),
        Some(new_sig),
    ) = fields
    else {
        return Err(RotationRefusal::NotARecord);
    };
    if parse_pubkey(old_pub).as_ref() != Some(pinned) {
        return Err(RotationRefusal::OtherOldKey);
    }
    if new_pub == old_pub {
        return Err(RotationRefusal::SameKey);
    }
    let payload = canonical_bytes(rec_value);
    if !verify(pinned, &payload, old_sig) {
        return Err(RotationRefusal::NotSignedByOld);
    }
    let new_key = parse_pubkey(new_pub)
        .filter(|k| verify(k, &payload, new_sig))
        .ok_or(RotationRefusal::NotSignedByNew)?;
    if host != name {
        return Err(RotationRefusal::OtherHost);
    }
    Ok(Rotation {
        host: host.to_string(),
        old_pub: *pinned,
        new_pub: new_key,
        new_enc_pub: enc.to_string(),
        iat: iat.to_string(),
    })
}

/// Parses and verifies `{"rotation":{"rec":{"v":1,"type":"host-rotation","host","old_pub",
/// "new_pub","new_enc_pub","iat"},"old_sig","new_sig"}}` as a host reads a peer's record,
/// stricter than the relay: `host` a host name, `new_enc_pub` a key and `iat` a date, then
/// [`check_rotation`] against the record's own old key and name.
pub fn parse_rotation(body: &Value) -> Result<Rotation, RecordError> {
    let outer = object(Some(body), "body")?;
    let rotation_value = outer
        .get("rotation")
        .ok_or_else(|| malformed("rotation is not an object"))?;
    let rotation = object(Some(rotation_value), "rotation")?;
    let rec = object(rotation.get("rec"), "rotation.rec")?;
    string(rotation, "old_sig", "rotation")?;
    string(rotation, "new_sig", "rotation")?;
    expect_header(rec, "host-rotation", "rec")?;
    let host = string(rec, "host", "rec")?;
    if !is_host_name(host) {
        return Err(malformed("rec.host is not a host name"));
    }
    let old_pub = key_field(rec, "old_pub", "rec")?;
    key_field(rec, "new_pub", "rec")?;
    key_field(rec, "new_enc_pub", "rec")?;
    iat_field(rec, "rec")?;
    check_rotation(rotation_value, &old_pub, host).map_err(|r| match r {
        RotationRefusal::NotSignedByOld | RotationRefusal::NotSignedByNew => {
            RecordError::BadSignature
        }
        other => malformed(other.text()),
    })
}

/// The notice body: `{"v":1,"type":"relay-expired","item_id","target_pubkey","accepted_at","expired_at"}`.
pub(crate) fn expiry_notice(
    item_id: &str,
    target_pubkey: &str,
    accepted_at_ms: u64,
    expired_at_ms: u64,
) -> Value {
    json!({
        "v": 1,
        "type": "relay-expired",
        "item_id": item_id,
        "target_pubkey": target_pubkey,
        "accepted_at": iso_ms(accepted_at_ms),
        "expired_at": iso_ms(expired_at_ms),
    })
}

/// The wire bytes of an expiry notice: canonical(`{"notice":…,"sig"}`) signed by the relay key.
pub fn expiry_notice_wire(
    key: &SigningKey,
    item_id: &str,
    target_pubkey: &str,
    accepted_at_ms: u64,
    expired_at_ms: u64,
) -> Vec<u8> {
    let notice = expiry_notice(item_id, target_pubkey, accepted_at_ms, expired_at_ms);
    let sig = key.sign_canonical(&notice);
    canonical_bytes(&json!({"notice": notice, "sig": sig}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{b64, verify_canonical};

    const NOW: u64 = 1_795_960_800_000; // 2026-11-29T14:00:00.000Z

    fn host() -> SigningKey {
        SigningKey::from_seed(&[1u8; 32])
    }

    fn list_with(senders: Value, iat: &str) -> Value {
        json!({"v": 1, "type": "relay-senders", "host_pubkey": host().public_b64(), "senders": senders, "iat": iat})
    }

    fn signed(list: Value) -> Value {
        let sig = host().sign_canonical(&list);
        json!({"list": list, "sig": sig})
    }

    fn sender_err(body: &Value) -> RecordError {
        match parse_sender_list(body, NOW, &host().public()) {
            Ok(_) => panic!("expected an error for {body}"),
            Err(e) => e,
        }
    }

    #[test]
    fn sender_list_ok() {
        let s = b64(&[2u8; 32]);
        let body = signed(list_with(json!([s]), "2026-11-29T14:05:00.000Z"));
        let (rec, sig) = parse_sender_list(&body, NOW, &host().public()).expect("valid list");
        assert_eq!(rec.host_pubkey, host().public());
        assert_eq!(rec.senders, vec![[2u8; 32]]);
        assert_eq!(rec.iat_ms, NOW + 300_000);
        assert_eq!(rec.canonical, canonical_json(&body["list"]));
        assert_eq!(sig, body["sig"].as_str().unwrap_or_default());
        let empty = signed(list_with(json!([]), "2026-11-29T14:00:00.000Z"));
        assert!(parse_sender_list(&empty, NOW, &host().public()).is_ok());
        let full = signed(list_with(
            json!(vec![s.clone(); MAX_SENDERS]),
            "2026-11-29T14:00:00.000Z",
        ));
        assert!(parse_sender_list(&full, NOW, &host().public()).is_ok());
    }

    #[test]
    fn sender_list_errors() {
        let s = b64(&[2u8; 32]);
        let iat = "2026-11-29T14:00:00.000Z";
        let malformed = |e: RecordError| matches!(e, RecordError::Malformed(_));
        assert!(malformed(sender_err(&json!([]))));
        assert!(malformed(sender_err(&json!({"sig": "x"}))));
        // A missing or non-string `sig` is a signature that does not verify, checked last.
        assert_eq!(
            sender_err(&json!({"list": list_with(json!([s]), iat)})),
            RecordError::BadSignature
        );
        let mut body = signed(list_with(json!([s]), iat));
        body["sig"] = json!(5);
        assert_eq!(sender_err(&body), RecordError::BadSignature);
        let unsigned_future = json!({"list": list_with(json!([s]), "2026-11-29T14:05:00.001Z")});
        assert_eq!(sender_err(&unsigned_future), RecordError::FutureIat);
        let mut l = list_with(json!([s]), iat);
        l["v"] = json!(2);
        assert!(malformed(sender_err(&signed(l))));
        let mut l = list_with(json!([s]), iat);
        l["type"] = json!("senders");
        assert!(malformed(sender_err(&signed(l))));
        let mut l = list_with(json!([s]), iat);
        l["host_pubkey"] = json!("short");
        assert!(malformed(sender_err(&signed(l))));
        assert!(malformed(sender_err(&signed(list_with(json!(s), iat)))));
        assert!(malformed(sender_err(&signed(list_with(
            json!([s, "bad"]),
            iat
        )))));
        assert!(malformed(sender_err(&signed(list_with(
            json!([s, 5]),
            iat
        )))));
        assert!(malformed(sender_err(&signed(list_with(
            json!(vec![s.clone(); MAX_SENDERS + 1]),
            iat
        )))));
        assert!(malformed(sender_err(&signed(list_with(
            json!([s]),
            "2026-11-29"
        )))));
        assert_eq!(
            sender_err(&signed(list_with(json!([s]), "2026-11-29T14:05:00.001Z"))),
            RecordError::FutureIat
        );
        let mut body = signed(list_with(json!([s]), iat));
        body["list"]["senders"] = json!([]);
        assert_eq!(sender_err(&body), RecordError::BadSignature);
        let mut body = signed(list_with(json!([s]), iat));
        body["sig"] = json!("not base64");
        assert_eq!(sender_err(&body), RecordError::BadSignature);
    }

    /// A host stores only its own list: one validly signed by another key is malformed for
    /// this caller (and fine for its owner).
    #[test]
    fn sender_list_of_another_key_is_malformed_even_when_validly_signed() {
        let other = SigningKey::from_seed(&[7u8; 32]);
        let list = json!({"v": 1, "type": "relay-senders", "host_pubkey": other.public_b64(),
            "senders": [b64(&[2u8; 32])], "iat": "2026-11-29T14:00:00.000Z"});
        let body = json!({"list": list, "sig": other.sign_canonical(&list)});
        assert!(parse_sender_list(&body, NOW, &other.public()).is_ok());
        assert!(matches!(
            parse_sender_list(&body, NOW, &host().public()),
            Err(RecordError::Malformed(_))
        ));
    }

    /// canonical(list) may be 65,536 bytes, not one more (extra signed fields count).
    #[test]
    fn sender_list_over_64_kib_canonical_is_malformed() {
        let sized = |pad: usize| {
            let mut l = list_with(json!([b64(&[2u8; 32])]), "2026-11-29T14:00:00.000Z");
            l["pad"] = json!("");
            let base = canonical_json(&l).len();
            l["pad"] = json!("x".repeat(pad - base));
            assert_eq!(canonical_json(&l).len(), pad);
            signed(l)
        };
        assert!(parse_sender_list(&sized(MAX_SENDER_LIST_BYTES), NOW, &host().public()).is_ok());
        assert!(matches!(
            sender_err(&sized(MAX_SENDER_LIST_BYTES + 1)),
            RecordError::Malformed(_)
        ));
    }

    /// A key listed twice is kept once, in first-seen order; the canonical record is as signed.
    #[test]
    fn sender_list_repeats_are_kept_once() {
        let (a, b) = (b64(&[2u8; 32]), b64(&[3u8; 32]));
        let body = signed(list_with(json!([a, b, a, b]), "2026-11-29T14:00:00.000Z"));
        let (rec, _) = parse_sender_list(&body, NOW, &host().public()).expect("valid list");
        assert_eq!(rec.senders, vec![[2u8; 32], [3u8; 32]]);
        assert_eq!(rec.canonical, canonical_json(&body["list"]));
    }

    fn rotation(old: &SigningKey, new: &SigningKey) -> Value {
        let rec = json!({"v": 1, "type": "host-rotation", "host": "laptop", "old_pub": old.public_b64(),
            "new_pub": new.public_b64(), "new_enc_pub": b64(&[9u8; 32]), "iat": "2026-11-29T14:00:00.000Z"});
        json!({"rotation": {"rec": rec, "old_sig": old.sign_canonical(&rec), "new_sig": new.sign_canonical(&rec)}})
    }

    fn resign(mut body: Value, old: &SigningKey, new: &SigningKey) -> Value {
        let rec = body["rotation"]["rec"].clone();
        body["rotation"]["old_sig"] = json!(old.sign_canonical(&rec));
        body["rotation"]["new_sig"] = json!(new.sign_canonical(&rec));
        body
    }

    #[test]
    fn rotation_ok_and_errors() {
        let (old, new) = (
            SigningKey::from_seed(&[1u8; 32]),
            SigningKey::from_seed(&[2u8; 32]),
        );
        let r = parse_rotation(&rotation(&old, &new)).expect("valid rotation");
        assert_eq!(r.host, "laptop");
        assert_eq!(r.old_pub, old.public());
        assert_eq!(r.new_pub, new.public());
        assert_eq!(r.new_enc_pub, b64(&[9u8; 32]));
        assert_eq!(r.iat, "2026-11-29T14:00:00.000Z");

        let malformed = |b: &Value| matches!(parse_rotation(b), Err(RecordError::Malformed(_)));
        assert!(malformed(&json!(null)));
        assert!(malformed(&json!({"rotation": 1})));
        assert!(malformed(
            &json!({"rotation": {"old_sig": "a", "new_sig": "b"}})
        ));
        let mut b = rotation(&old, &new);
        b["rotation"]["old_sig"] = json!(1);
        assert!(malformed(&b));
        for (field, value) in [
            ("v", json!(2)),
            ("type", json!("rotation")),
            ("host", json!("bad host")),
            ("old_pub", json!("x")),
            ("new_pub", json!(null)),
            ("new_enc_pub", json!("short")),
            ("iat", json!("yesterday")),
        ] {
            let mut b = rotation(&old, &new);
            b["rotation"]["rec"][field] = value;
            assert!(malformed(&resign(b, &old, &new)), "{field}");
        }
        assert!(malformed(&rotation(&old, &old)));

        let mut b = rotation(&old, &new);
        b["rotation"]["new_sig"] = b["rotation"]["old_sig"].clone();
        assert_eq!(parse_rotation(&b), Err(RecordError::BadSignature));
        let mut b = rotation(&old, &new);
        b["rotation"]["rec"]["host"] = json!("desk");
        assert_eq!(parse_rotation(&b), Err(RecordError::BadSignature));
    }

    /// The relay's order: shape (strings only), old key, same key, old signature, new
    /// signature, name; each with the reference's text.
    #[test]
    fn check_rotation_refuses_in_the_reference_order() {
        let (old, new) = (
            SigningKey::from_seed(&[1u8; 32]),
            SigningKey::from_seed(&[2u8; 32]),
        );
        let check = |b: &Value, name: &str| check_rotation(&b["rotation"], &old.public(), name);
        let ok = check(&rotation(&old, &new), "laptop").expect("valid rotation");
        assert_eq!((ok.old_pub, ok.new_pub), (old.public(), new.public()));
        // Only the types are checked: any string is a `new_enc_pub` or an `iat` here.
        let mut b = rotation(&old, &new);
        b["rotation"]["rec"]["new_enc_pub"] = json!("short");
        b["rotation"]["rec"]["iat"] = json!("yesterday");
        assert!(check(&resign(b, &old, &new), "laptop").is_ok());
        use RotationRefusal::*;
        for field in [
            "v",
            "type",
            "host",
            "iat",
            "old_pub",
            "new_pub",
            "new_enc_pub",
        ] {
            let mut b = rotation(&old, &new);
            b["rotation"]["rec"].as_object_mut().unwrap().remove(field);
            assert_eq!(
                check(&resign(b, &old, &new), "laptop"),
                Err(NotARecord),
                "{field}"
            );
        }
        for sig in ["old_sig", "new_sig"] {
            let mut b = rotation(&old, &new);
            b["rotation"][sig] = json!(5);
            assert_eq!(check(&b, "laptop"), Err(NotARecord), "{sig}");
        }
        assert_eq!(check(&json!({"rotation": {}}), "laptop"), Err(NotARecord));
        let other = SigningKey::from_seed(&[3u8; 32]);
        assert_eq!(check(&rotation(&other, &new), "laptop"), Err(OtherOldKey));
        assert_eq!(check(&rotation(&old, &old), "laptop"), Err(SameKey));
        let mut b = rotation(&old, &new);
        b["rotation"]["old_sig"] = b["rotation"]["new_sig"].clone();
        assert_eq!(check(&b, "laptop"), Err(NotSignedByOld));
        let mut b = rotation(&old, &new);
        b["rotation"]["new_sig"] = b["rotation"]["old_sig"].clone();
        assert_eq!(check(&b, "laptop"), Err(NotSignedByNew));
        let mut b = rotation(&old, &new);
        b["rotation"]["rec"]["new_pub"] = json!("short");
        assert_eq!(check(&resign(b, &old, &new), "laptop"), Err(NotSignedByNew));
        // The name is compared exactly, after both signatures.
        assert_eq!(check(&rotation(&old, &new), "Laptop"), Err(OtherHost));
        let mut b = rotation(&old, &new);
        b["rotation"]["new_sig"] = b["rotation"]["old_sig"].clone();
        assert_eq!(check(&b, "desk"), Err(NotSignedByNew));
        assert_eq!(
            rotation_old_pub(Some(&rotation(&old, &new)["rotation"])),
            Some(old.public())
        );
        assert_eq!(rotation_old_pub(None), None);
        assert_eq!(
            rotation_old_pub(Some(&json!({"rec": {"old_pub": 1}}))),
            None
        );
    }

    #[test]
    fn rotation_refusal_texts_are_the_references() {
        let texts = [
            (RotationRefusal::NotARecord, "not a rotation record"),
            (
                RotationRefusal::OtherOldKey,
                "rotation does not start from the pinned host key",
            ),
            (RotationRefusal::SameKey, "rotation keeps the same host key"),
            (
                RotationRefusal::NotSignedByOld,
                "rotation is not signed by the pinned host key",
            ),
            (
                RotationRefusal::NotSignedByNew,
                "rotation is not signed by the new host key",
            ),
            (RotationRefusal::OtherHost, "rotation names another host"),
        ];
        for (r, t) in texts {
            assert_eq!(r.text(), t);
        }
    }

    #[test]
    fn statements_and_notice() {
        assert_eq!(
            canonical_json(&enrol_statement("c", "h", "p", "")),
            "{\"challenge\":\"c\",\"host\":\"h\",\"owner_fp\":\"\",\"pubkey\":\"p\",\"v\":1}"
        );
        assert_eq!(
            canonical_json(&enc_ad_statement("h", "e")),
            "{\"enc_pub\":\"e\",\"host\":\"h\",\"v\":1}"
        );
        let key = SigningKey::from_seed(&[4u8; 32]);
        let wire = expiry_notice_wire(&key, "I", "T", 0, 1000);
        let v: Value = serde_json::from_slice(&wire).expect("notice is JSON");
        assert_eq!(
            canonical_json(&v["notice"]),
            "{\"accepted_at\":\"1970-01-01T00:00:00.000Z\",\"expired_at\":\"1970-01-01T00:00:01.000Z\",\"item_id\":\"I\",\"target_pubkey\":\"T\",\"type\":\"relay-expired\",\"v\":1}"
        );
        assert!(verify_canonical(
            &key.public(),
            &v["notice"],
            v["sig"].as_str().unwrap_or_default()
        ));
        assert_eq!(canonical_bytes(&v), wire);
    }

    #[test]
    fn error_texts() {
        assert_eq!(RecordError::FutureIat.to_string(), "iat is in the future");
        assert_eq!(RecordError::BadSignature.to_string(), "bad signature");
        assert_eq!(malformed("x").to_string(), "x");
    }
}
