//! Request bodies of every endpoint, through the exact functions the HTTP handler calls:
//! `relay::parse_json` then the relay method, on a real relay over a real store.
//!
//! Input: first byte picks the endpoint (and whether the harness signs the fuzzed record so the
//! input reaches the checks behind the signature), the rest is the body. Oracle: no panic, no
//! unbounded allocation, and every answer is a JSON object (`{"error": <non-empty string>, ...}`
//! for refusals) — the relay never answers without a clear error.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use libfuzzer_sys::fuzz_target;
use mbx_relay_fuzz::{fields, text, Fixture};
use relay_core::EncLookup;
use relay_core::PullQuery;
use relay_core::{parse_json, Reply};
use relay_wire::canonical::canonical_json;
use relay_wire::keys::{b64, SigningKey};
use relay_wire::receipt::receipt_item_id;
use relay_wire::records::{enc_ad_statement, enrol_statement};
use serde_json::{json, Value};

const MODES: u8 = 19;

/// Every answer is an object; a refusal carries a non-empty `error` string.
fn check_reply(mode: u8, r: &Reply) {
    match r {
        Ok(v) => assert!(
            v.is_object(),
            "mode {mode}: success body is not an object: {v}"
        ),
        Err(e) => {
            let msg = e.body.get("error").and_then(Value::as_str);
            assert!(
                msg.is_some_and(|m| !m.is_empty()),
                "mode {mode}: refusal without an error string: {}",
                e.body
            );
        }
    }
}

/// Keep `bravo`'s queue from filling up (quota rejections would hide the commit path).
fn drain_now_and_then(f: &Fixture) {
    static N: AtomicU64 = AtomicU64::new(0);
    if !N.fetch_add(1, Ordering::Relaxed).is_multiple_of(512) {
        return;
    }
    for c in [&f.caller_b, &f.caller_a] {
        let head = f
            .relay
            .store()
            .cursor(&c.key)
            .map(|c| c.head_seq)
            .unwrap_or(0);
        let body = json!({"epoch": f.relay.epoch(), "through": head});
        let r = f.rt.block_on(f.relay.ack(c, &body));
        assert!(r.is_ok(), "fixture ack failed: {r:?}");
    }
}

/// A push body of one item for `bravo` carrying `wire`.
fn one_item(kind: &str, item_id: &str, target: &str, wire: &[u8]) -> Value {
    json!({"items": [{"kind": kind, "item_id": item_id,
        "targets": [{"host_pubkey": target, "wire_b64": b64(wire)}]}]})
}

/// The `id` of a JSON envelope, when there is one (so the item id check passes).
fn envelope_id(wire: &[u8]) -> String {
    serde_json::from_slice::<Value>(wire)
        .ok()
        .and_then(|v| v.get("id").and_then(Value::as_str).map(str::to_owned))
        .unwrap_or_else(|| "01ARZ3NDEKTSV4RRFFQ69G5FAV".to_owned())
}

fn run(f: &Fixture, mode: u8, body: &[u8]) {
    let relay = &f.relay;
    let rt = &f.rt;
    let parsed = parse_json(body);
    let b_pub = f.b.public_b64();
    let reply: Reply = match mode {
        0 => parsed.and_then(|v| rt.block_on(relay.challenge(&v))),
        1 => parsed.and_then(|v| rt.block_on(relay.enrol(&v))),
        2 => {
            // Enrol a fixed key with the fuzzed host/owner_fp, correctly signed.
            let Ok(mut v) = parsed else { return };
            let Some(o) = v.as_object_mut() else { return };
            let key = SigningKey::from_seed(&[7u8; 32]);
            let pk = key.public_b64();
            let Ok(c) = rt.block_on(relay.challenge(&json!({"host": "enrolee", "pubkey": pk})))
            else {
                return;
            };
            let challenge = c["challenge"].as_str().unwrap_or_default();
            let host = o
                .get("host")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let owner = o
                .get("owner_fp")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let stmt = enrol_statement(challenge, &host, &pk, &owner);
            o.insert("pubkey".into(), json!(pk));
            o.insert(
                "sig".into(),
                json!(key.sign(canonical_json(&stmt).as_bytes())),
            );
            rt.block_on(relay.enrol(&v))
        }
        3 => parsed.and_then(|v| rt.block_on(relay.put_enc_ad(&f.caller_a, &v))),
        4 => {
            let Ok(mut v) = parsed else { return };
            let Some(o) = v.as_object_mut() else { return };
            let enc = o
                .get("enc_pub")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let sig =
                f.a.sign(canonical_json(&enc_ad_statement("alpha", &enc)).as_bytes());
            o.insert("sig".into(), json!(sig));
            rt.block_on(relay.put_enc_ad(&f.caller_a, &v))
        }
        5 => parsed.and_then(|v| rt.block_on(relay.put_sender_list(&f.caller_s, &v))),
        6 => {
            // The fuzzed value is the list record; the harness signs it with `lists`' key.
            let Ok(mut list) = parsed else { return };
            if let Some(o) = list.as_object_mut() {
                o.insert("host_pubkey".into(), json!(f.s.public_b64()));
            }
            let sig = f.s.sign(canonical_json(&list).as_bytes());
            rt.block_on(relay.put_sender_list(&f.caller_s, &json!({"list": list, "sig": sig})))
        }
        7 => parsed.and_then(|v| rt.block_on(relay.rotate(&v))),
        8 => {
            // The fuzzed value is the rotation record; old/new keys are real and both sign.
            let Ok(mut rec) = parsed else { return };
            let mut r = f.r.lock().unwrap_or_else(|p| p.into_inner());
            let new = SigningKey::generate();
            if let Some(o) = rec.as_object_mut() {
                o.insert("old_pub".into(), json!(r.public_b64()));
                o.insert("new_pub".into(), json!(new.public_b64()));
            }
            let c = canonical_json(&rec);
            let body = json!({"rotation": {"rec": rec,
                "old_sig": r.sign(c.as_bytes()), "new_sig": new.sign(c.as_bytes())}});
            let out = rt.block_on(relay.rotate(&body));
            if out.is_ok() {
                *r = new;
            }
            out
        }
        9 => parsed.and_then(|v| rt.block_on(relay.push(&f.caller_a, &v))),
        10 => {
            let v = one_item("envelope", &envelope_id(body), &b_pub, body);
            rt.block_on(relay.push(&f.caller_a, &v))
        }
        11 => {
            // The fuzzed value is a receipt record, signed by the pushing host.
            let Ok(rec) = parsed else { return };
            let sig = f.a.sign(canonical_json(&rec).as_bytes());
            let wire = canonical_json(&json!({"rec": rec, "sig": sig}));
            let id = receipt_item_id(&rec).unwrap_or_else(|| "receipt:x".into());
            let v = one_item("receipt", &id, &b_pub, wire.as_bytes());
            rt.block_on(relay.push(&f.caller_a, &v))
        }
        12 => {
            let id = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|v| v.get("rec").and_then(receipt_item_id))
                .unwrap_or_else(|| "receipt:x".into());
            let v = one_item("receipt", &id, &b_pub, body);
            rt.block_on(relay.push(&f.caller_a, &v))
        }
        13 => parsed.and_then(|v| rt.block_on(relay.ack(&f.caller_b, &v))),
        14 => {
            let p = fields(body, 4);
            let (after, limit, epoch) = (text(p[1]), text(p[2]), text(p[3]));
            let present = |i: usize| p[0].get(i).is_some_and(|b| b & 1 == 1);
            let q = PullQuery {
                after: present(0).then_some(after.as_str()),
                limit: present(1).then_some(limit.as_str()),
                epoch: present(2).then_some(epoch.as_str()),
                // No wait: a held pull would stall the fuzzer; waiting is tested end to end.
                wait: None,
            };
            // The page is JSON text written without a value tree: it must parse.
            relay.pull_open(&f.caller_b, q).and_then(|mut pull| {
                let max = relay.limits().max_pull_bytes;
                rt.block_on(relay.pull_page(&mut pull, max)).map(|page| {
                    let page = page.expect("a pull without wait= never waits");
                    serde_json::from_slice::<Value>(&page).expect("a pull page is valid JSON")
                })
            })
        }
        15 => rt.block_on(relay.push_v1(&f.caller_a, body)),
        16 => parsed.and_then(|v| rt.block_on(relay.ack_v1(&f.caller_b, &v))),
        17 => {
            let after = text(body);
            let after = (!body.is_empty()).then_some(after.as_str());
            rt.block_on(relay.pull_v1(&f.caller_b, after))
        }
        _ => {
            let p = fields(body, 2);
            let s = text(p[1]);
            let lookup = match p[0].first() {
                None => None,
                Some(b) if b & 1 == 0 => Some(EncLookup::Key(&s)),
                Some(_) => Some(EncLookup::Name(&s)),
            };
            relay.get_enc_ad(&f.caller_b, lookup)
        }
    };
    check_reply(mode, &reply);
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let f = Fixture::get();
    drain_now_and_then(f);
    run(f, first % MODES, body);
});
