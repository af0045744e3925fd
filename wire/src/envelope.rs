//! The envelope check the relay applies to `envelope` wire bytes (docs/protocol.md §5).
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

use super::json_node::Node;
use super::keys::unb64;
use super::names::{is_local_name, is_ulid};
use super::time::{parse_date_loose, parse_utc_instant};
use serde_json::Value;

/// Largest plaintext `body`, in UTF-8 bytes, when `enc` is null.
pub(crate) const MAX_PLAIN_BODY_BYTES: usize = 262_144;
/// Largest sealed body (base64 of a sealed 256 KiB body), in UTF-8 bytes.
pub(crate) const MAX_SEALED_BODY_BYTES: usize = 349_548;
/// The one sealing algorithm the protocol knows.
pub(crate) const ENC_ALG: &str = "x25519+xchacha20poly1305";

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

/// The read-only view of a JSON value the shape rules need, so the one set of rules runs over a
/// `serde_json::Value` (v1 envelopes arrive inside the request's value tree) and over the
/// borrowed [`Node`] tree a v2 wire is parsed into (no map or string allocations per field).
trait JsonView: Sized {
    /// The member `key` of an object (the last one when a key repeats, like `JSON.parse`);
    /// `None` for a missing key or a non-object.
    fn get_key(&self, key: &str) -> Option<&Self>;
    fn is_object(&self) -> bool;
    fn as_text(&self) -> Option<&str>;
    fn as_items(&self) -> Option<&[Self]>;
    fn as_number(&self) -> Option<f64>;
    fn is_json_null(&self) -> bool;
    fn is_json_bool(&self) -> bool;

    fn has_key(&self, key: &str) -> bool {
        self.get_key(key).is_some()
    }
    fn is_text(&self) -> bool {
        self.as_text().is_some()
    }
}

impl JsonView for Value {
    fn get_key(&self, key: &str) -> Option<&Self> {
        self.as_object()?.get(key)
    }
    fn is_object(&self) -> bool {
        Value::is_object(self)
    }
    fn as_text(&self) -> Option<&str> {
        self.as_str()
    }
    fn as_items(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
    fn as_number(&self) -> Option<f64> {
        self.as_f64()
    }
    fn is_json_null(&self) -> bool {
        self.is_null()
    }
    fn is_json_bool(&self) -> bool {
        self.is_boolean()
    }
}

impl JsonView for Node<'_> {
    fn get_key(&self, key: &str) -> Option<&Self> {
        self.get(key)
    }
    fn is_object(&self) -> bool {
        matches!(self, Node::Object(_))
    }
    fn as_text(&self) -> Option<&str> {
        self.as_str()
    }
    fn as_items(&self) -> Option<&[Self]> {
        self.as_array()
    }
    fn as_number(&self) -> Option<f64> {
        match self {
            Node::Number(n) => Some(*n),
            _ => None,
        }
    }
    fn is_json_null(&self) -> bool {
        matches!(self, Node::Null)
    }
    fn is_json_bool(&self) -> bool {
        matches!(self, Node::Bool(_))
    }
}

fn is_string_array<J: JsonView>(v: Option<&J>) -> bool {
    v.and_then(J::as_items)
        .is_some_and(|a| a.iter().all(J::is_text))
}

fn num_is<J: JsonView>(v: Option<&J>, want: f64) -> bool {
    v.and_then(J::as_number) == Some(want)
}

/// Whether `v` is a string of standard base64 decoding to exactly `len` bytes.
fn b64_of_len<J: JsonView>(v: Option<&J>, len: usize) -> bool {
    v.and_then(J::as_text)
        .and_then(unb64)
        .is_some_and(|b| b.len() == len)
}

fn str_within<J: JsonView>(v: Option<&J>, max_chars: usize) -> bool {
    v.and_then(J::as_text)
        .is_some_and(|s| js_len(s) <= max_chars)
}

/// The `<why>` of the first failed shape check, or `None` when the envelope is well formed
/// (sealed or plaintext).
pub fn envelope_shape_error(v: &Value) -> Option<String> {
    shape(v).err()
}

fn shape<J: JsonView>(e: &J) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    if !e.is_object() {
        return fail("not an object");
    }
    if !num_is(e.get_key("v"), 3.0) {
        return fail("unsupported version");
    }
    if !e.get_key("id").and_then(J::as_text).is_some_and(is_ulid) {
        return fail("bad id");
    }
    match e.get_key("from").and_then(J::as_text) {
        Some(f) if f.contains('@') => {
            if js_len(f) > 300 {
                return fail("from over 300 characters");
            }
        }
        _ => return fail("bad from"),
    }
    match e.get_key("to").and_then(J::as_items) {
        Some(to) if !to.is_empty() && to.iter().all(J::is_text) => {
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
        .get_key("kind")
        .and_then(J::as_text)
        .is_some_and(|k| KINDS.contains(&k))
    {
        return fail("bad kind");
    }
    let Some(enc) = e.get_key("enc") else {
        return fail("bad enc");
    };
    let Some(body) = e.get_key("body").and_then(J::as_text) else {
        return fail("bad body");
    };
    let body_limit = if enc.is_json_null() {
        MAX_PLAIN_BODY_BYTES
    } else {
        MAX_SEALED_BODY_BYTES
    };
    if body.len() > body_limit {
        return Err(format!("body over {body_limit} bytes"));
    }
    let Some(subject) = e.get_key("subject").and_then(J::as_text) else {
        return fail("bad subject");
    };
    if js_len(subject) > 200 {
        return fail("subject over 200 characters");
    }
    if has_control(subject) {
        return fail("subject contains control characters");
    }
    if e.get_key("ts")
        .and_then(J::as_text)
        .and_then(parse_date_loose)
        .is_none()
    {
        return fail("bad ts");
    }
    if !str_within(e.get_key("thread"), 300) {
        return fail("bad thread");
    }
    match e.get_key("reply_to") {
        None => {}
        Some(r) if r.is_json_null() || str_within(Some(r), 300) => {}
        _ => return fail("bad reply_to"),
    }
    if !e.get_key("needs_reply").is_some_and(J::is_json_bool) {
        return fail("bad needs_reply");
    }
    match e.get_key("refs").and_then(J::as_items) {
        Some(refs) if refs.iter().all(J::is_text) => {
            if refs.len() > 100 || refs.iter().any(|r| !str_within(Some(r), 2048)) {
                return fail("more than 100 refs or a ref over 2048 characters");
            }
        }
        _ => return fail("bad refs"),
    }
    if !enc.is_json_null() {
        check_enc(enc)?;
    }
    match e.get_key("authority") {
        None => {}
        Some(a) if a.is_json_null() => {}
        Some(a) => check_authority(a)?,
    }
    check_meta(e.get_key("meta"))
}

/// `{"v":1,"alg":ENC_ALG,"epk":b64(32),"nonce":b64(24),"body":non-empty ≤ 349,548 bytes}`.
fn check_enc<J: JsonView>(enc: &J) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    if !enc.is_object() {
        return fail("bad enc");
    }
    if !num_is(enc.get_key("v"), 1.0) {
        return fail("unsupported enc version");
    }
    if enc.get_key("alg").and_then(J::as_text) != Some(ENC_ALG) {
        return fail("unsupported enc algorithm");
    }
    if !b64_of_len(enc.get_key("epk"), 32) {
        return fail("bad enc epk");
    }
    if !b64_of_len(enc.get_key("nonce"), 24) {
        return fail("bad enc nonce");
    }
    match enc.get_key("body").and_then(J::as_text) {
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
fn check_authority<J: JsonView>(a: &J) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    if !a.is_object() {
        return fail("bad authority");
    }
    if a.has_key("owner_sig") {
        let strings = ["owner_sig", "owner_fp"]
            .iter()
            .all(|k| a.get_key(k).is_some_and(J::is_text));
        if !strings || a.has_key("grant") || a.has_key("session_sig") {
            return fail("bad owner authority");
        }
        return Ok(());
    }
    if a.has_key("grant") {
        return check_grant(a);
    }
    fail("bad authority")
}

fn check_grant<J: JsonView>(a: &J) -> Result<(), String> {
    let grant = match a.get_key("grant") {
        Some(g)
            if g.is_object()
                && num_is(g.get_key("v"), 2.0)
                && a.get_key("session_sig").is_some_and(J::is_text)
                && !a.has_key("owner_fp") =>
        {
            g
        }
        _ => return Err("bad grant authority".to_string()),
    };
    if let Some(field) = GRANT_STRINGS
        .iter()
        .find(|f| !grant.get_key(f).is_some_and(J::is_text))
    {
        return Err(format!("bad grant.{field}"));
    }
    if !is_string_array(grant.get_key("caps")) {
        return Err("bad grant.caps".to_string());
    }
    Ok(())
}

/// `meta.external_since` and `meta.external_source` (agentmbx 0.5.7+, T344): a since only on
/// an `external` origin, as a real UTC instant of the T344 form; a source (`declared` |
/// `inherited`) only beside a since.
fn check_external<J: JsonView>(m: &J) -> Result<(), String> {
    let since = m.get_key("external_since");
    if let Some(s) = since {
        let external = m.get_key("origin").and_then(J::as_text) == Some("external");
        if !external || s.as_text().and_then(parse_utc_instant).is_none() {
            return Err("bad external_since".to_string());
        }
    }
    if let Some(source) = m.get_key("external_source") {
        if since.is_none() || !matches!(source.as_text(), Some("declared" | "inherited")) {
            return Err("bad external_source".to_string());
        }
    }
    Ok(())
}

fn check_meta<J: JsonView>(meta: Option<&J>) -> Result<(), String> {
    let fail = |why: &str| Err(why.to_string());
    let Some(m) = meta.filter(|m| m.is_object()) else {
        return fail("bad meta");
    };
    if let Some(field) = META_ARRAYS.iter().find(|f| !is_string_array(m.get_key(f))) {
        return Err(format!("bad meta.{field}"));
    }
    if let Some(sv) = m.get_key("sender_verification") {
        if !matches!(sv.as_text(), Some("unverified" | "leased")) {
            return fail("bad sender verification");
        }
    }
    if let Some(hop) = m.get_key("hop") {
        let ok = hop
            .as_number()
            .is_some_and(|h| h.fract() == 0.0 && (0.0..=1000.0).contains(&h));
        if !ok {
            return fail("bad hop");
        }
    }
    if let Some(origin) = m.get_key("origin") {
        if !matches!(origin.as_text(), Some("agent" | "external")) {
            return fail("bad origin");
        }
    }
    check_external(m)?;
    if m.get_key("project")
        .is_some_and(|p| !str_within(Some(p), 300))
    {
        return fail("bad project");
    }
    if m.get_key("project_key")
        .is_some_and(|p| !str_within(Some(p), 300))
    {
        return fail("bad project key");
    }
    if let Some(names) = m.get_key("local_names") {
        let ok = names.as_items().is_some_and(|n| {
            n.len() <= 100 && n.iter().all(|x| x.as_text().is_some_and(is_local_name))
        });
        if !ok {
            return fail("bad local names");
        }
    }
    Ok(())
}

/// The relay's check of a v2 envelope push: `Ok` or the rejection reason (`bad wire` when it is
/// not JSON, as the reference says; `bad envelope: <why>`, `item id is not the envelope id`,
/// `envelope body is not sealed`). The wire is parsed into a borrowed tree (no value tree: this
/// runs once per pushed envelope).
pub fn envelope_wire_error(wire: &[u8], item_id: &str) -> Result<(), String> {
    let v: Node<'_> = std::str::from_utf8(wire)
        .ok()
        .and_then(|text| serde_json::from_str(text).ok())
        .ok_or_else(|| NOT_JSON.to_string())?;
    shape(&v).map_err(|why| format!("bad envelope: {why}"))?;
    if v.get("id").and_then(Node::as_str) != Some(item_id) {
        return Err("item id is not the envelope id".to_string());
    }
    if v.get("enc").is_none_or(|e| matches!(e, Node::Null)) {
        return Err("envelope body is not sealed".to_string());
    }
    Ok(())
}

/// The reason for wire bytes that are not JSON (the reference relay's text).
pub const NOT_JSON: &str = "bad wire";

/// [`envelope_wire_error`], then the envelope as a value tree (for the host side, which keeps
/// it, and names wire that is not JSON `bad envelope: not JSON` in its quarantine).
pub fn check_envelope_wire(wire: &[u8], item_id: &str) -> Result<Value, String> {
    let v = serde_json::from_slice(wire).map_err(|_| "bad envelope: not JSON".to_string())?;
    envelope_wire_error(wire, item_id)?;
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
            "enc": {"v": 1, "alg": ENC_ALG, "epk": crate::keys::b64(&[1u8; 32]),
                    "nonce": crate::keys::b64(&[2u8; 24]), "body": "Y2lwaGVy"}
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

    fn reason_cases() -> Vec<(Value, &'static str)> {
        vec![
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
                with(&["enc", "nonce"], json!(crate::keys::b64(&[0u8; 32]))),
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
            (
                with(&["meta", "external_since"], json!("2026-11-29T14:00:00Z")),
                "bad external_since",
            ),
            (
                with(&["meta", "external_source"], json!("declared")),
                "bad external_source",
            ),
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
        ]
    }

    /// The valid envelope with these `meta` members added.
    fn with_meta(members: Value) -> Value {
        let mut v = valid();
        if let (Some(meta), Some(add)) = (v["meta"].as_object_mut(), members.as_object()) {
            meta.extend(add.clone());
        }
        v
    }

    /// agentmbx T344: `external_since` / `external_source`, each shape of issue 25.
    #[test]
    fn external_since_and_source() {
        let since = "2026-11-29T14:00:00.123Z";
        for ok in [
            json!({"origin": "external", "external_since": since, "external_source": "declared"}),
            json!({"origin": "external", "external_since": since, "external_source": "inherited"}),
            json!({"origin": "external", "external_since": since}),
            json!({"origin": "external", "external_since": "2026-11-29T14:00:00Z"}),
            json!({"origin": "external", "external_since": "2024-02-29T00:00:00.5Z"}),
            // a future instant is a real date and time
            json!({"origin": "external", "external_since": "9999-12-31T23:59:59.999Z"}),
            json!({"origin": "external"}),
        ] {
            assert_eq!(why(&with_meta(ok.clone())), None, "{ok}");
        }
        let bad_since = [
            json!({"external_since": since}),
            json!({"origin": "agent", "external_since": since}),
            json!({"origin": "external", "external_since": "2026-11-29"}),
            json!({"origin": "external", "external_since": "2026-11-29T14:00:00+01:00"}),
            json!({"origin": "external", "external_since": "2026-11-29T14:00:00.000+00:00"}),
            json!({"origin": "external", "external_since": 1_795_960_800_000u64}),
            json!({"origin": "external", "external_since": "2026-13-01T00:00:00Z"}),
            json!({"origin": "external", "external_since": "2026-02-30T00:00:00Z"}),
            json!({"origin": "external", "external_since": "2026-02-29T00:00:00Z"}),
            json!({"origin": "external", "external_since": "2026-11-29T14:00:00.1234Z"}),
            json!({"origin": "external", "external_since": "Sun, 29 Nov 2026 14:00:00 GMT"}),
            json!({"origin": "external", "external_since": null}),
            json!({"external_since": since, "external_source": "declared"}),
        ];
        for bad in bad_since {
            assert_eq!(
                why(&with_meta(bad.clone())).as_deref(),
                Some("bad external_since"),
                "{bad}"
            );
        }
        let bad_source = [
            json!({"external_source": "declared"}),
            json!({"origin": "external", "external_source": "inherited"}),
            json!({"origin": "external", "external_since": since, "external_source": "trusted"}),
            json!({"origin": "external", "external_since": since, "external_source": null}),
            json!({"origin": "external", "external_since": since, "external_source": 1}),
            json!({"origin": "external", "external_since": since, "external_source": "Declared"}),
            json!({"external_source": "x", "project": 1, "local_names": "ab"}),
            json!({"origin": "external", "external_since": since, "external_source": "x",
                   "project": 1}),
        ];
        for bad in bad_source {
            assert_eq!(
                why(&with_meta(bad.clone())).as_deref(),
                Some("bad external_source"),
                "{bad}"
            );
        }
        // after `bad origin`, before `bad project`
        let order = [
            (
                json!({"origin": "robot", "external_since": "x"}),
                "bad origin",
            ),
            (
                json!({"origin": "robot", "external_source": "x"}),
                "bad origin",
            ),
            (json!({"hop": -1, "external_since": "x"}), "bad hop"),
            (
                json!({"external_since": "x", "project": 1}),
                "bad external_since",
            ),
            (
                json!({"external_source": "x", "project": 1}),
                "bad external_source",
            ),
            (
                json!({"origin": "external", "external_since": since, "project": 1}),
                "bad project",
            ),
        ];
        for (m, want) in order {
            assert_eq!(why(&with_meta(m.clone())).as_deref(), Some(want), "{m}");
        }
    }

    #[test]
    fn every_reason_in_order() {
        for (v, want) in reason_cases() {
            assert_eq!(
                why(&v).as_deref(),
                Some(want),
                "{}",
                crate::canonical::canonical_json(&v)
                    .chars()
                    .take(300)
                    .collect::<String>()
            );
        }
    }

    /// The verdict of the borrowed-tree rules on `text`, and of the value-tree rules on the
    /// same text parsed as a `Value`: they must agree on every input.
    fn both_verdicts(text: &str) -> (Option<String>, Option<String>) {
        let node: Option<Node<'_>> = serde_json::from_str(text).ok();
        let value: Option<Value> = serde_json::from_str(text).ok();
        assert_eq!(node.is_some(), value.is_some(), "same grammar: {text}");
        (
            node.and_then(|n| shape(&n).err()),
            value.and_then(|v| envelope_shape_error(&v)),
        )
    }

    #[test]
    fn borrowed_tree_and_value_tree_agree() {
        let mut texts: Vec<String> = Vec::new();
        let mut values = vec![
            valid(),
            with(&["enc"], Value::Null),
            without("reply_to"),
            with(&["subject"], json!("tab\there \"q\" \\ é 😀")),
            with(&["meta", "hop"], json!(1e3)),
            with(&["meta", "hop"], json!(-0.0)),
            with(&["meta", "hop"], json!(2.5)),
            with(&["v"], json!(3.0000000000000001)),
            with(&["v"], json!(-3)),
            with(&["v"], json!(u64::MAX)),
        ];
        values.extend(
            [
                ("authority", json!({"owner_sig": "s", "owner_fp": "f"})),
                ("authority", json!({"grant": {"v": 2}, "session_sig": "x"})),
            ]
            .into_iter()
            .map(|(k, v)| with(&[k], v)),
        );
        texts.extend(values.iter().map(Value::to_string));
        let base = valid().to_string();
        // repeated keys (the last one counts), escaped keys, nesting and junk
        texts.push(base.replacen("{", "{\"v\":2,", 1));
        texts.push(base.replacen("\"v\":3", "\"v\":3,\"v\":4", 1));
        texts.push(base.replacen("\"v\":3", "\"\\u0076\":3", 1));
        texts.push(base.replacen("\"enc\":{", "\"enc\":null,\"enc\":{", 1));
        texts.push(base.replacen("\"meta\":{", "\"meta\":{\"tags\":5,", 1));
        texts.push(base.replacen("\"subject\":\"hello\"", "\"subject\":\"a\\u0000b\"", 1));
        for junk in [
            "",
            "{",
            "[]",
            "null",
            "1",
            "\"s\"",
            "{\"a\":[1,{\"b\":null}]}",
            "{} x",
        ] {
            texts.push(junk.to_string());
        }
        for text in &texts {
            let (node, value) = both_verdicts(text);
            assert_eq!(node, value, "{text}");
        }
        // every reason case of the table below, as text
        for (v, _) in reason_cases() {
            let text = v.to_string();
            let (node, value) = both_verdicts(&text);
            assert_eq!(node, value, "{text}");
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
            envelope_wire_error(b"{", "x").err().as_deref(),
            Some(NOT_JSON)
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
