//! Byte-for-byte agreement with the agentmbx reference: every entry of every section of
//! `tests/fixtures/wire-vectors.json` (canonical JSON, keys and fingerprints, signatures, hops,
//! envelope shape reasons, receipt validity) is checked, and each section must be non-empty.

use relay_wire::accept::{accept_statement, AcceptTarget};
use relay_wire::canonical::canonical_json;
use relay_wire::envelope::{check_envelope_wire, envelope_shape_error};
use relay_wire::hop::{hop_payload, sign_hop, signed_path, verify_hop};
use relay_wire::keys::{fingerprint, parse_pubkey, verify_canonical, SigningKey};
use relay_wire::receipt::{check_receipt_wire, receipt_item_id, receipt_record_valid};
use relay_wire::records::{
    enc_ad_statement, enrol_statement, expiry_notice_wire, parse_rotation, parse_sender_list,
};
use relay_wire::time::parse_iso_strict;
use serde_json::{json, Value};

const FIXTURE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/wire-vectors.json"
));

fn fixture() -> Value {
    serde_json::from_str(FIXTURE).expect("fixture is JSON")
}

fn section<'a>(f: &'a Value, name: &str) -> &'a Vec<Value> {
    let entries = f[name]
        .as_array()
        .unwrap_or_else(|| panic!("section {name} is an array"));
    assert!(!entries.is_empty(), "section {name} is empty");
    entries
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key]
        .as_str()
        .unwrap_or_else(|| panic!("{key} is a string in {v}"))
}

fn key_of(seed: &str) -> SigningKey {
    SigningKey::from_seed_b64(seed).expect("fixture seed")
}

fn pk(b64: &str) -> [u8; 32] {
    parse_pubkey(b64).unwrap_or_else(|| panic!("{b64} is a valid public key"))
}

fn ms(iso: &str) -> u64 {
    parse_iso_strict(iso).unwrap_or_else(|| panic!("{iso} is an ISO datetime"))
}

#[test]
fn canonical_vectors() {
    let f = fixture();
    let mut n = 0;
    for e in section(&f, "canonical") {
        let input: Value = serde_json::from_str(s(e, "input")).expect("input is JSON");
        assert_eq!(
            canonical_json(&input),
            s(e, "canonical"),
            "input {}",
            s(e, "input")
        );
        n += 1;
    }
    assert_eq!(n, f["canonical"].as_array().map_or(0, Vec::len));
}

#[test]
fn key_vectors() {
    let f = fixture();
    let mut n = 0;
    for e in section(&f, "keys") {
        let key = key_of(s(e, "seed"));
        assert_eq!(key.public_b64(), s(e, "public_key"));
        assert_eq!(key.seed_b64(), s(e, "seed"));
        assert_eq!(fingerprint(&key.public()), s(e, "fingerprint"));
        assert_eq!(pk(s(e, "public_key")), key.public());
        assert_eq!(
            format!("{key:?}"),
            format!("SigningKey({})", s(e, "fingerprint"))
        );
        n += 1;
    }
    assert_eq!(n, 3);
}

/// The seed of the fixture key whose public key is `public`.
fn seed_for(f: &Value, public: &str) -> String {
    section(f, "keys")
        .iter()
        .find(|k| s(k, "public_key") == public)
        .map(|k| s(k, "seed").to_string())
        .unwrap_or_else(|| panic!("no fixture seed for {public}"))
}

#[test]
fn signature_vectors() {
    let f = fixture();
    let mut n = 0;
    let mut kinds = Vec::new();
    for e in section(&f, "signatures") {
        let what = s(e, "what");
        let obj = &e["object"];
        let key = key_of(s(e, "signer_seed"));
        let sig = s(e, "signature");
        assert_eq!(canonical_json(obj), s(e, "canonical"), "{what}");
        assert_eq!(key.sign_canonical(obj), sig, "{what}");
        assert!(verify_canonical(&key.public(), obj, sig), "{what}");
        let mut tampered = obj.clone();
        tampered["v"] = json!(99);
        assert!(!verify_canonical(&key.public(), &tampered, sig), "{what}");

        // The record builders and parsers agree with the reference object.
        match what {
            "enrol" => assert_eq!(
                &enrol_statement(
                    s(obj, "challenge"),
                    s(obj, "host"),
                    s(obj, "pubkey"),
                    s(obj, "owner_fp")
                ),
                obj
            ),
            "enc-ad" => assert_eq!(&enc_ad_statement(s(obj, "host"), s(obj, "enc_pub")), obj),
            "relay-accept" => {
                let targets: Vec<AcceptTarget> = obj["targets"]
                    .as_array()
                    .expect("targets")
                    .iter()
                    .map(|t| AcceptTarget {
                        host_pubkey: s(t, "host_pubkey").to_string(),
                        seq: t["seq"].as_u64().expect("seq"),
                        wire_hash: s(t, "wire_hash").to_string(),
                    })
                    .collect();
                let built = accept_statement(
                    s(obj, "relay_pubkey"),
                    s(obj, "epoch"),
                    s(obj, "sender_pubkey"),
                    s(obj, "item_id"),
                    &targets,
                    ms(s(obj, "at")),
                );
                assert_eq!(&built, obj);
                assert_eq!(key.public_b64(), s(obj, "relay_pubkey"));
            }
            "relay-senders" => {
                let body = json!({"list": obj, "sig": sig});
                let (rec, got_sig) =
                    parse_sender_list(&body, ms(s(obj, "iat")), &key.public()).expect("valid list");
                assert_eq!(got_sig, sig);
                assert_eq!(rec.canonical, s(e, "canonical"));
                assert_eq!(rec.host_pubkey, key.public());
                assert_eq!(
                    rec.senders.len(),
                    obj["senders"].as_array().map_or(0, Vec::len)
                );
            }
            "host-rotation" => {
                assert_eq!(key.public_b64(), s(obj, "old_pub"));
                let new_key = key_of(&seed_for(&f, s(obj, "new_pub")));
                let body = json!({"rotation": {"rec": obj, "old_sig": sig, "new_sig": new_key.sign_canonical(obj)}});
                let rot = parse_rotation(&body).expect("valid rotation");
                assert_eq!(rot.old_pub, key.public());
                assert_eq!(rot.new_pub, new_key.public());
                assert_eq!(rot.host, s(obj, "host"));
                assert_eq!(rot.new_enc_pub, s(obj, "new_enc_pub"));
                assert_eq!(rot.iat, s(obj, "iat"));
            }
            "receipt" => {
                assert!(receipt_record_valid(obj));
                let id = receipt_item_id(obj).expect("item id");
                assert_eq!(
                    id,
                    format!(
                        "receipt:{}:{}:{}",
                        s(obj, "msg"),
                        s(obj, "recipient"),
                        obj["seq"]
                    )
                );
                let wire = serde_json::to_vec(&json!({"rec": obj, "sig": sig})).expect("wire");
                assert_eq!(check_receipt_wire(&wire, &id, &key.public()), Ok(()));
            }
            "relay-expired" => {
                let wire = expiry_notice_wire(
                    &key,
                    s(obj, "item_id"),
                    s(obj, "target_pubkey"),
                    ms(s(obj, "accepted_at")),
                    ms(s(obj, "expired_at")),
                );
                let want = format!("{{\"notice\":{},\"sig\":\"{}\"}}", s(e, "canonical"), sig);
                assert_eq!(String::from_utf8(wire).expect("utf-8"), want);
            }
            other => panic!("unknown signature vector kind {other}"),
        }
        kinds.push(what.to_string());
        n += 1;
    }
    assert_eq!(n, 7);
    for want in [
        "enrol",
        "enc-ad",
        "relay-accept",
        "relay-senders",
        "host-rotation",
        "receipt",
        "relay-expired",
    ] {
        assert!(kinds.iter().any(|k| k == want), "fixture lacks {want}");
    }
}

#[test]
fn hop_vectors() {
    let f = fixture();
    let mut n = 0;
    for e in section(&f, "hops") {
        let key = key_of(s(e, "signer_seed"));
        let (method, path, ts, body) = (
            s(e, "method"),
            s(e, "signed_path"),
            s(e, "ts"),
            s(e, "body"),
        );
        assert_eq!(hop_payload(method, path, ts, body), s(e, "signed_payload"));
        assert_eq!(sign_hop(&key, method, path, ts, body), s(e, "x_mbx_sig"));
        assert!(verify_hop(
            &key.public(),
            method,
            path,
            ts,
            body,
            s(e, "x_mbx_sig")
        ));
        assert!(!verify_hop(
            &key.public(),
            method,
            path,
            ts,
            &format!("{body} "),
            s(e, "x_mbx_sig")
        ));
        let (bare, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        assert_eq!(signed_path(bare, query), path);
        n += 1;
    }
    assert_eq!(n, 4);
}

/// The envelope of a shape vector; the fixture leaves out the two oversized ones and describes
/// them ("built from the valid sealed case with the change its name says").
fn shape_envelope(entries: &[Value], e: &Value) -> Value {
    if !e["envelope"].is_null() {
        return e["envelope"].clone();
    }
    let base = entries
        .iter()
        .find(|x| s(x, "name") == "valid sealed")
        .map(|x| x["envelope"].clone())
        .expect("fixture has the valid sealed case");
    let name = s(e, "name");
    let size = |prefix: &str| -> Option<usize> {
        name.strip_prefix(prefix)?
            .strip_suffix(" bytes")?
            .parse()
            .ok()
    };
    let mut env = base;
    if let Some(n) = size("sealed body ") {
        env["body"] = json!("A".repeat(n));
    } else if let Some(n) = size("plain body ") {
        env["enc"] = Value::Null;
        env["body"] = json!("a".repeat(n));
    } else {
        panic!("cannot build envelope for {name}");
    }
    env
}

#[test]
fn envelope_shape_vectors() {
    let f = fixture();
    let entries = section(&f, "envelope_shape");
    let mut n = 0;
    let mut valid = 0;
    for e in entries {
        let name = s(e, "name");
        let env = shape_envelope(entries, e);
        let expected = e["expected"].as_str();
        assert_eq!(
            envelope_shape_error(&env).as_deref(),
            expected,
            "vector {name:?}"
        );

        let wire = serde_json::to_vec(&env).expect("wire");
        let id = env
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("01KB5Z2X3Y4Z5A6B7C8D9E0F1G");
        let full = check_envelope_wire(&wire, id);
        match expected {
            Some(why) => assert_eq!(full.err(), Some(format!("bad envelope: {why}")), "{name:?}"),
            None if env["enc"].is_null() => {
                assert_eq!(
                    full.err().as_deref(),
                    Some("envelope body is not sealed"),
                    "{name:?}"
                )
            }
            None => {
                assert_eq!(full.as_ref().ok(), Some(&env), "{name:?}");
                valid += 1;
            }
        }
        n += 1;
    }
    assert_eq!(n, 50);
    assert!(valid > 0);
}

#[test]
fn receipt_record_vectors() {
    let f = fixture();
    let key = key_of(s(&section(&f, "keys")[0], "seed"));
    let mut n = 0;
    let mut valid = 0;
    for e in section(&f, "receipt_records") {
        let rec = &e["record"];
        let want = e["valid"].as_bool().expect("valid is a bool");
        assert_eq!(receipt_record_valid(rec), want, "vector {:?}", s(e, "name"));
        assert_eq!(
            receipt_item_id(rec).is_some(),
            want,
            "vector {:?}",
            s(e, "name")
        );
        // the same verdict through the full wire check
        let wire =
            serde_json::to_vec(&json!({"rec": rec, "sig": key.sign_canonical(rec)})).expect("wire");
        let id = receipt_item_id(rec).unwrap_or_else(|| "receipt:x".to_string());
        let got = check_receipt_wire(&wire, &id, &key.public());
        if want {
            assert_eq!(got, Ok(()), "{:?}", s(e, "name"));
            valid += 1;
        } else {
            assert_eq!(
                got.err().as_deref(),
                Some("bad receipt"),
                "{:?}",
                s(e, "name")
            );
        }
        n += 1;
    }
    assert_eq!(n, 16);
    assert!(valid > 0 && valid < n);
}
