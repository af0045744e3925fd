//! docs/protocol.md §3 "Push" and §5 (wire checks): every status, rejection reason and its order,
//! dedup, conflicts, quotas and the accept statement, against the real binary.
use crate::common;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::keys::b64;
use serde_json::{json, Value};

/// A relay with three enrolled hosts: sender `s`, targets `a` and `b`.
struct World {
    relay: Relay,
    s: Host,
    a: Host,
    b: Host,
}

fn world(backend: Backend, args: &[&str]) -> World {
    let relay = backend.start_generous(args);
    let s = Host::enrolled(&relay, "sender");
    let a = Host::enrolled(&relay, "alpha");
    let b = Host::enrolled(&relay, "bravo");
    World { relay, s, a, b }
}

/// Item ids in `h`'s queue, in seq order.
fn queue_ids(relay: &Relay, h: &Host) -> Vec<String> {
    h.pull_all(relay, 0)
        .iter()
        .map(|i| i["item_id"].as_str().unwrap().to_string())
        .collect()
}

fn head_seq(relay: &Relay, h: &Host) -> u64 {
    h.pull(relay, "").ok()["head_seq"].as_u64().unwrap()
}

fn status(r: &Value) -> String {
    r["status"]
        .as_str()
        .unwrap_or_else(|| panic!("no status: {r}"))
        .to_string()
}

fn accepted_push_has_a_verifiable_accept_statement_and_is_pullable_byte_exact(backend: Backend) {
    let w = world(backend, &[]);
    let info = w.relay.info();
    let (rk, epoch) = (
        info["relay_pubkey"].as_str().unwrap(),
        info["epoch"].as_str().unwrap(),
    );
    let it = envelope_item(&w.s, &[&w.a, &w.b]);
    let r = w.s.push(&w.relay, std::slice::from_ref(&it));
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_keys(&body, &["results"]);
    let res = &body["results"][0];
    assert_eq!(res["status"], json!("accepted"));
    let seqs = verify_accept(res, &it, &w.s, rk, epoch);
    // The acceptance time is now (ISO 8601 with milliseconds).
    let at = relay_wire::time::parse_iso_strict(res["accept"]["at"].as_str().unwrap())
        .expect("at parses") as i64;
    assert!(
        (at - now_ms()).abs() < 60_000,
        "accept.at {} is not now",
        res["accept"]["at"]
    );
    // Seqs look like millisecond timestamps: max(next_seq, now_ms).
    let before = now_ms() as u64 - 120_000;
    assert!(seqs.iter().all(|&s| s >= before), "seqs {seqs:?}");
    for (t, seq) in [(&w.a, seqs[0]), (&w.b, seqs[1])] {
        let p = t.pull(&w.relay, "?after=0").ok();
        let items = p["items"].as_array().unwrap();
        assert_eq!(items.len(), 1);
        assert_keys(
            &items[0],
            &["seq", "kind", "item_id", "sender_pubkey", "wire_b64"],
        );
        assert_eq!(
            items[0],
            json!({
                "seq": seq, "kind": "envelope", "item_id": it["item_id"],
                "sender_pubkey": w.s.pubkey(), "wire_b64": it["targets"][0]["wire_b64"],
            })
        );
    }
}

fn wire_bytes_are_stored_exactly_as_sent(backend: Backend) {
    let w = world(backend, &[]);
    let id = ulid();
    let env = sealed_envelope(&id, "agent@sender", &["agent@alpha".to_string()]);
    // Unusual but valid JSON: whitespace, escaped characters, non-ASCII, reordered keys.
    let mut text = serde_json::to_string_pretty(&env).unwrap();
    text = text.replacen("\"hello\"", "\"h\\u00e9llo \\/ \u{e9} \u{1f600}\"", 1);
    text.push_str("\n\t ");
    let wire = text.into_bytes();
    let it = item("envelope", &id, &[(w.a.pubkey(), wire.clone())]);
    let res = w.s.push_one(&w.relay, &it);
    assert_eq!(status(&res), "accepted", "{res}");
    assert_eq!(
        res["accept"]["targets"][0]["wire_hash"],
        json!(sha256_hex(&wire))
    );
    let got = w.a.pull_all(&w.relay, 0);
    assert_eq!(got[0]["wire_b64"], json!(b64(&wire)));
}

fn retry_is_a_duplicate_with_the_original_seq_and_acceptance_time(backend: Backend) {
    let w = world(backend, &[]);
    let (rk, epoch) = (w.relay.pubkey(), w.relay.epoch());
    let it = envelope_item(&w.s, &[&w.a, &w.b]);
    let first = w.s.push_one(&w.relay, &it);
    let seqs = verify_accept(&first, &it, &w.s, &rk, &epoch);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let again = w.s.push_one(&w.relay, &it);
    assert_eq!(status(&again), "duplicate");
    assert_eq!(verify_accept(&again, &it, &w.s, &rk, &epoch), seqs);
    assert_eq!(
        again["accept"]["at"], first["accept"]["at"],
        "duplicate carries original time"
    );
    assert_eq!(queue_ids(&w.relay, &w.a).len(), 1);
    assert_eq!(queue_ids(&w.relay, &w.b).len(), 1);
}

fn item_with_some_duplicate_targets_is_accepted_and_reports_original_seqs(backend: Backend) {
    let w = world(backend, &[]);
    let (rk, epoch) = (w.relay.pubkey(), w.relay.epoch());
    let id = ulid();
    let wire = envelope_wire(&id, &w.s, &[&w.a, &w.b]);
    let one = item("envelope", &id, &[(w.a.pubkey(), wire.clone())]);
    let first = w.s.push_one(&w.relay, &one);
    let seq_a = verify_accept(&first, &one, &w.s, &rk, &epoch)[0];
    let both = item(
        "envelope",
        &id,
        &[(w.a.pubkey(), wire.clone()), (w.b.pubkey(), wire)],
    );
    let res = w.s.push_one(&w.relay, &both);
    assert_eq!(status(&res), "accepted");
    let seqs = verify_accept(&res, &both, &w.s, &rk, &epoch);
    assert_eq!(seqs[0], seq_a);
    assert_eq!(queue_ids(&w.relay, &w.a), vec![id.clone()]);
    assert_eq!(queue_ids(&w.relay, &w.b), vec![id]);
}

fn same_item_id_with_other_wire_is_a_conflict_and_changes_nothing(backend: Backend) {
    let w = world(backend, &[]);
    let id = ulid();
    let w1 = envelope_wire(&id, &w.s, &[&w.a]);
    let w2 = envelope_wire(&id, &w.s, &[&w.a]);
    assert_ne!(w1, w2);
    let r1 = w.s.push_one(
        &w.relay,
        &item("envelope", &id, &[(w.a.pubkey(), w1.clone())]),
    );
    assert_eq!(status(&r1), "accepted");
    let r2 = w.s.push_one(
        &w.relay,
        &item("envelope", &id, &[(w.a.pubkey(), w2.clone())]),
    );
    assert_rejected(&r2, "conflict");
    // A conflict on one target rejects the whole item: the new target gets nothing.
    let r3 = w.s.push_one(
        &w.relay,
        &item(
            "envelope",
            &id,
            &[(w.b.pubkey(), w2.clone()), (w.a.pubkey(), w2)],
        ),
    );
    assert_rejected(&r3, "conflict");
    assert!(queue_ids(&w.relay, &w.b).is_empty());
    let got = w.a.pull_all(&w.relay, 0);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["wire_b64"], json!(b64(&w1)));
    // Dedup is per sender: another sender may use the same item id.
    let w3 = envelope_wire(&id, &w.b, &[&w.a]);
    let r4 =
        w.b.push_one(&w.relay, &item("envelope", &id, &[(w.a.pubkey(), w3)]));
    assert_eq!(status(&r4), "accepted");
}

fn receipt_items_are_accepted_and_checked(backend: Backend) {
    let w = world(backend, &[]);
    let (rk, epoch) = (w.relay.pubkey(), w.relay.epoch());
    let it = receipt_item(&w.s, &w.a);
    let res = w.s.push_one(&w.relay, &it);
    assert_eq!(status(&res), "accepted", "{res}");
    verify_accept(&res, &it, &w.s, &rk, &epoch);
    let got = w.a.pull_all(&w.relay, 0);
    assert_eq!(got[0]["kind"], json!("receipt"));
    assert_eq!(got[0]["item_id"], it["item_id"]);

    let rec = receipt_record(&ulid(), "agent@sender", 3);
    let good_id = receipt_item_id(&rec);
    // Item id that does not match the record.
    let wire = receipt_wire(&rec, &w.s.key);
    let r = w.s.push_one(
        &w.relay,
        &item("receipt", &format!("{good_id}0"), &[(w.a.pubkey(), wire)]),
    );
    assert_rejected(&r, "item id is not the receipt id");
    // Signed by a key other than the pushing host's.
    let wire = receipt_wire(&rec, &w.b.key);
    let r = w.s.push_one(
        &w.relay,
        &item("receipt", &good_id, &[(w.a.pubkey(), wire)]),
    );
    assert_rejected(&r, "receipt is not signed by the sending host");
    // Not JSON is bad wire (the reference's text); not {rec,sig} or a malformed record is a bad
    // receipt.
    assert_rejected(
        &w.s.push_one(
            &w.relay,
            &item("receipt", &good_id, &[(w.a.pubkey(), b"not json".to_vec())]),
        ),
        "bad wire",
    );
    for wire in [b"{}".to_vec(), b"[1]".to_vec(), b"\"x\"".to_vec()] {
        let r = w.s.push_one(
            &w.relay,
            &item("receipt", &good_id, &[(w.a.pubkey(), wire)]),
        );
        assert_rejected(&r, "bad receipt");
    }
    // Every receipt record vector of the reference, signed by the sender.
    let vectors = wire_vectors();
    for v in vectors["receipt_records"].as_array().unwrap() {
        let mut rec = v["record"].clone();
        let valid = v["valid"].as_bool().unwrap();
        if valid {
            rec["msg"] = json!(ulid()); // fresh ids so the valid ones do not conflict
        }
        let id = receipt_item_id(&rec);
        let wire = receipt_wire(&rec, &w.s.key);
        let r =
            w.s.push_one(&w.relay, &item("receipt", &id, &[(w.a.pubkey(), wire)]));
        if valid {
            assert_eq!(status(&r), "accepted", "{}: {r}", v["name"]);
        } else {
            assert_rejected(&r, "bad receipt");
        }
    }
}

fn every_envelope_shape_vector_gets_its_reason(backend: Backend) {
    let w = world(backend, &[]);
    let vectors = wire_vectors();
    let valid_sealed = vectors["envelope_shape"][0]["envelope"].clone();
    assert_eq!(vectors["envelope_shape"][0]["name"], json!("valid sealed"));
    let mut items = Vec::new();
    let mut expect = Vec::new();
    for v in vectors["envelope_shape"].as_array().unwrap() {
        let name = v["name"].as_str().unwrap();
        let mut env = v["envelope"].clone();
        if env.is_null() {
            env = valid_sealed.clone();
            match name {
                "sealed body 349549 bytes" => env["body"] = json!("a".repeat(349_549)),
                "plain body 262145 bytes" => {
                    env["enc"] = Value::Null;
                    env["body"] = json!("a".repeat(262_145));
                }
                other => panic!("unknown large vector {other}"),
            }
        }
        let expected = v["expected"].as_str();
        let reason = match expected {
            Some(why) => format!("rejected:bad envelope: {why}"),
            None if env["enc"].is_null() => "rejected:envelope body is not sealed".to_string(),
            None => {
                env["id"] = json!(ulid()); // valid ones must not dedup against each other
                "accepted".to_string()
            }
        };
        let id = env["id"]
            .as_str()
            .unwrap_or("01KB5Z2X3Y4Z5A6B7C8D9E0F1G")
            .to_string();
        let wire = serde_json::to_vec(&env).unwrap();
        items.push(item("envelope", &id, &[(w.a.pubkey(), wire)]));
        expect.push((name.to_string(), reason));
    }
    let results = w.s.push_results(&w.relay, &items);
    for ((name, want), got) in expect.iter().zip(&results) {
        assert_eq!(&status(got), want, "vector {name:?}: {got}");
        if let Some(reason) = want.strip_prefix("rejected:") {
            assert_rejected(got, reason);
        }
    }
}

fn envelope_wire_checks(backend: Backend) {
    let w = world(backend, &[]);
    let id = ulid();
    let env = sealed_envelope(&id, "agent@sender", &["agent@alpha".into()]);
    let push = |item_id: &str, wire: Vec<u8>| {
        w.s.push_one(
            &w.relay,
            &item("envelope", item_id, &[(w.a.pubkey(), wire)]),
        )
    };
    // item id is not the envelope id
    let r = push(&ulid(), serde_json::to_vec(&env).unwrap());
    assert_rejected(&r, "item id is not the envelope id");
    // not sealed
    let mut plain = env.clone();
    plain["enc"] = Value::Null;
    assert_rejected(
        &push(&id, serde_json::to_vec(&plain).unwrap()),
        "envelope body is not sealed",
    );
    // Non-JSON and non-UTF-8 wire bytes are bad wire (the reference's text).
    for wire in [
        b"{not json".to_vec(),
        vec![0xff, 0xfe, 0x00, 0x7b],
        Vec::from(&b"\xef\xbb\xbf{}"[..]),
    ] {
        let r = push(&id, wire);
        assert_rejected(&r, "bad wire");
    }
    // Sealed-part details.
    for (mutate, why) in [
        (
            json!({"v": 1, "alg": "x25519+xchacha20poly1305", "epk": b64(&[1; 31]), "nonce": b64(&[1; 24]), "body": "eA=="}),
            "bad enc epk",
        ),
        (
            json!({"v": 1, "alg": "x25519+xchacha20poly1305", "epk": b64(&[1; 32]), "nonce": b64(&[1; 12]), "body": "eA=="}),
            "bad enc nonce",
        ),
        (
            json!({"v": 1, "alg": "x25519+xchacha20poly1305", "epk": b64(&[1; 32]), "nonce": b64(&[1; 24]), "body": ""}),
            "bad enc body",
        ),
        (
            json!({"v": 2, "alg": "x25519+xchacha20poly1305", "epk": b64(&[1; 32]), "nonce": b64(&[1; 24]), "body": "eA=="}),
            "unsupported enc version",
        ),
        (
            json!({"v": 1, "alg": "aes-gcm", "epk": b64(&[1; 32]), "nonce": b64(&[1; 24]), "body": "eA=="}),
            "unsupported enc algorithm",
        ),
        (json!("sealed"), "bad enc"),
    ] {
        let mut e = env.clone();
        e["enc"] = mutate;
        assert_rejected(
            &push(&id, serde_json::to_vec(&e).unwrap()),
            &format!("bad envelope: {why}"),
        );
    }
    // A sealed body of exactly 349,548 bytes is fine; one more is not.
    let mut e = env.clone();
    e["enc"]["body"] = json!("Q".repeat(349_548));
    assert_eq!(
        status(&push(&id, serde_json::to_vec(&e).unwrap())),
        "accepted"
    );
    let id2 = ulid();
    let mut e = sealed_envelope(&id2, "agent@sender", &["agent@alpha".into()]);
    e["enc"]["body"] = json!("Q".repeat(349_549));
    assert_rejected(
        &push(&id2, serde_json::to_vec(&e).unwrap()),
        "bad envelope: sealed body over 349548 bytes",
    );
    // Unknown extra fields are allowed.
    let id3 = ulid();
    let mut e = sealed_envelope(&id3, "agent@sender", &["agent@alpha".into()]);
    e["x-extra"] = json!({"anything": [1, 2, 3]});
    assert_eq!(
        status(&push(&id3, serde_json::to_vec(&e).unwrap())),
        "accepted"
    );
}

fn bad_item_id_kind_and_targets(backend: Backend) {
    let w = world(backend, &[]);
    let good = envelope_item(&w.s, &[&w.a]);
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut it = good.clone();
    it["item_id"] = json!("");
    cases.push((it, "bad item id"));
    let mut it = good.clone();
    it["item_id"] = json!("i".repeat(301));
    cases.push((it, "bad item id"));
    let mut it = good.clone();
    it.as_object_mut().unwrap().remove("item_id");
    cases.push((it, "bad item id"));
    let mut it = good.clone();
    it["item_id"] = json!(12);
    cases.push((it, "bad item id"));
    // 300 chars is a fine item id: the item fails later, at the envelope id check.
    let mut it = good.clone();
    it["item_id"] = json!("i".repeat(300));
    cases.push((it, "item id is not the envelope id"));
    for kind in [
        json!("expired"),
        json!("Envelope"),
        json!(""),
        json!(1),
        Value::Null,
    ] {
        let mut it = good.clone();
        if kind.is_null() {
            it.as_object_mut().unwrap().remove("kind");
        } else {
            it["kind"] = kind;
        }
        cases.push((it, "bad kind"));
    }
    let mut it = good.clone();
    it["targets"] = json!([]);
    cases.push((it, "bad targets"));
    let mut it = good.clone();
    it.as_object_mut().unwrap().remove("targets");
    cases.push((it, "bad targets"));
    let mut it = good.clone();
    it["targets"] = json!("alpha");
    cases.push((it, "bad targets"));
    let mut it = good.clone();
    let t = good["targets"][0].clone();
    it["targets"] = Value::Array((0..65).map(|_| t.clone()).collect());
    cases.push((it, "bad targets"));
    // Order: item id before kind, kind before targets.
    let mut it = good.clone();
    it["item_id"] = json!("");
    it["kind"] = json!("nope");
    it["targets"] = json!([]);
    cases.push((it, "bad item id"));
    let mut it = good.clone();
    it["kind"] = json!("nope");
    it["targets"] = json!([]);
    cases.push((it, "bad kind"));
    let items: Vec<Value> = cases.iter().map(|(i, _)| i.clone()).collect();
    let results = w.s.push_results(&w.relay, &items);
    for ((it, want), got) in cases.iter().zip(&results) {
        assert_rejected(got, want);
        if let Some(id) = it["item_id"].as_str() {
            assert_eq!(got["item_id"], json!(id));
        }
    }
    assert!(queue_ids(&w.relay, &w.a).is_empty());
}

/// A rejected item whose `item_id` is not a string (missing, null, a number, an object, an
/// array, a boolean), or an item that is not an object at all (null included), is answered
/// with `"item_id":""`, never an echo of the value; a string id is echoed as sent.
fn rejected_items_echo_only_a_string_item_id(backend: Backend) {
    let w = world(backend, &[]);
    let good = envelope_item(&w.s, &[&w.a]);
    let mut items = vec![
        Value::Null,
        json!(5),
        json!("an item"),
        json!([good.clone()]),
    ];
    for id in [
        json!(12),
        Value::Null,
        json!({"a": 1}),
        json!(["x"]),
        json!(true),
    ] {
        let mut it = good.clone();
        it["item_id"] = id;
        items.push(it);
    }
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("item_id");
    items.push(missing);
    let results = w.s.push_results(&w.relay, &items);
    for (it, r) in items.iter().zip(&results) {
        assert_eq!(
            r,
            &json!({"item_id": "", "status": "rejected:bad item id", "targets": []}),
            "item {it}"
        );
    }
    let mut it = good.clone();
    it["kind"] = json!("nope");
    assert_eq!(
        w.s.push_one(&w.relay, &it),
        json!({"item_id": good["item_id"], "status": "rejected:bad kind", "targets": []})
    );
    assert!(queue_ids(&w.relay, &w.a).is_empty());
}

fn max_targets_is_inclusive(backend: Backend) {
    let relay = backend.start_generous(&["--max-targets", "3"]);
    let s = Host::enrolled(&relay, "s");
    let ts: Vec<Host> = (0..4)
        .map(|i| Host::enrolled(&relay, &format!("t{i}")))
        .collect();
    let refs: Vec<&Host> = ts.iter().collect();
    let r = s.push_one(&relay, &envelope_item(&s, &refs[..3]));
    assert_eq!(status(&r), "accepted", "{r}");
    let r = s.push_one(&relay, &envelope_item(&s, &refs));
    assert_rejected(&r, "bad targets");
}

fn per_target_checks_and_their_order(backend: Backend) {
    let w = world(backend, &[]);
    let unknown = Host::new("ghost");
    let id = ulid();
    let wire = envelope_wire(&id, &w.s, &[&w.a]);
    let cases: Vec<(Value, &str)> = vec![
        (
            item("envelope", &id, &[(unknown.pubkey(), wire.clone())]),
            "target not enrolled",
        ),
        // unknown target comes before a bad wire
        (
            json!({"kind": "envelope", "item_id": id, "targets": [{"host_pubkey": unknown.pubkey(), "wire_b64": "%%%"}]}),
            "target not enrolled",
        ),
        // partial fan-out: one bad target rejects the whole item
        (
            item(
                "envelope",
                &id,
                &[
                    (w.a.pubkey(), wire.clone()),
                    (unknown.pubkey(), wire.clone()),
                ],
            ),
            "target not enrolled",
        ),
        (
            item(
                "envelope",
                &id,
                &[(w.a.pubkey(), wire.clone()), (w.a.pubkey(), wire.clone())],
            ),
            "duplicate target",
        ),
        // a repeated target is found before the repeat's bad wire
        (
            json!({"kind": "envelope", "item_id": id, "targets": [
            {"host_pubkey": w.a.pubkey(), "wire_b64": b64(&wire)},
            {"host_pubkey": w.a.pubkey(), "wire_b64": "%%%"}]}),
            "duplicate target",
        ),
        (
            json!({"kind": "envelope", "item_id": id, "targets": [{"host_pubkey": w.a.pubkey(), "wire_b64": "%%%"}]}),
            "bad wire",
        ),
    ];
    let items: Vec<Value> = cases.iter().map(|(i, _)| i.clone()).collect();
    let results = w.s.push_results(&w.relay, &items);
    for ((_, want), got) in cases.iter().zip(&results) {
        assert_rejected(got, want);
        assert_eq!(got["item_id"], json!(id));
    }
    assert!(
        queue_ids(&w.relay, &w.a).is_empty(),
        "nothing stored for the good target"
    );
    assert_eq!(head_seq(&w.relay, &w.a), 0);
}

fn revoked_target_is_not_enrolled(backend: Backend) {
    let w = world(backend, &[]);
    let new = Host::new("alpha");
    w.relay
        .post_json(
            "/v2/relay/rotate",
            &rotation("alpha", &w.a.key, &new.key, None, None),
        )
        .ok();
    let r = w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.a]));
    assert_rejected(&r, "target not enrolled");
}

fn item_size_limit_is_inclusive_with_the_default_limit(backend: Backend) {
    let w = world(backend, &[]);
    let exact = envelope_item_sized(&w.s, &[&w.a], 524_288);
    assert_eq!(item_wire(&exact).len(), 524_288);
    let r = w.s.push_one(&w.relay, &exact);
    assert_eq!(status(&r), "accepted", "{r}");
    let over = envelope_item_sized(&w.s, &[&w.a], 524_289);
    assert_rejected(&w.s.push_one(&w.relay, &over), "item over size limit");
    // Size is checked before the wire check: an oversized non-envelope is still "over size".
    let junk = item("envelope", &ulid(), &[(w.a.pubkey(), vec![b'x'; 524_289])]);
    assert_rejected(&w.s.push_one(&w.relay, &junk), "item over size limit");
    // ...and after the base64 check.
    let bad = json!({"kind": "envelope", "item_id": ulid(), "targets": [{"host_pubkey": w.a.pubkey(), "wire_b64": format!("{}%", "A".repeat(700_000))}]});
    assert_rejected(&w.s.push_one(&w.relay, &bad), "bad wire");
}

fn item_size_limit_follows_the_flag(backend: Backend) {
    let w = world(backend, &["--max-item-bytes", "2000"]);
    assert_eq!(
        status(&w.s.push_one(&w.relay, &envelope_item_sized(&w.s, &[&w.a], 2000))),
        "accepted"
    );
    assert_rejected(
        &w.s.push_one(&w.relay, &envelope_item_sized(&w.s, &[&w.a], 2001)),
        "item over size limit",
    );
}

fn batch_shape_and_max_batch(backend: Backend) {
    let w = world(backend, &["--max-batch", "3"]);
    let items: Vec<Value> = (0..3).map(|_| envelope_item(&w.s, &[&w.a])).collect();
    let res = w.s.push_results(&w.relay, &items);
    assert!(res.iter().all(|r| r["status"] == json!("accepted")));
    let four: Vec<Value> = (0..4).map(|_| envelope_item(&w.s, &[&w.a])).collect();
    w.s.push(&w.relay, &four).assert_some_error(400);
    assert_eq!(
        queue_ids(&w.relay, &w.a).len(),
        3,
        "a refused batch stores nothing"
    );
    for body in [
        json!({"items": {}}),
        json!({"items": "x"}),
        json!({}),
        json!([]),
        json!({"items": null}),
    ] {
        w.s.post_json(&w.relay, "/v2/relay/items", &body)
            .assert_some_error(400);
    }
    // An empty batch is fine.
    assert_eq!(w.s.push(&w.relay, &[]).ok(), json!({"results": []}));
}

fn default_max_batch_is_200(backend: Backend) {
    let w = world(backend, &[]);
    let junk = json!({"kind": "nope", "item_id": "x", "targets": []});
    let r = w.s.push_results(&w.relay, &vec![junk.clone(); 200]);
    assert!(r.iter().all(|x| x["status"] == json!("rejected:bad kind")));
    w.s.push(&w.relay, &vec![junk; 201]).assert_some_error(400);
}

fn results_are_one_per_item_in_order(backend: Backend) {
    let w = world(backend, &[]);
    let good1 = envelope_item(&w.s, &[&w.a]);
    let bad = json!({"kind": "nope", "item_id": "bad-1", "targets": []});
    let good2 = receipt_item(&w.s, &w.b);
    let res =
        w.s.push_results(&w.relay, &[good1.clone(), bad, good2.clone()]);
    assert_eq!(res[0]["item_id"], good1["item_id"]);
    assert_eq!(status(&res[0]), "accepted");
    assert_eq!(res[1]["item_id"], json!("bad-1"));
    assert_rejected(&res[1], "bad kind");
    assert_eq!(res[2]["item_id"], good2["item_id"]);
    assert_eq!(status(&res[2]), "accepted");
}

fn push_rate_is_per_sender_per_request_and_checked_first(backend: Backend) {
    let relay = backend.start(&[
        "--pushes-per-minute",
        "2",
        "--enrol-per-minute",
        "1000",
        "--enrol-per-minute-v4-24",
        "1000",
        "--enrol-per-minute-v6-48",
        "1000",
    ]);
    let s = Host::enrolled(&relay, "rs");
    let t = Host::enrolled(&relay, "rt");
    let a = Host::enrolled(&relay, "ra");
    // Counted per request: three items in one request are one push.
    let three: Vec<Value> = (0..3).map(|_| envelope_item(&s, &[&a])).collect();
    assert!(s
        .push_results(&relay, &three)
        .iter()
        .all(|r| r["status"] == json!("accepted")));
    assert_eq!(
        status(&s.push_one(&relay, &envelope_item(&s, &[&a]))),
        "accepted"
    );
    // Third request this minute: every item is rejected:rate, even one that is otherwise bad.
    let res = s.push_results(
        &relay,
        &[
            envelope_item(&s, &[&a]),
            json!({"kind": "x", "item_id": "", "targets": []}),
        ],
    );
    assert_rejected(&res[0], "rate");
    assert_rejected(&res[1], "rate");
    assert_eq!(queue_ids(&relay, &a).len(), 4);
    // Another sender has its own window.
    assert_eq!(
        status(&t.push_one(&relay, &envelope_item(&t, &[&a]))),
        "accepted"
    );
}

// ----- quotas (inclusive; a quota failure stores nothing) -----

fn assert_quota(r: &Value) {
    let s = status(r);
    let text = s
        .strip_prefix("rejected:quota:")
        .unwrap_or_else(|| panic!("not a quota rejection: {r}"));
    assert!(!text.trim().is_empty(), "quota text names the quota: {s}");
    assert_eq!(r["targets"], json!([]));
    assert!(r.get("accept").is_none());
}

fn queue_item_quota(backend: Backend) {
    let w = world(backend, &["--max-queue-items", "3"]);
    let first = envelope_item(&w.s, &[&w.a]);
    assert_eq!(status(&w.s.push_one(&w.relay, &first)), "accepted");
    for _ in 0..2 {
        assert_eq!(
            status(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.a]))),
            "accepted"
        );
    }
    assert_eq!(
        queue_ids(&w.relay, &w.a).len(),
        3,
        "queue reached exactly its cap"
    );
    assert_quota(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.a])));
    // Other senders hit the same target cap.
    assert_quota(&w.b.push_one(&w.relay, &envelope_item(&w.b, &[&w.a])));
    // One full target rejects the whole item: the other target gets nothing.
    assert_quota(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.b, &w.a])));
    assert!(queue_ids(&w.relay, &w.b).is_empty());
    // A retry of a stored item is still a duplicate; another wire is still a conflict.
    assert_eq!(status(&w.s.push_one(&w.relay, &first)), "duplicate");
    let id = first["item_id"].as_str().unwrap();
    let other = item(
        "envelope",
        id,
        &[(w.a.pubkey(), envelope_wire(id, &w.s, &[&w.a]))],
    );
    assert_rejected(&w.s.push_one(&w.relay, &other), "conflict");
    // Acking frees room.
    let items = w.a.pull_all(&w.relay, 0);
    let through = items[0]["seq"].as_u64().unwrap();
    w.a.ack(&w.relay, &w.relay.epoch(), json!(through)).ok();
    assert_eq!(
        status(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.a]))),
        "accepted"
    );
}

fn queue_byte_quota(backend: Backend) {
    let w = world(backend, &["--max-queue-bytes", "3000"]);
    for _ in 0..3 {
        let r =
            w.s.push_one(&w.relay, &envelope_item_sized(&w.s, &[&w.a], 1000));
        assert_eq!(status(&r), "accepted", "{r}");
    }
    assert_quota(&w.b.push_one(&w.relay, &envelope_item_sized(&w.b, &[&w.a], 1000)));
    assert_eq!(queue_ids(&w.relay, &w.a).len(), 3);
    // Other targets are not affected.
    assert_eq!(
        status(&w.s.push_one(&w.relay, &envelope_item_sized(&w.s, &[&w.b], 1000))),
        "accepted"
    );
}

fn sender_share_item_quota(backend: Backend) {
    let w = world(backend, &["--max-sender-items", "2"]);
    for _ in 0..2 {
        assert_eq!(
            status(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.a]))),
            "accepted"
        );
    }
    assert_quota(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.a])));
    // Another sender still has its share of the same queue; the same sender has a share elsewhere.
    assert_eq!(
        status(&w.b.push_one(&w.relay, &envelope_item(&w.b, &[&w.a]))),
        "accepted"
    );
    assert_eq!(
        status(&w.s.push_one(&w.relay, &envelope_item(&w.s, &[&w.b]))),
        "accepted"
    );
    assert_eq!(queue_ids(&w.relay, &w.a).len(), 3);
}

fn sender_share_byte_quota(backend: Backend) {
    let w = world(backend, &["--max-sender-bytes", "2000"]);
    for _ in 0..2 {
        assert_eq!(
            status(&w.s.push_one(&w.relay, &envelope_item_sized(&w.s, &[&w.a], 1000))),
            "accepted"
        );
    }
    assert_quota(&w.s.push_one(&w.relay, &envelope_item_sized(&w.s, &[&w.a], 1000)));
    assert_eq!(
        status(&w.b.push_one(&w.relay, &envelope_item_sized(&w.b, &[&w.a], 1000))),
        "accepted"
    );
}

fn item_id_length_counts_like_javascript_string_length(backend: Backend) {
    let w = world(backend, &[]);
    let good = envelope_item(&w.s, &[&w.a]);
    let with_id = |id: String| {
        let mut it = good.clone();
        it["item_id"] = json!(id);
        it
    };
    let items = vec![
        // 300 two-byte characters: 300 long (600 bytes), fine; fails later at the envelope id.
        with_id("\u{e9}".repeat(300)),
        // 150 astral characters are 300 UTF-16 code units: fine.
        with_id("\u{1f600}".repeat(150)),
        // 151 astral characters are 302 UTF-16 code units: over 300.
        with_id("\u{1f600}".repeat(151)),
        with_id("\u{e9}".repeat(301)),
    ];
    let res = w.s.push_results(&w.relay, &items);
    assert_rejected(&res[0], "item id is not the envelope id");
    assert_rejected(&res[1], "item id is not the envelope id");
    assert_rejected(&res[2], "bad item id");
    assert_rejected(&res[3], "bad item id");
}

/// agentmbx T344 (issue 25): each malformed `meta.external_since` / `external_source` shape is
/// rejected with its reason and leaves the queue as it was; well-formed ones are accepted.
fn envelope_external_since_and_source(backend: Backend) {
    let w = world(backend, &[]);
    let since = "2026-11-29T14:00:00.123Z";
    let cases = [
        (
            json!({"origin": "external", "external_since": since, "external_source": "declared"}),
            None,
        ),
        (json!({"origin": "external", "external_since": since}), None),
        (
            json!({"origin": "external", "external_since": "9999-12-31T23:59:59Z"}),
            None,
        ),
        (json!({"external_since": since}), Some("bad external_since")),
        (
            json!({"origin": "agent", "external_since": since}),
            Some("bad external_since"),
        ),
        (
            json!({"origin": "external", "external_since": "2026-11-29"}),
            Some("bad external_since"),
        ),
        (
            json!({"origin": "external", "external_since": "2026-11-29T14:00:00+00:00"}),
            Some("bad external_since"),
        ),
        (
            json!({"origin": "external", "external_since": 1_795_960_800_000u64}),
            Some("bad external_since"),
        ),
        (
            json!({"origin": "external", "external_since": "2026-13-01T00:00:00Z"}),
            Some("bad external_since"),
        ),
        (
            json!({"origin": "external", "external_since": "2026-02-30T00:00:00Z"}),
            Some("bad external_since"),
        ),
        (
            json!({"origin": "external", "external_source": "declared"}),
            Some("bad external_source"),
        ),
        (
            json!({"origin": "external", "external_since": since, "external_source": "trusted"}),
            Some("bad external_source"),
        ),
        (
            json!({"origin": "robot", "external_since": "x"}),
            Some("bad origin"),
        ),
        (
            json!({"external_since": "x", "project": 1}),
            Some("bad external_since"),
        ),
    ];
    let mut items = Vec::new();
    for (members, _) in &cases {
        let id = ulid();
        let mut env = sealed_envelope(&id, "agent@sender", &["agent@alpha".into()]);
        env["meta"]
            .as_object_mut()
            .unwrap()
            .extend(members.as_object().unwrap().clone());
        let wire = serde_json::to_vec(&env).unwrap();
        items.push(item("envelope", &id, &[(w.a.pubkey(), wire)]));
    }
    let results = w.s.push_results(&w.relay, &items);
    let mut accepted = Vec::new();
    for (((members, want), got), it) in cases.iter().zip(&results).zip(&items) {
        match want {
            None => {
                assert_eq!(status(got), "accepted", "{members}: {got}");
                accepted.push(it["item_id"].as_str().unwrap().to_string());
            }
            Some(why) => assert_rejected(got, &format!("bad envelope: {why}")),
        }
    }
    // Only the accepted ones were stored: the queue holds exactly them.
    assert_eq!(accepted.len(), 3);
    assert_eq!(queue_ids(&w.relay, &w.a), accepted);
}

backend_tests! {
    accepted_push_has_a_verifiable_accept_statement_and_is_pullable_byte_exact,
    wire_bytes_are_stored_exactly_as_sent,
    retry_is_a_duplicate_with_the_original_seq_and_acceptance_time,
    item_with_some_duplicate_targets_is_accepted_and_reports_original_seqs,
    same_item_id_with_other_wire_is_a_conflict_and_changes_nothing,
    receipt_items_are_accepted_and_checked,
    every_envelope_shape_vector_gets_its_reason,
    envelope_wire_checks,
    envelope_external_since_and_source,
    bad_item_id_kind_and_targets,
    rejected_items_echo_only_a_string_item_id,
    max_targets_is_inclusive,
    per_target_checks_and_their_order,
    revoked_target_is_not_enrolled,
    item_size_limit_is_inclusive_with_the_default_limit,
    item_size_limit_follows_the_flag,
    batch_shape_and_max_batch,
    default_max_batch_is_200,
    results_are_one_per_item_in_order,
    push_rate_is_per_sender_per_request_and_checked_first,
    queue_item_quota,
    queue_byte_quota,
    sender_share_item_quota,
    sender_share_byte_quota,
    item_id_length_counts_like_javascript_string_length,
}
