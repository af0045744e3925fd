//! docs/protocol.md §3 "Encryption-key advertisements", "Sender allowlist" and "Key rotation",
//! against the real binary.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::canonical::canonical_json;
use relay_wire::keys::{b64, SigningKey};
use serde_json::{json, Value};

fn enc_pub() -> String {
    b64(&random_bytes(32))
}

// ----- enc-key advertisements -----

fn enc_key_publish_and_lookup_v2_and_v1(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "enc-a");
    let b = Host::enrolled(&relay, "enc-b");
    let ep = enc_pub();
    assert_eq!(a.publish_enc(&relay, &ep).ok(), json!({"ok": true}));
    let sig = a
        .key
        .sign(canonical_json(&json!({"v": 1, "host": "enc-a", "enc_pub": ep})).as_bytes());
    let expected = json!({"host": "enc-a", "host_pubkey": a.pubkey(), "enc_pub": ep, "sig": sig});
    let q = urlencode(&a.pubkey());
    let r = b.get(&relay, &format!("/v2/relay/enc-key?pubkey={q}")).ok();
    assert_keys(&r, &["host", "host_pubkey", "enc_pub", "sig"]);
    assert_eq!(r, expected);
    assert_eq!(
        b.call_v1(&relay, "GET", &format!("/v1/relay/enc-key?pubkey={q}"), b"")
            .ok(),
        expected
    );
    assert_eq!(
        b.call_v1(&relay, "GET", "/v1/relay/enc-key?host=enc-a", b"")
            .ok(),
        expected
    );
    // Names match case-insensitively.
    assert_eq!(
        b.call_v1(&relay, "GET", "/v1/relay/enc-key?host=ENC-A", b"")
            .ok(),
        expected
    );
    // A newer advertisement replaces the old one.
    let ep2 = enc_pub();
    a.publish_enc(&relay, &ep2).ok();
    let r = b.get(&relay, &format!("/v2/relay/enc-key?pubkey={q}")).ok();
    assert_eq!(r["enc_pub"], json!(ep2));
}

/// Percent-encodes the base64 characters that are not safe in a query value.
fn urlencode(s: &str) -> String {
    s.replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D")
}

fn enc_key_unknown_host_is_404(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "enc-x");
    let silent = Host::enrolled(&relay, "silent");
    for path in [
        format!("/v2/relay/enc-key?pubkey={}", urlencode(&random_pubkey())),
        // enrolled but never advertised
        format!("/v2/relay/enc-key?pubkey={}", urlencode(&silent.pubkey())),
    ] {
        a.get(&relay, &path).assert_error(404, "unknown host");
    }
    a.call_v1(&relay, "GET", "/v1/relay/enc-key?host=nobody", b"")
        .assert_error(404, "unknown host");
    a.call_v1(&relay, "GET", "/v1/relay/enc-key?host=silent", b"")
        .assert_error(404, "unknown host");
}

fn enc_key_by_name_needs_exactly_one_live_enrolment(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let caller = Host::enrolled(&relay, "caller");
    let t1 = Host::enrolled(&relay, "twin");
    t1.publish_enc(&relay, &enc_pub()).ok();
    assert_eq!(
        caller
            .call_v1(&relay, "GET", "/v1/relay/enc-key?host=twin", b"")
            .ok()["host_pubkey"],
        json!(t1.pubkey())
    );
    let t2 = Host::enrolled(&relay, "TWIN");
    t2.publish_enc(&relay, &enc_pub()).ok();
    caller
        .call_v1(&relay, "GET", "/v1/relay/enc-key?host=twin", b"")
        .assert_error(404, "unknown host");
    // By key both still resolve.
    for t in [&t1, &t2] {
        let r = caller
            .get(
                &relay,
                &format!("/v2/relay/enc-key?pubkey={}", urlencode(&t.pubkey())),
            )
            .ok();
        assert_eq!(r["host_pubkey"], json!(t.pubkey()));
    }
}

fn enc_key_bad_signature_is_401(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "enc-bad");
    let ep = enc_pub();
    let other = SigningKey::generate();
    for sig in [
        other.sign(canonical_json(&json!({"v": 1, "host": "enc-bad", "enc_pub": ep})).as_bytes()),
        a.key
            .sign(canonical_json(&json!({"v": 1, "host": "other", "enc_pub": ep})).as_bytes()),
        a.key
            .sign(canonical_json(&json!({"v": 2, "host": "enc-bad", "enc_pub": ep})).as_bytes()),
        "AAAA".to_string(),
    ] {
        a.post_json(
            &relay,
            "/v1/relay/enc-key",
            &json!({"enc_pub": ep, "sig": sig}),
        )
        .assert_some_error(401);
    }
    a.get(
        &relay,
        &format!("/v2/relay/enc-key?pubkey={}", urlencode(&a.pubkey())),
    )
    .assert_error(404, "unknown host");
    // Unsigned or badly signed hops never reach the handler.
    relay
        .post_json("/v1/relay/enc-key", &json!({"enc_pub": ep, "sig": "x"}))
        .assert_error(401, "bad relay hop");
}

// ----- sender allowlists -----

fn sender_list_restricts_pushes(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "target");
    let friend = Host::enrolled(&relay, "friend");
    let stranger = Host::enrolled(&relay, "stranger");
    // Before a list, anyone enrolled may push.
    assert_eq!(
        stranger.push_one(&relay, &envelope_item(&stranger, &[&t]))["status"],
        json!("accepted")
    );
    assert_eq!(
        t.publish_senders(&relay, &[friend.pubkey()], now_ms()).ok(),
        json!({"ok": true})
    );
    assert_eq!(
        friend.push_one(&relay, &envelope_item(&friend, &[&t]))["status"],
        json!("accepted")
    );
    let r = stranger.push_one(&relay, &envelope_item(&stranger, &[&t]));
    assert_rejected(&r, "sender not accepted by target");
    // The whole item is rejected: another target in it gets nothing.
    let other = Host::enrolled(&relay, "other");
    let r = stranger.push_one(&relay, &envelope_item(&stranger, &[&other, &t]));
    assert_rejected(&r, "sender not accepted by target");
    assert!(other.pull_all(&relay, 0).is_empty());
    // Receipts are checked too.
    assert_rejected(
        &stranger.push_one(&relay, &receipt_item(&stranger, &t)),
        "sender not accepted by target",
    );
    // Order: target not enrolled comes first, then the allowlist, then duplicate target.
    let ghost = Host::new("ghost");
    let id = ulid();
    let wire = envelope_wire(&id, &stranger, &[&t]);
    let r = stranger.push_one(
        &relay,
        &item(
            "envelope",
            &id,
            &[(ghost.pubkey(), wire.clone()), (t.pubkey(), wire.clone())],
        ),
    );
    assert_rejected(&r, "target not enrolled");
    let r = stranger.push_one(
        &relay,
        &item(
            "envelope",
            &id,
            &[(t.pubkey(), wire.clone()), (t.pubkey(), wire)],
        ),
    );
    assert_rejected(&r, "sender not accepted by target");
    // A newer list can open it again.
    t.publish_senders(
        &relay,
        &[friend.pubkey(), stranger.pubkey()],
        now_ms() + 1000,
    )
    .ok();
    assert_eq!(
        stranger.push_one(&relay, &envelope_item(&stranger, &[&t]))["status"],
        json!("accepted")
    );
}

fn sender_list_must_be_newer(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-newer");
    let iat = now_ms() - 10_000;
    t.publish_senders(&relay, &[random_pubkey()], iat).ok();
    t.publish_senders(&relay, &[random_pubkey()], iat)
        .assert_some_error(409);
    t.publish_senders(&relay, &[random_pubkey()], iat - 1)
        .assert_some_error(409);
    t.publish_senders(&relay, &[random_pubkey()], iat + 1).ok();
}

fn sender_list_iat_at_most_five_minutes_ahead(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-future");
    t.publish_senders(&relay, &[random_pubkey()], now_ms() + 6 * 60_000)
        .assert_some_error(400);
    t.publish_senders(&relay, &[random_pubkey()], now_ms() + 4 * 60_000)
        .ok();
}

fn sender_list_size_limit_is_1024(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-size");
    let keys: Vec<String> = (0..1025).map(|_| random_pubkey()).collect();
    t.publish_senders(&relay, &keys, now_ms() - 5000)
        .assert_some_error(400);
    t.publish_senders(&relay, &keys[..1024], now_ms() - 4000)
        .ok();
}

fn sender_list_malformed_is_400_and_bad_signature_401(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-mal");
    let good = t.sender_list(&[random_pubkey()], now_ms());
    let resign = |list: Value| -> Value {
        let sig = t.key.sign(canonical_json(&list).as_bytes());
        json!({"list": list, "sig": sig})
    };
    let mut bad: Vec<Value> = Vec::new();
    for (field, val) in [
        ("v", json!(2)),
        ("type", json!("relay-sender")),
        ("senders", json!("x")),
        ("senders", json!(["not-a-key"])),
        ("senders", json!([5])),
        ("iat", json!("yesterday")),
        ("host_pubkey", json!("short")),
    ] {
        let mut l = good["list"].clone();
        l[field] = val;
        bad.push(resign(l));
    }
    for field in ["senders", "iat", "host_pubkey", "type"] {
        let mut l = good["list"].clone();
        l.as_object_mut().unwrap().remove(field);
        bad.push(resign(l));
    }
    bad.push(json!({"sig": good["sig"]}));
    bad.push(json!({"list": "x", "sig": good["sig"]}));
    bad.push(json!([1]));
    for b in &bad {
        t.post_json(&relay, "/v2/relay/senders", b)
            .assert_some_error(400);
    }
    // No `sig`, or one that is not a string: not signed by the target (401, not 400).
    for sig in [None, Some(Value::Null), Some(json!(5)), Some(json!({}))] {
        let mut body = json!({ "list": good["list"] });
        if let Some(sig) = sig {
            body["sig"] = sig;
        }
        t.post_json(&relay, "/v2/relay/senders", &body)
            .assert_error(401, "sender list is not signed by the target");
    }
    // Signed by another key, or over other content.
    let mut forged = good.clone();
    forged["sig"] = json!(SigningKey::generate().sign(canonical_json(&good["list"]).as_bytes()));
    t.post_json(&relay, "/v2/relay/senders", &forged)
        .assert_some_error(401);
    let mut tampered = good.clone();
    tampered["list"]["senders"] = json!([random_pubkey()]);
    t.post_json(&relay, "/v2/relay/senders", &tampered)
        .assert_some_error(401);
    // Nothing was stored: the good list is still accepted.
    t.post_json(&relay, "/v2/relay/senders", &good).ok();
}

// ----- rotation -----

fn rotation_moves_queue_name_allowlists_and_revokes(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "rot-s");
    let outsider = Host::enrolled(&relay, "rot-x");
    let old = Host::enrolled(&relay, "rot-host");
    let peer = Host::enrolled(&relay, "rot-peer");
    // The new key is already enrolled (same name) and has its own item queued.
    let new = Host::enrolled(&relay, "rot-host");
    let pre = s.push_one(&relay, &envelope_item(&s, &[&new]));
    let pre_seq = pre["targets"][0]["seq"].as_u64().unwrap();
    // Old key: an allowlist, an enc ad, and two queued items.
    old.publish_senders(&relay, &[s.pubkey()], now_ms()).ok();
    old.publish_enc(&relay, &enc_pub()).ok();
    let i1 = envelope_item(&s, &[&old]);
    let i2 = receipt_item(&s, &old);
    let r = s.push_results(&relay, &[i1.clone(), i2.clone()]);
    assert!(r.iter().all(|x| x["status"] == json!("accepted")));
    // The peer only accepts the old key.
    peer.publish_senders(&relay, &[old.pubkey()], now_ms()).ok();

    let body = rotation("rot-host", &old.key, &new.key, None, None);
    let r = relay.post_json("/v2/relay/rotate", &body);
    assert_eq!(r.ok(), json!({"moved": 2}));

    // Queue: the new key's own item first, then the old queue in order, re-sequenced above it.
    let got = new.pull_all(&relay, 0);
    let ids: Vec<&Value> = got.iter().map(|i| &i["item_id"]).collect();
    assert_eq!(ids, vec![&pre["item_id"], &i1["item_id"], &i2["item_id"]]);
    let seqs: Vec<u64> = got.iter().map(|i| i["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs[0], pre_seq);
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert_eq!(
        got[1]["wire_b64"], i1["targets"][0]["wire_b64"],
        "bytes move unchanged"
    );
    assert_eq!(got[2]["kind"], json!("receipt"));
    assert_eq!(got[1]["sender_pubkey"], json!(s.pubkey()));
    // Dedup rows move: a retry addressed to the new key is a duplicate with the moved seq.
    let retry = item(
        "envelope",
        i1["item_id"].as_str().unwrap(),
        &[(new.pubkey(), item_wire(&i1))],
    );
    let d = s.push_one(&relay, &retry);
    assert_eq!(d["status"], json!("duplicate"), "{d}");
    assert_eq!(d["targets"][0]["seq"], json!(seqs[1]));
    // The old key is revoked: hops fail, pushes to it fail, re-enrolment is refused.
    old.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    assert_rejected(
        &s.push_one(&relay, &envelope_item(&s, &[&old])),
        "target not enrolled",
    );
    // The name and the allowlist moved to the new key.
    assert_eq!(new.info(&relay)["you"]["host"], json!("rot-host"));
    assert_rejected(
        &outsider.push_one(&relay, &envelope_item(&outsider, &[&new])),
        "sender not accepted by target",
    );
    assert_eq!(
        s.push_one(&relay, &envelope_item(&s, &[&new]))["status"],
        json!("accepted")
    );
    // Other targets' allowlists now name the new key instead of the old one.
    assert_eq!(
        new.push_one(&relay, &envelope_item(&new, &[&peer]))["status"],
        json!("accepted")
    );
    // The old enc ad is gone.
    s.get(
        &relay,
        &format!("/v2/relay/enc-key?pubkey={}", urlencode(&old.pubkey())),
    )
    .assert_error(404, "unknown host");
}

fn rotation_to_an_unenrolled_key_enrols_it(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "r2-s");
    let old = Host::enrolled(&relay, "r2-host");
    let items: Vec<Value> = (0..3).map(|_| envelope_item(&s, &[&old])).collect();
    s.push_results(&relay, &items);
    let new = Host::new("r2-host");
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("r2-host", &old.key, &new.key, None, None),
    );
    assert_eq!(r.ok(), json!({"moved": 3}));
    let got = new.pull_all(&relay, 0);
    let ids: Vec<&Value> = got.iter().map(|i| &i["item_id"]).collect();
    let want: Vec<&Value> = items.iter().map(|i| &i["item_id"]).collect();
    assert_eq!(ids, want);
    assert_eq!(new.info(&relay)["you"]["host"], json!("r2-host"));
}

/// Each refusal with the reference's exact text, in its order: the old key first (404, also
/// for a body with no `rotation` at all), then the record against it (400), then the new key
/// (409). A refusal changes nothing.
fn rotation_errors(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "re-a");
    let n = Host::new("re-a");
    let refused = |body: &Value, status: u16, text: &str| {
        let r = relay.post_json("/v2/relay/rotate", body);
        assert_eq!(r.status, status, "{body}: {}", r.text());
        assert_eq!(r.json(), json!({ "error": text }), "{body}");
    };
    let not_enrolled = "the rotated key is not enrolled here";
    let stranger = Host::new("re-z");
    for body in [
        rotation("re-z", &stranger.key, &n.key, None, None),
        json!({}),
        json!({"rotation": "x"}),
        json!({"rotation": null}),
        json!({"rotation": {"old_sig": "a", "new_sig": "b"}}),
        json!([]),
        {
            // An old_pub that is not a key is not enrolled either.
            let mut b = rotation("re-a", &a.key, &n.key, None, None);
            b["rotation"]["rec"]["old_pub"] = json!("short");
            b
        },
    ] {
        refused(&body, 404, not_enrolled);
    }
    let signed_after = |edit: &dyn Fn(&mut Value)| {
        let mut b = rotation("re-a", &a.key, &n.key, None, None);
        edit(&mut b["rotation"]["rec"]);
        let rec = b["rotation"]["rec"].clone();
        rotation_from_rec(&rec, &a.key, &n.key)
    };
    let other = SigningKey::generate();
    let cases: Vec<(Value, &str)> = vec![
        (
            signed_after(&|rec| {
                rec.as_object_mut().unwrap().remove("new_enc_pub");
            }),
            "not a rotation record",
        ),
        (
            signed_after(&|rec| rec["type"] = json!("rotation")),
            "not a rotation record",
        ),
        (
            signed_after(&|rec| rec["v"] = json!(2)),
            "not a rotation record",
        ),
        (
            signed_after(&|rec| rec["iat"] = json!(5)),
            "not a rotation record",
        ),
        (
            {
                let mut b = rotation("re-a", &a.key, &n.key, None, None);
                b["rotation"].as_object_mut().unwrap().remove("new_sig");
                b
            },
            "not a rotation record",
        ),
        (
            rotation("re-a", &a.key, &a.key, None, None),
            "rotation keeps the same host key",
        ),
        (
            rotation("re-a", &a.key, &n.key, Some(&other), None),
            "rotation is not signed by the pinned host key",
        ),
        (
            rotation("re-a", &a.key, &n.key, None, Some(&other)),
            "rotation is not signed by the new host key",
        ),
        (
            signed_after(&|rec| rec["new_pub"] = json!("short")),
            "rotation is not signed by the new host key",
        ),
        (
            rotation("re-other-name", &a.key, &n.key, None, None),
            "rotation names another host",
        ),
        // The name is the enrolled one exactly (the reference compares with `!==`).
        (
            rotation("RE-A", &a.key, &n.key, None, None),
            "rotation names another host",
        ),
        // The signatures are checked before the name.
        (
            rotation("re-other-name", &a.key, &n.key, Some(&other), None),
            "rotation is not signed by the pinned host key",
        ),
    ];
    for (body, text) in &cases {
        refused(body, 400, text);
    }
    // Nothing happened: a is still live and can rotate properly; only the types of
    // `new_enc_pub` and `iat` are checked, as the reference does.
    assert_eq!(a.info(&relay)["you"]["host"], json!("re-a"));
    let loose = signed_after(&|rec| {
        rec["new_enc_pub"] = json!("not read by the relay");
        rec["iat"] = json!("not read either");
    });
    assert_eq!(
        relay.post_json("/v2/relay/rotate", &loose).ok(),
        json!({"moved": 0})
    );
    // The old key is revoked now: rotating it again is not enrolled.
    refused(
        &rotation("re-a", &a.key, &Host::new("re-a").key, None, None),
        404,
        not_enrolled,
    );
    // 409: the new key is revoked here (rotating another host onto a's old key).
    let m = Host::enrolled(&relay, "re-m");
    refused(
        &rotation("re-m", &m.key, &a.key, None, None),
        409,
        "the new key was revoked here",
    );
    assert_eq!(m.info(&relay)["you"]["host"], json!("re-m"));
}

backend_tests! {
    enc_key_publish_and_lookup_v2_and_v1,
    enc_key_unknown_host_is_404,
    enc_key_by_name_needs_exactly_one_live_enrolment,
    enc_key_bad_signature_is_401,
    sender_list_restricts_pushes,
    sender_list_must_be_newer,
    sender_list_iat_at_most_five_minutes_ahead,
    sender_list_size_limit_is_1024,
    sender_list_malformed_is_400_and_bad_signature_401,
    rotation_moves_queue_name_allowlists_and_revokes,
    rotation_to_an_unenrolled_key_enrols_it,
    rotation_errors,
}
