//! No secrets in logs (issue 7): a full session against the real binary at `RUST_LOG=trace`,
//! with the relay key given in `MBX_RELAY_KEY`, then the captured stderr is searched for every
//! wire body (raw and base64), every sealed body, every request body and every key seed (base64
//! and hex) the session used. None may appear, not even a 24-character piece of one.
use crate::common;

use common::*;
use relay_wire::keys::{b64, unb64, SigningKey};
use serde_json::{json, Value};

/// Shortest piece of a secret that must not appear (long enough never to match by chance).
const PIECE: usize = 24;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything secret about a key: its seed in base64 and hex.
fn seed_forms(k: &SigningKey) -> Vec<String> {
    let seed = k.seed_b64();
    let raw = unb64(&seed).expect("seed base64");
    vec![seed, hex(&raw)]
}

/// The secret forms of an item's wire bytes: the base64 sent, the raw text, and the sealed
/// body (`enc.body`) when it is an envelope.
fn wire_forms(item: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in item["targets"].as_array().expect("targets") {
        let w64 = t["wire_b64"].as_str().expect("wire_b64").to_string();
        let wire = unb64(&w64).expect("base64");
        let text = String::from_utf8(wire).expect("utf-8 wire");
        if let Ok(v) = serde_json::from_str::<Value>(&text) {
            if let Some(body) = v["enc"]["body"].as_str() {
                out.push(body.to_string());
            }
            if let Some(sig) = v["sig"].as_str() {
                out.push(sig.to_string());
            }
        }
        out.push(w64);
        out.push(text);
    }
    out
}

/// Fails naming the secret (by label only) when `log` holds it or a [`PIECE`]-long piece of it.
fn assert_absent(log: &str, label: &str, secret: &str) {
    assert!(secret.len() >= PIECE, "{label}: secret too short to search");
    let chars: Vec<char> = secret.chars().collect();
    for start in (0..=chars.len() - PIECE).step_by(PIECE / 2) {
        let piece: String = chars[start..start + PIECE].iter().collect();
        assert!(
            !log.contains(&piece),
            "{label}: a piece of it appears in the log (at char {start})"
        );
    }
    assert!(!log.contains(secret), "{label} appears in the log");
}

#[test]
fn a_full_session_at_trace_level_logs_no_wire_body_enc_body_or_seed() {
    let relay_key = SigningKey::generate();
    let opts = RelayOpts::args(GENEROUS)
        .env("RUST_LOG", "trace")
        .env("MBX_RELAY_KEY", &relay_key.seed_b64());
    let relay = Relay::launch(opts).expect("relay starts");
    assert_eq!(
        relay.pubkey(),
        relay_key.public_b64(),
        "relay uses MBX_RELAY_KEY"
    );

    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let mut secrets: Vec<(String, String)> = Vec::new();
    for (who, k) in [
        ("relay", &relay_key),
        ("alice", &alice.key),
        ("bob", &bob.key),
    ] {
        for s in seed_forms(k) {
            secrets.push((format!("{who} seed"), s));
        }
    }

    // Encryption-key adverts.
    for h in [&alice, &bob] {
        let enc_pub = b64(&random_bytes(32));
        assert_eq!(h.publish_enc(&relay, &enc_pub).status, 200);
    }
    let r = alice.get(
        &relay,
        &format!("/v2/relay/enc-key?pubkey={}", urlencode(&bob.pubkey())),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // Envelopes and receipts both ways, a multi-target item, and a v1 push.
    let mut items = Vec::new();
    for _ in 0..3 {
        items.push((&alice, envelope_item(&alice, &[&bob])));
        items.push((&bob, envelope_item(&bob, &[&alice])));
    }
    items.push((&alice, receipt_item(&alice, &bob)));
    items.push((&bob, receipt_item(&bob, &alice)));
    for (sender, it) in &items {
        let res = sender.push_one(&relay, it);
        assert_eq!(res["status"], json!("accepted"), "{res}");
        for s in wire_forms(it) {
            secrets.push(("wire body".into(), s));
        }
        secrets.push((
            "push request body".into(),
            json!({"items": [it]}).to_string(),
        ));
    }
    // A duplicate and a rejected item are logged paths too.
    let (sender, it) = &items[0];
    assert_eq!(sender.push_one(&relay, it)["status"], json!("duplicate"));
    let mut bad = items[1].1.clone();
    bad["item_id"] = json!("not-the-id");
    let res = bob.push_one(&relay, &bad);
    assert!(
        res["status"].as_str().unwrap().starts_with("rejected:"),
        "{res}"
    );
    let v1_env = sealed_envelope(&ulid(), "agent@alice", &["agent@bob".to_string()]);
    let v1_body = json!({"envelopes": [v1_env]}).to_string();
    let r = alice.call_v1(&relay, "POST", "/v1/relay/messages", v1_body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    secrets.push(("v1 envelope".into(), v1_env.to_string()));
    secrets.push((
        "v1 enc body".into(),
        v1_env["enc"]["body"].as_str().unwrap().to_string(),
    ));

    // Pull and ack every queue (v2 and v1).
    let epoch = relay.epoch();
    for h in [&alice, &bob] {
        let pulled = h.pull_all(&relay, 0);
        assert!(!pulled.is_empty(), "{} has mail", h.name);
        let head = h.pull(&relay, "").ok()["head_seq"].clone();
        assert_eq!(h.ack(&relay, &epoch, head).status, 200);
        let r = h.call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"");
        assert_eq!(r.status, 200, "{}", r.text());
    }
    // A bad hop and a malformed body reach the error paths.
    let r = relay.send(
        "GET",
        "/v2/relay/items",
        &[
            ("x-mbx-key", &alice.pubkey()),
            ("x-mbx-ts", "1"),
            ("x-mbx-sig", "AAAA"),
        ],
        b"",
    );
    assert_eq!(r.status, 401);
    let secret_body = format!("{{\"items\": \"{}", b64(&random_bytes(48)));
    let r = alice.call(&relay, "POST", "/v2/relay/items", secret_body.as_bytes());
    assert_eq!(r.status, 400);
    secrets.push(("malformed request body".into(), secret_body));

    let log = relay.stderr_log();
    // The log is really at trace level and covers the session (else the search proves nothing).
    assert!(log.lines().count() >= 20, "log too short:\n{log}");
    assert!(
        log.contains("TRACE") || log.contains("DEBUG"),
        "not a trace-level log:\n{log}"
    );
    assert!(log.contains("enrolled"), "enrolment not logged:\n{log}");
    for (label, s) in &secrets {
        assert_absent(&log, label, s);
    }
}

/// Percent-encode a base64 key for a query string.
fn urlencode(s: &str) -> String {
    s.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}
