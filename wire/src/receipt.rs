//! The receipt check the relay applies to `receipt` wire bytes (docs/protocol.md §5).
//!
//! A receipt is `{"rec","sig"}` where `rec` is a strict record (no other keys):
//! `{"v":1,"type":"receipt","msg"(10..40 chars),"recipient"("owner@host" | "name@host"),
//! "state"(delivered|notified|read|acked),"at"(strict ISO datetime),"note"?(≤500 chars),
//! "did"?(≤200 chars),"seq"(positive integer)}`. Character counts are UTF-16 code units, like
//! JavaScript; `seq` is any positive integral number, printed in the item id like JavaScript.

use super::canonical::js_number;
use super::envelope::js_len;
use super::keys::verify_canonical;
use super::names::{is_host_name, is_local_name};
use super::time::parse_iso_strict;
use serde_json::Value;

const STATES: [&str; 4] = ["delivered", "notified", "read", "acked"];
const KEYS: [&str; 9] = [
    "v",
    "type",
    "msg",
    "recipient",
    "state",
    "at",
    "note",
    "did",
    "seq",
];

/// `owner@host` or `name@host` with exactly one `@`, a local name and a host name.
fn is_recipient(s: &str) -> bool {
    match s.split_once('@') {
        Some((name, host)) => (name == "owner" || is_local_name(name)) && is_host_name(host),
        None => false,
    }
}

fn optional_str_within(v: Option<&Value>, max_chars: usize) -> bool {
    match v {
        None => true,
        Some(Value::String(s)) => js_len(s) <= max_chars,
        Some(_) => false,
    }
}

/// Whether `rec` is a well-formed receipt record (see module doc).
pub fn receipt_record_valid(rec: &Value) -> bool {
    let Some(r) = rec.as_object() else {
        return false;
    };
    let s = |k: &str| r.get(k).and_then(Value::as_str);
    r.keys().all(|k| KEYS.contains(&k.as_str()))
        && r.get("v").and_then(Value::as_f64) == Some(1.0)
        && s("type") == Some("receipt")
        && s("msg").is_some_and(|m| (10..=40).contains(&js_len(m)))
        && s("recipient").is_some_and(is_recipient)
        && s("state").is_some_and(|st| STATES.contains(&st))
        && s("at").and_then(parse_iso_strict).is_some()
        && optional_str_within(r.get("note"), 500)
        && optional_str_within(r.get("did"), 200)
        && r.get("seq")
            .and_then(Value::as_f64)
            .is_some_and(|q| q > 0.0 && q.fract() == 0.0)
}

/// `receipt:<msg>:<recipient>:<seq>` of a valid record, `None` for an invalid one.
pub fn receipt_item_id(rec: &Value) -> Option<String> {
    if !receipt_record_valid(rec) {
        return None;
    }
    let msg = rec.get("msg")?.as_str()?;
    let recipient = rec.get("recipient")?.as_str()?;
    let seq = rec.get("seq")?.as_f64()?;
    Some(format!("receipt:{msg}:{recipient}:{}", js_number(seq)))
}

/// The full check of a v2 receipt push by `sender`: `bad wire` (not JSON), `bad receipt`, `item
/// id is not the receipt id`, or `receipt is not signed by the sending host`.
pub fn check_receipt_wire(wire: &[u8], item_id: &str, sender: &[u8; 32]) -> Result<(), String> {
    let v: Option<Value> = std::str::from_utf8(wire)
        .ok()
        .and_then(|text| serde_json::from_str(text).ok());
    let (rec, sig) = match v.as_ref().and_then(Value::as_object) {
        Some(o) => match (o.get("rec"), o.get("sig").and_then(Value::as_str)) {
            (Some(rec), Some(sig)) if receipt_record_valid(rec) => (rec, sig),
            _ => return Err("bad receipt".to_string()),
        },
        None if v.is_none() => return Err(crate::envelope::NOT_JSON.to_string()),
        None => return Err("bad receipt".to_string()),
    };
    if receipt_item_id(rec).as_deref() != Some(item_id) {
        return Err("item id is not the receipt id".to_string());
    }
    if !verify_canonical(sender, rec, sig) {
        return Err("receipt is not signed by the sending host".to_string());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical_bytes;
    use crate::keys::SigningKey;
    use serde_json::json;

    fn rec() -> Value {
        json!({"v": 1, "type": "receipt", "msg": "01KB5Z2X3Y4Z5A6B7C8D9E0F1G",
               "recipient": "agent@laptop", "state": "read", "at": "2026-11-29T14:00:00.000Z", "seq": 2})
    }

    fn with(k: &str, v: Value) -> Value {
        let mut r = rec();
        r[k] = v;
        r
    }

    #[test]
    fn record_rules() {
        assert!(receipt_record_valid(&rec()));
        assert!(receipt_record_valid(&with("seq", json!(2.0))));
        assert!(receipt_record_valid(&with("msg", json!("m".repeat(40)))));
        assert!(receipt_record_valid(&with("msg", json!("😀".repeat(20)))));
        assert!(receipt_record_valid(&with("note", json!("n".repeat(500)))));
        assert!(receipt_record_valid(&with("did", json!("d".repeat(200)))));
        assert!(receipt_record_valid(&with("state", json!("acked"))));
        for bad in [
            json!(null),
            json!([]),
            with("v", json!("1")),
            with("type", json!("receipts")),
            with("msg", json!(1234567890)),
            with("msg", json!("😀".repeat(21))),
            with("recipient", json!("owner@")),
            with("recipient", json!("agent@bad host")),
            with("recipient", json!("a@laptop")),
            with("state", json!(null)),
            with("at", json!("2026-11-29T14:00:00.000+00:00")),
            with("note", json!(null)),
            with("note", json!("😀".repeat(251))),
            with("did", json!(5)),
            with("seq", json!(-1)),
            with("seq", json!("2")),
        ] {
            assert!(!receipt_record_valid(&bad), "{bad}");
        }
        let mut missing = rec();
        if let Some(o) = missing.as_object_mut() {
            o.remove("seq");
        }
        assert!(!receipt_record_valid(&missing));
    }

    #[test]
    fn item_id() {
        assert_eq!(
            receipt_item_id(&rec()).as_deref(),
            Some("receipt:01KB5Z2X3Y4Z5A6B7C8D9E0F1G:agent@laptop:2")
        );
        assert_eq!(
            receipt_item_id(&with("seq", json!(1e21))).as_deref(),
            Some("receipt:01KB5Z2X3Y4Z5A6B7C8D9E0F1G:agent@laptop:1e+21")
        );
        assert_eq!(receipt_item_id(&with("seq", json!(0))), None);
    }

    #[test]
    fn wire_reasons() {
        let key = SigningKey::from_seed(&[5u8; 32]);
        let r = rec();
        let wire = canonical_bytes(&json!({"rec": r, "sig": key.sign_canonical(&r)}));
        let id = "receipt:01KB5Z2X3Y4Z5A6B7C8D9E0F1G:agent@laptop:2";
        assert_eq!(check_receipt_wire(&wire, id, &key.public()), Ok(()));
        assert_eq!(
            check_receipt_wire(&wire, "receipt:x", &key.public())
                .err()
                .as_deref(),
            Some("item id is not the receipt id")
        );
        let other = SigningKey::from_seed(&[6u8; 32]);
        assert_eq!(
            check_receipt_wire(&wire, id, &other.public())
                .err()
                .as_deref(),
            Some("receipt is not signed by the sending host")
        );
        let bad = |w: &[u8]| check_receipt_wire(w, id, &key.public()).err();
        assert_eq!(bad(b"").as_deref(), Some("bad wire"));
        assert_eq!(bad(b"\xff").as_deref(), Some("bad wire"));
        assert_eq!(bad(b"null").as_deref(), Some("bad receipt"));
        assert_eq!(bad(b"[]").as_deref(), Some("bad receipt"));
        assert_eq!(
            bad(&canonical_bytes(&json!({"rec": r}))).as_deref(),
            Some("bad receipt")
        );
        let bad_rec = with("seq", json!(0));
        let w = canonical_bytes(&json!({"rec": bad_rec, "sig": key.sign_canonical(&bad_rec)}));
        assert_eq!(bad(&w).as_deref(), Some("bad receipt"));
    }
}
