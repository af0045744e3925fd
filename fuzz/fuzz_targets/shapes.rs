//! The envelope, receipt, sender-list, rotation and v2 enc-ad checks of `wire` (docs/protocol.md §3,
//! §5), on arbitrary bytes and on arbitrary JSON, including harness-signed records so the checks
//! behind a signature run too.
//!
//! Input: first byte picks a mode, the rest is the wire bytes / JSON.
//! Oracles: no panic; the checks agree with each other (a wire that passes `check_envelope_wire`
//! has no shape error, its id is the item id and it is sealed, and its `meta.external_since` /
//! `external_source` keep the agentmbx T344 rule; a record `receipt_record_valid`
//! accepts has an item id, and a receipt wire built from it and signed by the sender passes
//! `check_receipt_wire`; rotations, sender lists and enc ads signed by the right keys never fail
//! on their signatures; an accepted enc ad is within its size bound, reads back, and is refused
//! when signed by another key).
#![no_main]

use libfuzzer_sys::fuzz_target;
use relay_core::check_wire;
use relay_keyspace::ItemKind;
use relay_wire::canonical::canonical_json;
use relay_wire::enc_ad::{check_ad, is_enc_pub, summarize, AdOwner, AdRefusal, MAX_AD_BYTES};
use relay_wire::envelope::{check_envelope_wire, envelope_recipient_hosts, envelope_shape_error};
use relay_wire::keys::{parse_pubkey, SigningKey};
use relay_wire::receipt::{check_receipt_wire, receipt_item_id, receipt_record_valid};
use relay_wire::records::{parse_rotation, parse_sender_list, RecordError};
use relay_wire::time::{iso_ms, parse_utc_instant};
use serde_json::{json, Value};

fn keys() -> &'static (SigningKey, SigningKey) {
    static K: std::sync::OnceLock<(SigningKey, SigningKey)> = std::sync::OnceLock::new();
    K.get_or_init(|| {
        (
            SigningKey::from_seed(&[1u8; 32]),
            SigningKey::from_seed(&[2u8; 32]),
        )
    })
}

fn envelope(wire: &[u8]) {
    let parsed: Option<Value> = serde_json::from_slice(wire).ok();
    let id = parsed
        .as_ref()
        .and_then(|v| v.get("id"))
        .and_then(Value::as_str)
        .unwrap_or("01ARZ3NDEKTSV4RRFFQ69G5FAV")
        .to_owned();
    let sender = keys().0.public();
    let checked = check_envelope_wire(wire, &id);
    assert_eq!(
        checked.is_ok(),
        check_wire(ItemKind::Envelope, wire, &id, &sender).is_ok()
    );
    if let Ok(v) = &checked {
        assert!(envelope_shape_error(v).is_none());
        external_fields_hold(v);
        assert_eq!(v.get("id").and_then(Value::as_str), Some(id.as_str()));
        assert!(v.get("enc").is_some_and(|e| !e.is_null()));
    }
    if let Some(v) = &parsed {
        let why = envelope_shape_error(v);
        if let Some(w) = &why {
            assert!(!w.is_empty());
            assert!(checked.is_err());
        }
        let hosts = envelope_recipient_hosts(v);
        assert!(hosts.len() <= v.get("to").and_then(Value::as_array).map_or(0, Vec::len));
    }
    assert!(check_wire(ItemKind::Expired, wire, &id, &sender).is_err());
}

/// An accepted envelope keeps the agentmbx T344 rule, checked here independently: a
/// `meta.external_since` only on an `external` origin and a real UTC instant of the T344 form
/// (it prints back to the same instant), an `external_source` only beside it and one of two words.
fn external_fields_hold(v: &Value) {
    let meta = &v["meta"];
    let since = meta.get("external_since");
    if let Some(s) = since {
        assert_eq!(meta.get("origin").and_then(Value::as_str), Some("external"));
        let s = s.as_str().expect("external_since is a string");
        let ms = parse_utc_instant(s).expect("external_since parses");
        assert!(s.len() >= 20 && s.len() <= 24 && s.ends_with('Z'), "{s}");
        if let Ok(ms) = u64::try_from(ms) {
            // toISOString prints the same instant at millisecond precision
            assert_eq!(parse_utc_instant(&iso_ms(ms)), Some(ms as i64));
            assert_eq!(iso_ms(ms)[..19], s[..19]);
        }
    }
    if let Some(src) = meta.get("external_source") {
        assert!(since.is_some());
        assert!(matches!(src.as_str(), Some("declared" | "inherited")));
    }
}

fn receipt_raw(wire: &[u8]) {
    let sender = keys().0.public();
    let parsed: Option<Value> = serde_json::from_slice(wire).ok();
    let id = parsed
        .as_ref()
        .and_then(|v| v.get("rec"))
        .and_then(receipt_item_id)
        .unwrap_or_default();
    let _ = check_receipt_wire(wire, &id, &sender);
    let _ = check_receipt_wire(wire, "", &sender);
}

fn receipt_signed(rec: &Value) {
    let (k, _) = keys();
    let valid = receipt_record_valid(rec);
    let id = receipt_item_id(rec);
    assert_eq!(
        valid,
        id.is_some(),
        "validity and item id disagree for {rec}"
    );
    let wire = canonical_json(&json!({"rec": rec, "sig": k.sign(canonical_json(rec).as_bytes())}));
    let r = check_receipt_wire(wire.as_bytes(), id.as_deref().unwrap_or(""), &k.public());
    if valid {
        assert!(
            r.is_ok(),
            "a valid, correctly signed receipt was refused: {r:?}"
        );
        let other = keys().1.public();
        let r2 = check_receipt_wire(wire.as_bytes(), id.as_deref().unwrap_or(""), &other);
        assert!(r2.is_err(), "a receipt signed by another key was accepted");
    } else {
        assert_eq!(r, Err("bad receipt".to_string()));
    }
}

fn senders(v: &Value, signed: bool) {
    let now = mbx_relay_fuzz::now_ms();
    if !signed {
        // Posted by the key the list names (when it names one), so later checks are reached.
        let owner = v
            .get("list")
            .and_then(|l| l.get("host_pubkey"))
            .and_then(Value::as_str)
            .and_then(parse_pubkey)
            .unwrap_or([0u8; 32]);
        let _ = parse_sender_list(v, now, &owner);
        let _ = parse_sender_list(v, 0, &owner);
        let _ = parse_sender_list(v, u64::MAX, &owner);
        return;
    }
    let (k, _) = keys();
    let mut list = v.clone();
    if let Some(o) = list.as_object_mut() {
        o.insert("host_pubkey".into(), json!(k.public_b64()));
    }
    let sig = k.sign(canonical_json(&list).as_bytes());
    let r = parse_sender_list(&json!({"list": list, "sig": sig}), now, &k.public());
    assert!(
        !matches!(r, Err(RecordError::BadSignature)),
        "a correctly signed list failed its signature check"
    );
    if let Ok((rec, s)) = r {
        assert_eq!(rec.host_pubkey, k.public());
        assert_eq!(rec.canonical, canonical_json(&list));
        assert_eq!(s, sig);
    }
}

fn rotation(v: &Value, signed: bool) {
    if !signed {
        let _ = parse_rotation(v);
        return;
    }
    let (old, new) = keys();
    let mut rec = v.clone();
    if let Some(o) = rec.as_object_mut() {
        o.insert("old_pub".into(), json!(old.public_b64()));
        o.insert("new_pub".into(), json!(new.public_b64()));
    }
    let c = canonical_json(&rec);
    let body = json!({"rotation": {"rec": rec,
        "old_sig": old.sign(c.as_bytes()), "new_sig": new.sign(c.as_bytes())}});
    match parse_rotation(&body) {
        Ok(r) => {
            assert_eq!(r.old_pub, old.public());
            assert_eq!(r.new_pub, new.public());
        }
        Err(e) => assert!(
            !matches!(e, RecordError::BadSignature),
            "correctly signed rotation failed its signature check"
        ),
    }
    // Swapped signatures never verify.
    let swapped = json!({"rotation": {"rec": body["rotation"]["rec"],
        "old_sig": body["rotation"]["new_sig"], "new_sig": body["rotation"]["old_sig"]}});
    assert!(parse_rotation(&swapped).is_err());
}

fn enc_ad(v: &Value, signed: bool) {
    let (k, other) = keys();
    let pk = k.public();
    let owner = AdOwner {
        key: &pk,
        name: "fuzz-host",
    };
    let now = i64::try_from(mbx_relay_fuzz::now_ms()).unwrap_or(i64::MAX);
    if !signed {
        for t in [now, 0, i64::MIN, i64::MAX] {
            if let Ok(ad) = check_ad(v, owner, t) {
                assert!(ad.canonical.len() <= MAX_AD_BYTES);
                assert!(!ad.sig.is_empty());
            }
        }
        return;
    }
    let mut ad = v.clone();
    if let Some(o) = ad.as_object_mut() {
        o.insert("host_pubkey".into(), json!(k.public_b64()));
        o.insert("host".into(), json!("fuzz-host"));
    }
    let body = json!({"ad": ad, "sig": k.sign_canonical(&ad)});
    let r = check_ad(&body, owner, now);
    assert!(
        !matches!(
            r,
            Err(AdRefusal::Unsigned | AdRefusal::WrongPeer | AdRefusal::BadSignature)
        ),
        "a correctly signed ad of the caller was refused as {r:?}"
    );
    if let Ok(checked) = &r {
        assert_eq!(checked.canonical, canonical_json(&ad));
        assert!(checked.canonical.len() <= MAX_AD_BYTES);
        let (back, summary) = summarize(&checked.canonical).expect("an accepted ad reads back");
        assert_eq!(back, ad);
        assert!(is_enc_pub(&summary.enc_pub));
        assert_eq!(summary.host, "fuzz-host");
        let forged = json!({"ad": ad, "sig": other.sign_canonical(&ad)});
        assert_eq!(check_ad(&forged, owner, now), Err(AdRefusal::BadSignature));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let json: Option<Value> = serde_json::from_slice(rest).ok();
    match mode % 9 {
        0 => envelope(rest),
        1 => receipt_raw(rest),
        2 => {
            if let Some(v) = &json {
                receipt_signed(v);
            }
        }
        3 | 4 => {
            if let Some(v) = &json {
                senders(v, mode % 9 == 4);
            }
        }
        5 | 6 => {
            if let Some(v) = &json {
                rotation(v, mode % 9 == 6);
            }
        }
        _ => {
            if let Some(v) = &json {
                enc_ad(v, mode % 9 == 8);
            }
        }
    }
});
