//! docs/protocol.md §3 "GET /v2/relay/info" and "Enrolment": black-box checks against the real binary.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::keys::{parse_pubkey, SigningKey};
use serde_json::{json, Value};

const LIMIT_KEYS: &[&str] = &[
    "max_item_bytes",
    "max_batch",
    "max_pull",
    "max_pull_bytes",
    "max_targets",
    "retention_days",
    "max_queue_items",
    "max_queue_bytes",
    "max_sender_items",
    "max_sender_bytes",
    "max_owner_items",
    "max_owner_bytes",
];

fn info_without_hop_has_exact_fields_and_default_limits(backend: Backend) {
    let relay = backend.start(&[]);
    let r = relay.get("/v2/relay/info");
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_keys(&v, &["v", "relay_pubkey", "epoch", "version", "limits"]);
    assert_eq!(v["v"], json!(2));
    let pk = v["relay_pubkey"].as_str().unwrap();
    assert_eq!(pk.len(), 44);
    assert!(parse_pubkey(pk).is_some(), "relay_pubkey {pk}");
    assert!(
        is_uuid_v4(v["epoch"].as_str().unwrap()),
        "epoch {}",
        v["epoch"]
    );
    let version = v["version"].as_str().unwrap();
    let parts: Vec<&str> = version.split('.').collect();
    assert_eq!(parts.len(), 3, "version x.y.z: {version}");
    assert!(
        parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit())),
        "{version}"
    );
    assert_keys(&v["limits"], LIMIT_KEYS);
    assert_eq!(
        v["limits"],
        json!({
            "max_item_bytes": 524288, "max_batch": 200, "max_pull": 500, "max_pull_bytes": 8388608,
            "max_targets": 64, "retention_days": 14, "max_queue_items": 10000,
            "max_queue_bytes": 52428800, "max_sender_items": 2000, "max_sender_bytes": 20971520,
            "max_owner_items": 10000, "max_owner_bytes": 52428800,
        })
    );
    // Same key and epoch on every call.
    let again = relay.info();
    assert_eq!(again["relay_pubkey"], v["relay_pubkey"]);
    assert_eq!(again["epoch"], v["epoch"]);
}

fn info_limits_follow_flags(backend: Backend) {
    let relay = backend.start(&[
        "--max-item-bytes",
        "1000",
        "--max-batch",
        "7",
        "--max-pull",
        "9",
        "--max-pull-bytes",
        "5000",
        "--max-targets",
        "3",
        "--retention",
        "2d",
        "--max-queue-items",
        "11",
        "--max-queue-bytes",
        "12000",
        "--max-sender-items",
        "5",
        "--max-sender-bytes",
        "6000",
        "--max-account-items",
        "13",
        "--max-account-bytes",
        "14000",
    ]);
    assert_eq!(
        relay.info()["limits"],
        json!({
            "max_item_bytes": 1000, "max_batch": 7, "max_pull": 9, "max_pull_bytes": 5000,
            "max_targets": 3, "retention_days": 2, "max_queue_items": 11, "max_queue_bytes": 12000,
            "max_sender_items": 5, "max_sender_bytes": 6000, "max_owner_items": 13,
            "max_owner_bytes": 14000,
        })
    );
}

fn info_retention_days_is_fractional_for_short_retention(backend: Backend) {
    let relay = backend.start(&["--retention", "90s"]);
    let d = relay.info()["limits"]["retention_days"]
        .as_f64()
        .expect("number");
    assert!((d - 90.0 / 86400.0).abs() < 1e-12, "retention_days {d}");
}

fn limits_can_be_set_by_environment_and_flag_wins(backend: Backend) {
    let relay = Relay::launch(
        backend
            .opts(&["--max-batch", "9"])
            .env("MBX_RELAY_MAX_BATCH", "5")
            .env("MBX_RELAY_MAX_PULL", "17"),
    )
    .expect("start");
    let l = relay.info()["limits"].clone();
    assert_eq!(l["max_batch"], json!(9), "flag wins over variable");
    assert_eq!(l["max_pull"], json!(17), "variable applies");
}

fn info_with_hop_adds_you_and_tracks_head_and_ack(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "info-a");
    let b = Host::enrolled(&relay, "info-b");
    let v = a.info(&relay);
    assert_keys(
        &v,
        &["v", "relay_pubkey", "epoch", "version", "limits", "you"],
    );
    assert_keys(
        &v["you"],
        &["host", "pubkey", "head_seq", "acked_through", "enc_ad"],
    );
    assert_eq!(
        v["you"],
        json!({"host": "info-a", "pubkey": a.pubkey(), "head_seq": 0, "acked_through": 0,
               "enc_ad": null})
    );
    let res = b.push_one(&relay, &b.envelope_to(&[&a]));
    assert_eq!(res["status"], json!("accepted"));
    let seq = res["targets"][0]["seq"].as_u64().unwrap();
    assert_eq!(a.info(&relay)["you"]["head_seq"], json!(seq));
    assert_eq!(a.info(&relay)["you"]["acked_through"], json!(0));
    a.ack(&relay, &relay.epoch(), json!(seq)).ok();
    let you = a.info(&relay)["you"].clone();
    assert_eq!(you["head_seq"], json!(seq));
    assert_eq!(you["acked_through"], json!(seq));
    // The sender's own view is unaffected.
    assert_eq!(b.info(&relay)["you"]["head_seq"], json!(0));
}

// ----- challenge -----

fn challenge_is_16_random_bytes_base64url(backend: Backend) {
    let relay = backend.start(&[]);
    let h = Host::new("chal");
    let c1 = h.challenge(&relay).ok();
    assert_keys(&c1, &["challenge"]);
    let s = c1["challenge"].as_str().unwrap();
    assert_eq!(s.len(), 22, "16 bytes base64url without padding: {s}");
    assert!(
        s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
        "{s}"
    );
    let c2 = Host::new("chal2").challenge(&relay).ok();
    assert_ne!(c1["challenge"], c2["challenge"]);
}

fn challenge_bad_fields_are_400(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let pk = random_pubkey();
    let bad: Vec<Value> = vec![
        json!({"pubkey": pk}),
        json!({"host": "ok"}),
        json!({"host": "", "pubkey": pk}),
        json!({"host": "-starts-with-dash", "pubkey": pk}),
        json!({"host": ".dot", "pubkey": pk}),
        json!({"host": "has space", "pubkey": pk}),
        json!({"host": "x".repeat(64), "pubkey": pk}),
        json!({"host": "slash/name", "pubkey": pk}),
        json!({"host": 5, "pubkey": pk}),
        json!({"host": "ok", "pubkey": "abc"}),
        json!({"host": "ok", "pubkey": pk[..43].to_string()}),
        json!({"host": "ok", "pubkey": format!("{pk}=")}),
        json!({"host": "ok", "pubkey": relay_wire::keys::b64(&[1u8; 33])}),
        json!({"host": "ok", "pubkey": relay_wire::keys::b64(&[1u8; 31])}),
        json!({"host": "ok", "pubkey": 7}),
        json!("just a string"),
        json!([1, 2]),
        json!(null),
    ];
    for body in bad {
        let r = relay.post_json("/v1/relay/challenge", &body);
        r.assert_some_error(400);
    }
    // A URL-safe base64 key is not a key (standard base64 only).
    let mut k;
    loop {
        k = random_pubkey();
        if k.contains('+') || k.contains('/') {
            break;
        }
    }
    relay
        .post_json(
            "/v1/relay/challenge",
            &json!({"host": "ok", "pubkey": k.replace('+', "-").replace('/', "_")}),
        )
        .assert_some_error(400);
    // Boundaries that are fine: 1 char, 63 chars, every allowed character.
    for name in ["a", &"y".repeat(63), "A0._-z", "9lives"] {
        let r = relay.post_json(
            "/v1/relay/challenge",
            &json!({"host": name, "pubkey": random_pubkey()}),
        );
        assert_eq!(r.status, 200, "{name}: {}", r.text());
    }
}

fn challenge_cap_is_503_and_a_new_challenge_replaces_the_old_one(backend: Backend) {
    let relay = backend.start_generous(&["--max-challenges", "2"]);
    let a = Host::new("cap-a");
    let b = Host::new("cap-b");
    let c = Host::new("cap-c");
    let first_a = a.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    b.challenge(&relay).ok();
    // One open challenge per key: asking again replaces it and does not count twice.
    let second_a = a.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(first_a, second_a);
    c.challenge(&relay).assert_some_error(503);
    // The replaced challenge no longer works; the new one does.
    relay
        .post_json("/v1/relay/enrol", &a.enrol_body(&first_a, "", None))
        .assert_some_error(401);
    let ok = relay.post_json("/v1/relay/enrol", &a.enrol_body(&second_a, "", None));
    assert_eq!(ok.ok(), json!({"ok": true}));
    // Consumed on success: there is room again.
    c.challenge(&relay).ok();
}

// ----- enrol -----

fn enrol_succeeds_and_is_idempotent(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let h = Host::new("idem");
    assert_eq!(h.try_enrol(&relay, "").ok(), json!({"ok": true}));
    assert_eq!(h.try_enrol(&relay, "").ok(), json!({"ok": true}));
    assert_eq!(
        h.try_enrol(&relay, "owner-fp.1_x").ok(),
        json!({"ok": true})
    );
    assert_eq!(h.info(&relay)["you"]["host"], json!("idem"));
}

fn enrol_challenge_is_single_use(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let h = Host::new("once");
    let ch = h.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    let body = h.enrol_body(&ch, "", None);
    assert_eq!(
        relay.post_json("/v1/relay/enrol", &body).ok(),
        json!({"ok": true})
    );
    relay
        .post_json("/v1/relay/enrol", &body)
        .assert_some_error(401);
}

fn enrol_without_challenge_or_with_bad_signature_is_401(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let h = Host::new("nochal");
    // No challenge was ever asked for this key.
    relay
        .post_json(
            "/v1/relay/enrol",
            &h.enrol_body("q1w2e3r4t5y6u7i8o9p0aa", "", None),
        )
        .assert_some_error(401);
    // Signed by another key.
    let ch = h.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    let other = SigningKey::generate();
    relay
        .post_json("/v1/relay/enrol", &h.enrol_body(&ch, "", Some(&other)))
        .assert_some_error(401);
    // Signed over a different challenge.
    let ch2 = h.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    let mut body = h.enrol_body("AAAAAAAAAAAAAAAAAAAAAA", "", None);
    assert_ne!(ch2, "AAAAAAAAAAAAAAAAAAAAAA");
    relay
        .post_json("/v1/relay/enrol", &body)
        .assert_some_error(401);
    // Signature over a different owner_fp than the one sent.
    let signed = h.enrol_body(&ch2, "someone", None);
    body = h.enrol_body(&ch2, "", None);
    body["sig"] = signed["sig"].clone();
    relay
        .post_json("/v1/relay/enrol", &body)
        .assert_some_error(401);
    // Not a base64 signature at all.
    body["sig"] = json!("!!!");
    let r = relay.post_json("/v1/relay/enrol", &body);
    assert!(
        r.status == 401 || r.status == 400,
        "garbage sig: {} {}",
        r.status,
        r.text()
    );
    r.assert_some_error(r.status);
    // The host is not enrolled after all that.
    h.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
}

fn enrol_bad_fields_are_400(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let h = Host::new("badf");
    let ch = h.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    let good = h.enrol_body(&ch, "", None);
    let mut cases: Vec<Value> = Vec::new();
    for (field, val) in [
        ("host", json!("bad name")),
        ("host", json!("x".repeat(64))),
        ("host", json!(null)),
        ("pubkey", json!("short")),
        ("pubkey", json!(null)),
        ("owner_fp", json!("has space")),
        ("owner_fp", json!("f".repeat(65))),
        ("owner_fp", json!("slash/no")),
        ("owner_fp", json!(12)),
        ("sig", json!(null)),
        ("sig", json!("")),
    ] {
        let mut b = good.clone();
        if val.is_null() {
            b.as_object_mut().unwrap().remove(field);
        } else {
            b[field] = val;
        }
        cases.push(b);
    }
    cases.push(json!([good.clone()]));
    cases.push(json!("x"));
    for c in cases {
        relay
            .post_json("/v1/relay/enrol", &c)
            .assert_some_error(400);
    }
    // A present but non-string signature is a bad signature, as in the reference (401).
    let mut b = good.clone();
    b["sig"] = json!(5);
    relay
        .post_json("/v1/relay/enrol", &b)
        .assert_error(401, "bad enrolment signature");
    // The good body still works afterwards, and a 64-char owner_fp is fine.
    let ch = h.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    let r = relay.post_json("/v1/relay/enrol", &h.enrol_body(&ch, &"f".repeat(64), None));
    assert_eq!(r.ok(), json!({"ok": true}));
}

fn enrol_of_a_revoked_key_is_403_and_stays_revoked(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let old = Host::enrolled(&relay, "rev");
    let new = Host::new("rev");
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("rev", &old.key, &new.key, None, None),
    );
    assert_eq!(r.ok(), json!({"moved": 0}));
    // Re-enrolling the old key never clears its revocation.
    let c = old.challenge(&relay);
    assert_eq!(c.status, 200, "challenge for a revoked key: {}", c.text());
    let ch = c.json()["challenge"].as_str().unwrap().to_string();
    relay
        .post_json("/v1/relay/enrol", &old.enrol_body(&ch, "", None))
        .assert_some_error(403);
    old.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    // The new key is live under the name.
    assert_eq!(new.info(&relay)["you"]["host"], json!("rev"));
}

fn enrolment_capacity_is_503_but_re_enrolment_still_works(backend: Backend) {
    let relay = backend.start_generous(&["--max-enrolments", "2"]);
    let a = Host::enrolled(&relay, "capa");
    let _b = Host::enrolled(&relay, "capb");
    let c = Host::new("capc");
    c.try_enrol(&relay, "").assert_some_error(503);
    // An existing enrolment is idempotent and takes no new room.
    assert_eq!(a.try_enrol(&relay, "").ok(), json!({"ok": true}));
    c.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
}

fn two_hosts_may_share_a_name_and_names_match_case_insensitively(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "Laptop");
    // No proven account: another key may carry the same name (differently cased).
    let b = Host::enrolled(&relay, "laptop");
    assert_eq!(a.info(&relay)["you"]["host"], json!("Laptop"));
    assert_eq!(b.info(&relay)["you"]["host"], json!("laptop"));
    // A v1 hop by name finds an enrolment case-insensitively (whichever key verifies).
    let mut lower = Host::new("x");
    lower.key = SigningKey::from_seed_b64(&a.key.seed_b64()).unwrap();
    lower.name = "LAPTOP".into();
    let r = lower.call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"");
    assert_eq!(
        r.status,
        200,
        "v1 hop with a differently cased name: {}",
        r.text()
    );
}

// ----- rate limits on challenge / enrol / rotate -----

fn challenge_is_rate_limited_per_address_429(backend: Backend) {
    let relay = backend.start(&["--enrol-per-minute", "3"]);
    for i in 0..3 {
        Host::new(&format!("rl{i}")).challenge(&relay).ok();
    }
    Host::new("rl3").challenge(&relay).assert_some_error(429);
    // Without --trust-proxy a forwarded-for header changes nothing.
    let r = relay.send(
        "POST",
        "/v1/relay/challenge",
        &[("X-Forwarded-For", "203.0.113.9")],
        json!({"host": "rl4", "pubkey": random_pubkey()})
            .to_string()
            .as_bytes(),
    );
    r.assert_some_error(429);
    let r = relay.send(
        "POST",
        "/v1/relay/challenge",
        &[("CF-Connecting-IP", "203.0.113.9")],
        json!({"host": "rl5", "pubkey": random_pubkey()})
            .to_string()
            .as_bytes(),
    );
    r.assert_some_error(429);
    // Other endpoints are not affected.
    relay.assert_alive();
}

fn enrol_and_rotate_count_against_the_address_rate(backend: Backend) {
    let relay = backend.start(&["--enrol-per-minute", "4"]);
    // challenge + enrol = 2 calls
    let a = Host::enrolled(&relay, "rle");
    let n = Host::new("rle");
    // third call: a rotate
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("rle", &a.key, &n.key, None, None),
    );
    assert_eq!(r.ok(), json!({"moved": 0}));
    // fourth call: a bad enrol (still counted)
    relay
        .post_json(
            "/v1/relay/enrol",
            &Host::new("z").enrol_body("AAAAAAAAAAAAAAAAAAAAAA", "", None),
        )
        .assert_some_error(401);
    // fifth: every one of the three is now refused
    Host::new("rlx").challenge(&relay).assert_some_error(429);
    relay
        .post_json(
            "/v1/relay/enrol",
            &Host::new("z").enrol_body("AAAAAAAAAAAAAAAAAAAAAA", "", None),
        )
        .assert_some_error(429);
    let m = Host::new("rle");
    relay
        .post_json(
            "/v2/relay/rotate",
            &rotation("rle", &n.key, &m.key, None, None),
        )
        .assert_some_error(429);
}

fn challenge_from(relay: &Relay, header: (&str, &str)) -> Response {
    relay.send(
        "POST",
        "/v1/relay/challenge",
        &[header],
        json!({"host": "px", "pubkey": random_pubkey()})
            .to_string()
            .as_bytes(),
    )
}

fn trust_proxy_xff_uses_the_rightmost_forwarded_entry(backend: Backend) {
    let relay = backend.start(&["--enrol-per-minute", "2", "--trust-proxy", "xff"]);
    challenge_from(&relay, ("X-Forwarded-For", "198.51.100.1, 10.0.0.1")).ok();
    challenge_from(&relay, ("X-Forwarded-For", "198.51.100.2, 10.0.0.1")).ok();
    // Same rightmost entry: limited even though the client-controlled part differs.
    challenge_from(&relay, ("X-Forwarded-For", "198.51.100.3, 10.0.0.1")).assert_some_error(429);
    challenge_from(&relay, ("X-Forwarded-For", "10.0.0.1")).assert_some_error(429);
    // Another proxy-appended address has its own window.
    challenge_from(&relay, ("X-Forwarded-For", "10.0.0.1, 10.0.0.2")).ok();
}

fn trust_proxy_cloudflare_uses_cf_connecting_ip(backend: Backend) {
    let relay = backend.start(&["--enrol-per-minute", "1", "--trust-proxy", "cloudflare"]);
    challenge_from(&relay, ("CF-Connecting-IP", "198.51.100.7")).ok();
    challenge_from(&relay, ("CF-Connecting-IP", "198.51.100.7")).assert_some_error(429);
    challenge_from(&relay, ("CF-Connecting-IP", "198.51.100.8")).ok();
}

fn trust_proxy_can_be_set_by_environment(backend: Backend) {
    let relay = Relay::launch(
        backend
            .opts(&["--enrol-per-minute", "1"])
            .env("MBX_RELAY_TRUST_PROXY", "xff"),
    )
    .expect("start");
    challenge_from(&relay, ("X-Forwarded-For", "10.1.1.1")).ok();
    challenge_from(&relay, ("X-Forwarded-For", "10.1.1.2")).ok();
    challenge_from(&relay, ("X-Forwarded-For", "10.1.1.2")).assert_some_error(429);
}

backend_tests! {
    info_with_hop_adds_you_and_tracks_head_and_ack,
    challenge_cap_is_503_and_a_new_challenge_replaces_the_old_one,
    enrol_succeeds_and_is_idempotent,
    enrol_challenge_is_single_use,
    enrol_without_challenge_or_with_bad_signature_is_401,
    enrol_of_a_revoked_key_is_403_and_stays_revoked,
    enrolment_capacity_is_503_but_re_enrolment_still_works,
    two_hosts_may_share_a_name_and_names_match_case_insensitively,
    ;
    postgres ignored:
    info_without_hop_has_exact_fields_and_default_limits,
    info_limits_follow_flags,
    info_retention_days_is_fractional_for_short_retention,
    limits_can_be_set_by_environment_and_flag_wins,
    challenge_is_16_random_bytes_base64url,
    challenge_bad_fields_are_400,
    enrol_bad_fields_are_400,
    challenge_is_rate_limited_per_address_429,
    enrol_and_rotate_count_against_the_address_rate,
    trust_proxy_xff_uses_the_rightmost_forwarded_entry,
    trust_proxy_cloudflare_uses_cf_connecting_ip,
    trust_proxy_can_be_set_by_environment,
}
