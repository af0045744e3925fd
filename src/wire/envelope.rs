//! The envelope check the relay applies to `envelope` wire bytes (PROTOCOL.md §5).
//!
//! The relay never decrypts, but refuses what is not an agentmbx v3 envelope. The checks run in
//! the reference's order and the first failure's reason is returned verbatim.
//!
//! Length rules follow JavaScript: "N characters" limits count UTF-16 code units (`str.length`),
//! while "N bytes" limits (the `body` limits 262,144 / 349,548) count the UTF-8 bytes of the
//! string (the fixture's plain body of 262,145 ASCII bytes is over; both readings agree on
//! ASCII, and bytes is what the protocol names). Fields whose rule is "null or ..."
//! (`reply_to`, `authority`) also accept a missing key; optional `meta` fields are checked only
//! when present (a present `null` is checked and refused). Base64 fields of `enc` must be strict
//! standard padded base64 of the exact length.

use super::keys::unb64;
use super::names::{is_local_name, is_ulid};
use super::time::parse_date_loose;
use serde_json::{Map, Value};

/// Largest plaintext `body`, in UTF-8 bytes, when `enc` is null.
pub const MAX_PLAIN_BODY_BYTES: usize = 262_144;
/// Largest sealed body (base64 of a sealed 256 KiB body), in UTF-8 bytes.
pub const MAX_SEALED_BODY_BYTES: usize = 349_548;
/// The one sealing algorithm the protocol knows.
pub const ENC_ALG: &str = "x25519+xchacha20poly1305";

const KINDS: [&str; 7] = [
    "message", "request", "reply", "status", "decision", "alert", "task",
];
const META_ARRAYS: [&str; 4] = ["mentions", "directives", "tags", "task_refs"];
const GRANT_STRINGS: [&str; 9] = [
    "id", "iss", "sub", "agent", "host", "iat", "exp", "nonce", "sig",
];

/// Length as JavaScript's `String#length` (UTF-16 code units).
pub fn js_len(s: &str) -> usize {
    s.encode_utf16().count()
}

/// Whether `s` holds a character the subject rule forbids (C0, DEL, NEL, LS, PS).
fn has_control(s: &str) -> bool {
    s.chars().any(|c| {
        matches!(
            c,
            '\u{0}'..='\u{1f}' | '\u{7f}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    })
}

fn is_string_array(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Array(a)) if a.iter().all(Value::is_string))
}

fn num_is(v: Option<&Value>, want: f64) -> bool {
    v.and_then(Value::as_f64) == Some(want)
}

/// Whether `v` is a string of standard base64 decoding to exactly `len` bytes.
fn b64_of_len(v: Option<&Value>, len: usize) -> bool {
    v.and_then(Value::as_str)
        .and_then(unb64)
        .is_some_and(|b| b.len() == len)
}

fn str_within(v: Option<&Value>, max_chars: usize) -> bool {
    v.and_then(Value::as_str)
        .is_some_and(|s| js_len(s) <= max_chars)
}

/// The `<why>` of the first failed shape check, or `None` when the envelope is well formed
/// (sealed or plaintext).
pub fn envelope_shape_error(v: &Value) -> Option<String> {
    shape(v).err()
}

fn shape(v: &Value) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    let Some(e) = v.as_object() else {
        return fail("not an object");
    };
    if !num_is(e.get("v"), 3.0) {
        return fail("unsupported version");
    }
    if !e.get("id").and_then(Value::as_str).is_some_and(is_ulid) {
        return fail("bad id");
    }
    match e.get("from").and_then(Value::as_str) {
        Some(f) if f.contains('@') => {
            if js_len(f) > 300 {
                return fail("from over 300 characters");
            }
        }
        _ => return fail("bad from"),
    }
    match e.get("to") {
        Some(Value::Array(to)) if !to.is_empty() && to.iter().all(Value::is_string) => {
            if to.len() > 100 {
                return fail("more than 100 recipients");
            }
            if to.iter().any(|t| !str_within(Some(t), 300)) {
                return fail("recipient over 300 characters");
            }
        }
        _ => return fail("bad to"),
    }
    if !e
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| KINDS.contains(&k))
    {
        return fail("bad kind");
    }
    let Some(enc) = e.get("enc") else {
        return fail("bad enc");
    };
    let Some(body) = e.get("body").and_then(Value::as_str) else {
        return fail("bad body");
    };
    let body_limit = if enc.is_null() {
        MAX_PLAIN_BODY_BYTES
    } else {
        MAX_SEALED_BODY_BYTES
    };
    if body.len() > body_limit {
        return Err(format!("body over {body_limit} bytes"));
    }
    let Some(subject) = e.get("subject").and_then(Value::as_str) else {
        return fail("bad subject");
    };
    if js_len(subject) > 200 {
        return fail("subject over 200 characters");
    }
    if has_control(subject) {
        return fail("subject contains control characters");
    }
    if e.get("ts")
        .and_then(Value::as_str)
        .and_then(parse_date_loose)
        .is_none()
    {
        return fail("bad ts");
    }
    if !str_within(e.get("thread"), 300) {
        return fail("bad thread");
    }
    match e.get("reply_to") {
        None | Some(Value::Null) => {}
        r if str_within(r, 300) => {}
        _ => return fail("bad reply_to"),
    }
    if !e.get("needs_reply").is_some_and(Value::is_boolean) {
        return fail("bad needs_reply");
    }
    match e.get("refs") {
        Some(Value::Array(refs)) if refs.iter().all(Value::is_string) => {
            if refs.len() > 100 || refs.iter().any(|r| !str_within(Some(r), 2048)) {
                return fail("more than 100 refs or a ref over 2048 characters");
            }
        }
        _ => return fail("bad refs"),
    }
    if !enc.is_null() {
        check_enc(enc)?;
    }
    match e.get("authority") {
        None | Some(Value::Null) => {}
        Some(a) => check_authority(a)?,
    }
    check_meta(e.get("meta"))
}

/// `{"v":1,"alg":ENC_ALG,"epk":b64(32),"nonce":b64(24),"body":non-empty ≤ 349,548 bytes}`.
fn check_enc(enc: &Value) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    let Some(enc) = enc.as_object() else {
        return fail("bad enc");
    };
    if !num_is(enc.get("v"), 1.0) {
        return fail("unsupported enc version");
    }
    if enc.get("alg").and_then(Value::as_str) != Some(ENC_ALG) {
        return fail("unsupported enc algorithm");
    }
    if !b64_of_len(enc.get("epk"), 32) {
        return fail("bad enc epk");
    }
    if !b64_of_len(enc.get("nonce"), 24) {
        return fail("bad enc nonce");
    }
    match enc.get("body").and_then(Value::as_str) {
        Some(b) if !b.is_empty() => {
            if b.len() > MAX_SEALED_BODY_BYTES {
                return Err(format!("sealed body over {MAX_SEALED_BODY_BYTES} bytes"));
            }
            Ok(())
        }
        _ => fail("bad enc body"),
    }
}

/// An owner authority (has `owner_sig`) or a grant authority (has `grant`); else `bad authority`.
fn check_authority(a: &Value) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    let Some(a) = a.as_object() else {
        return fail("bad authority");
    };
    if a.contains_key("owner_sig") {
        let strings = ["owner_sig", "owner_fp"]
            .iter()
            .all(|k| a.get(*k).is_some_and(Value::is_string));
        if !strings || a.contains_key("grant") || a.contains_key("session_sig") {
            return fail("bad owner authority");
        }
        return Ok(());
    }
    if a.contains_key("grant") {
        return check_grant(a);
    }
    fail("bad authority")
}

fn check_grant(a: &Map<String, Value>) -> Result<(), String> {
    let grant = match a.get("grant") {
        Some(Value::Object(g))
            if num_is(g.get("v"), 2.0)
                && a.get("session_sig").is_some_and(Value::is_string)
                && !a.contains_key("owner_fp") =>
        {
            g
        }
        _ => return Err("bad grant authority".to_string()),
    };
    if let Some(field) = GRANT_STRINGS
        .iter()
        .find(|f| !grant.get(**f).is_some_and(Value::is_string))
    {
        return Err(format!("bad grant.{field}"));
    }
    if !is_string_array(grant.get("caps")) {
        return Err("bad grant.caps".to_string());
    }
    Ok(())
}

fn check_meta(meta: Option<&Value>) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    let Some(m) = meta.and_then(Value::as_object) else {
        return fail("bad meta");
    };
    if let Some(field) = META_ARRAYS.iter().find(|f| !is_string_array(m.get(**f))) {
        return Err(format!("bad meta.{field}"));
    }
    if let Some(sv) = m.get("sender_verification") {
        if !matches!(sv.as_str(), Some("unverified" | "leased")) {
            return fail("bad sender verification");
        }
    }
    if let Some(hop) = m.get("hop") {
        let ok = hop
            .as_f64()
            .is_some_and(|h| h.fract() == 0.0 && (0.0..=1000.0).contains(&h));
        if !ok {
            return fail("bad hop");
        }
    }
    if let Some(origin) = m.get("origin") {
        if !matches!(origin.as_str(), Some("agent" | "external")) {
            return fail("bad origin");
        }
    }
    if m.get("project").is_some_and(|p| !str_within(Some(p), 300)) {
        return fail("bad project");
    }
    if m.get("project_key")
        .is_some_and(|p| !str_within(Some(p), 300))
    {
        return fail("bad project key");
    }
    if let Some(names) = m.get("local_names") {
        let ok = matches!(names, Value::Array(n)
            if n.len() <= 100 && n.iter().all(|x| x.as_str().is_some_and(is_local_name)));
        if !ok {
            return fail("bad local names");
        }
    }
    Ok(())
}

/// The full check of a v2 envelope push: the parsed envelope, or the rejection reason
/// (`bad envelope: <why>`, `item id is not the envelope id`, `envelope body is not sealed`).
pub fn check_envelope_wire(wire: &[u8], item_id: &str) -> Result<Value, String> {
    let v: Value = std::str::from_utf8(wire)
        .ok()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(|| "bad envelope: not JSON".to_string())?;
    if let Some(why) = envelope_shape_error(&v) {
        return Err(format!("bad envelope: {why}"));
    }
    if v.get("id").and_then(Value::as_str) != Some(item_id) {
        return Err("item id is not the envelope id".to_string());
    }
    if v.get("enc").is_none_or(Value::is_null) {
        return Err("envelope body is not sealed".to_string());
    }
    Ok(v)
}

/// The host parts of the envelope's `to` entries (`name@host` → `host`, split at the last `@`),
/// for v1 routing: non-empty, deduplicated ASCII-case-insensitively (hosts resolve
/// case-insensitively), first spelling kept, in order. Entries without `@` are skipped.
pub fn envelope_recipient_hosts(v: &Value) -> Vec<String> {
    let mut hosts: Vec<String> = Vec::new();
    let Some(to) = v.get("to").and_then(Value::as_array) else {
        return hosts;
    };
    for entry in to.iter().filter_map(Value::as_str) {
        let Some((_, host)) = entry.rsplit_once('@') else {
            continue;
        };
        if !host.is_empty() && !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            hosts.push(host.to_string());
        }
    }
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn valid() -> Value {
        json!({
            "v": 3, "id": "01KB5Z2X3Y4Z5A6B7C8D9E0F1G", "ts": "2026-11-29T14:00:00.000Z",
            "from": "agent@laptop", "to": ["bob@desk"], "thread": "01KB5Z2X3Y4Z5A6B7C8D9E0F1G",
            "reply_to": null, "kind": "message", "subject": "hello", "body": "Y2lwaGVy",
            "needs_reply": false, "refs": [],
            "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
            "authority": null,
            "enc": {"v": 1, "alg": ENC_ALG, "epk": crate::wire::keys::b64(&[1u8; 32]),
                    "nonce": crate::wire::keys::b64(&[2u8; 24]), "body": "Y2lwaGVy"}
        })
    }

    fn with(path: &[&str], value: Value) -> Value {
        let mut v = valid();
        let mut cur = &mut v;
        for (i, k) in path.iter().enumerate() {
            if i + 1 == path.len() {
                cur[*k] = value;
                break;
            }
            cur = &mut cur[*k];
        }
        v
    }

    fn without(key: &str) -> Value {
        let mut v = valid();
        if let Some(o) = v.as_object_mut() {
            o.remove(key);
        }
        v
    }

    fn why(v: &Value) -> Option<String> {
        envelope_shape_error(v)
    }

    #[test]
    fn valid_forms() {
        assert_eq!(why(&valid()), None);
        assert_eq!(why(&with(&["enc"], Value::Null)), None);
        assert_eq!(why(&without("reply_to")), None);
        assert_eq!(why(&without("authority")), None);
        assert_eq!(
            why(&with(&["reply_to"], json!("01KB5Z2X3Y4Z5A6B7C8D9E0F1G"))),
            None
        );
        assert_eq!(why(&with(&["v"], json!(3.0))), None);
        assert_eq!(why(&with(&["meta", "hop"], json!(0))), None);
        assert_eq!(
            why(&with(&["meta", "project"], json!("p".repeat(300)))),
            None
        );
        // 150 emoji = 300 UTF-16 units: at the limit
        assert_eq!(
            why(&with(&["from"], json!(format!("@{}", "😀".repeat(149))))),
            None
        );
        assert_eq!(why(&with(&["subject"], json!("é".repeat(200)))), None);
        assert_eq!(
            why(&with(&["ts"], json!("Sun, 29 Nov 2026 14:00:00 GMT"))),
            None
        );
        assert_eq!(
            why(&with(&["refs"], json!(vec!["r".repeat(2048); 100]))),
            None
        );
    }

    #[test]
    fn every_reason_in_order() {
        let cases: Vec<(Value, &str)> = vec![
            (json!([]), "not an object"),
            (without("v"), "unsupported version"),
            (with(&["v"], json!("3")), "unsupported version"),
            (with(&["id"], json!(5)), "bad id"),
            (with(&["from"], json!(null)), "bad from"),
            (
                with(&["from"], json!(format!("@{}", "😀".repeat(150)))),
                "from over 300 characters",
            ),
            (with(&["to"], json!(["a@b", 1])), "bad to"),
            (without("to"), "bad to"),
            (
                with(&["to"], json!(vec!["a@b"; 101])),
                "more than 100 recipients",
            ),
            (with(&["kind"], json!(null)), "bad kind"),
            (without("enc"), "bad enc"),
            (without("body"), "bad body"),
            (
                with(&["body"], json!("é".repeat(174_775))),
                "body over 349548 bytes",
            ),
            (with(&["subject"], json!(["x"])), "bad subject"),
            (
                with(&["subject"], json!("😀".repeat(101))),
                "subject over 200 characters",
            ),
            (
                with(&["subject"], json!("a\u{7f}")),
                "subject contains control characters",
            ),
            (
                with(&["subject"], json!("a\u{85}")),
                "subject contains control characters",
            ),
            (
                with(&["subject"], json!("a\u{2029}")),
                "subject contains control characters",
            ),
            (
                with(&["subject"], json!("a\u{0}")),
                "subject contains control characters",
            ),
            (without("ts"), "bad ts"),
            (with(&["ts"], json!(1_764_427_167_000u64)), "bad ts"),
            (without("thread"), "bad thread"),
            (with(&["thread"], json!(null)), "bad thread"),
            (with(&["reply_to"], json!("r".repeat(301))), "bad reply_to"),
            (without("needs_reply"), "bad needs_reply"),
            (with(&["needs_reply"], json!(0)), "bad needs_reply"),
            (without("refs"), "bad refs"),
            (
                with(&["refs"], json!(["r".repeat(2049)])),
                "more than 100 refs or a ref over 2048 characters",
            ),
            (with(&["enc"], json!("sealed")), "bad enc"),
            (with(&["enc", "v"], json!("1")), "unsupported enc version"),
            (
                with(&["enc", "alg"], json!(null)),
                "unsupported enc algorithm",
            ),
            (with(&["enc", "epk"], json!("not base64!")), "bad enc epk"),
            (
                with(&["enc", "nonce"], json!(crate::wire::keys::b64(&[0u8; 32]))),
                "bad enc nonce",
            ),
            (with(&["enc", "body"], json!(7)), "bad enc body"),
            (
                with(&["enc", "body"], json!("a".repeat(349_549))),
                "sealed body over 349548 bytes",
            ),
            (with(&["authority"], json!("owner")), "bad authority"),
            (with(&["authority"], json!({})), "bad authority"),
            (
                with(&["authority"], json!({"owner_sig": "s"})),
                "bad owner authority",
            ),
            (
                with(
                    &["authority"],
                    json!({"owner_sig": "s", "owner_fp": "f", "session_sig": "x"}),
                ),
                "bad owner authority",
            ),
            (
                with(&["authority"], json!({"grant": {"v": 2}, "session_sig": 1})),
                "bad grant authority",
            ),
            (
                with(&["authority"], json!({"grant": "g", "session_sig": "x"})),
                "bad grant authority",
            ),
            (
                with(
                    &["authority"],
                    json!({"grant": {"v": 2}, "session_sig": "x", "owner_fp": "f"}),
                ),
                "bad grant authority",
            ),
            (
                with(
                    &["authority"],
                    json!({"grant": {"v": 2}, "session_sig": "x"}),
                ),
                "bad grant.id",
            ),
            (with(&["meta"], json!([])), "bad meta"),
            (
                with(&["meta", "mentions"], json!(null)),
                "bad meta.mentions",
            ),
            (
                with(&["meta", "task_refs"], json!([1])),
                "bad meta.task_refs",
            ),
            (
                with(&["meta", "sender_verification"], json!(null)),
                "bad sender verification",
            ),
            (with(&["meta", "hop"], json!(1001)), "bad hop"),
            (with(&["meta", "hop"], json!("1")), "bad hop"),
            (with(&["meta", "origin"], json!(1)), "bad origin"),
            (with(&["meta", "project"], json!(1)), "bad project"),
            (
                with(&["meta", "project_key"], json!("k".repeat(301))),
                "bad project key",
            ),
            (
                with(&["meta", "local_names"], json!(vec!["ab"; 101])),
                "bad local names",
            ),
            (
                with(&["meta", "local_names"], json!("ab")),
                "bad local names",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(
                why(&v).as_deref(),
                Some(want),
                "{}",
                crate::wire::canonical::canonical_json(&v)
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
        }
    }

    #[test]
    fn earlier_checks_win() {
        let mut v = with(&["kind"], json!("spam"));
        v["from"] = json!("nobody");
        assert_eq!(why(&v).as_deref(), Some("bad from"));
        let mut v = with(&["meta"], json!(null));
        v["authority"] = json!(1);
        assert_eq!(why(&v).as_deref(), Some("bad authority"));
        // an oversized plaintext body is judged before its subject
        let mut v = with(&["enc"], Value::Null);
        v["body"] = json!("b".repeat(262_145));
        v["subject"] = json!(1);
        assert_eq!(why(&v).as_deref(), Some("body over 262144 bytes"));
    }

    #[test]
    fn wire_check_reasons() {
        let v = valid();
        let wire = serde_json::to_vec(&v).unwrap_or_default();
        assert!(check_envelope_wire(&wire, "01KB5Z2X3Y4Z5A6B7C8D9E0F1G").is_ok());
        assert_eq!(
            check_envelope_wire(&wire, "other").err().as_deref(),
            Some("item id is not the envelope id")
        );
        let plain = serde_json::to_vec(&with(&["enc"], Value::Null)).unwrap_or_default();
        assert_eq!(
            check_envelope_wire(&plain, "01KB5Z2X3Y4Z5A6B7C8D9E0F1G")
                .err()
                .as_deref(),
            Some("envelope body is not sealed")
        );
        assert_eq!(
            check_envelope_wire(b"{", "x").err().as_deref(),
            Some("bad envelope: not JSON")
        );
        assert_eq!(
            check_envelope_wire(b"\xff\xfe", "x").err().as_deref(),
            Some("bad envelope: not JSON")
        );
        assert_eq!(
            check_envelope_wire(b"", "x").err().as_deref(),
            Some("bad envelope: not JSON")
        );
        assert_eq!(
            check_envelope_wire(b"null", "x").err().as_deref(),
            Some("bad envelope: not an object")
        );
        let bad = serde_json::to_vec(&with(&["v"], json!(2))).unwrap_or_default();
        assert_eq!(
            check_envelope_wire(&bad, "x").err().as_deref(),
            Some("bad envelope: unsupported version")
        );
    }

    #[test]
    fn recipient_hosts() {
        let v = json!({"to": ["a@desk", "b@Desk", "c@laptop", "nohost", "x@", "a@b@srv", 5]});
        assert_eq!(envelope_recipient_hosts(&v), vec!["desk", "laptop", "srv"]);
        assert!(envelope_recipient_hosts(&json!({"to": "a@b"})).is_empty());
        assert!(envelope_recipient_hosts(&json!(null)).is_empty());
    }

    #[test]
    fn length_units() {
        assert_eq!(js_len("a😀é"), 4);
        assert_eq!(js_len(""), 0);
    }
}
