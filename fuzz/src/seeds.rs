//! Writes the committed seed corpora under `fuzz/corpus/<target>/`: valid inputs for every mode of
//! every target (so fuzzing starts at the accepted paths), the reference wire vectors, and a real
//! small backup produced by `Store::backup_to` from a relay that enrolled hosts, stored enc ads
//! (v1 and v2), a sender list and queued items.
//!
//! Used by `examples/make_seeds.rs` (run from `fuzz/`: `cargo run --example make_seeds`) and by
//! the workspace test `tests/it/hardening_fuzz_seeds.rs`, which checks the seeds are what they claim
//! (and rewrites `fuzz/corpus` with `MBX_WRITE_FUZZ_SEEDS=1`). Deterministic names; contents of
//! signed seeds change per run (fresh keys and timestamps), which does not matter to the fuzzer.

use std::path::Path;

use super::{now_ms, Fixture};
use relay_wire::canonical::canonical_json;
use relay_wire::hop::sign_hop;
use relay_wire::keys::{b64, SigningKey};
use relay_wire::time::iso_ms;
use serde_json::{json, Value};

const ULID: &str = "01KB5Z2X3Y4Z5A6B7C8D9E0F1G";

fn write(root: &Path, target: &str, name: &str, mode: Option<u8>, body: &[u8]) {
    let dir = root.join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    let mut bytes = Vec::with_capacity(body.len() + 1);
    bytes.extend(mode);
    bytes.extend_from_slice(body);
    std::fs::write(dir.join(name), bytes).expect("write seed");
}

fn sealed_envelope(id: &str) -> Value {
    json!({
        "v": 3, "id": id, "ts": iso_ms(now_ms()), "from": "agent@alpha", "to": ["bob@bravo"],
        "thread": id, "reply_to": null, "kind": "message", "subject": "hello",
        "body": "Y2lwaGVy", "needs_reply": false, "refs": [],
        "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
        "authority": null,
        "enc": {"v": 1, "alg": "x25519+xchacha20poly1305",
            "epk": b64(&[3u8; 32]), "nonce": b64(&[4u8; 24]), "body": "Y2lwaGVy"},
    })
}

fn receipt_rec() -> Value {
    json!({"v": 1, "type": "receipt", "msg": ULID, "recipient": "agent@alpha",
        "state": "read", "at": iso_ms(now_ms()), "seq": 2})
}

fn rotation_rec() -> Value {
    json!({"v": 1, "type": "host-rotation", "host": "rot", "old_pub": "", "new_pub": "",
        "new_enc_pub": b64(&[5u8; 32]), "iat": iso_ms(now_ms())})
}

fn senders_list(host_pubkey: &str, senders: &[String]) -> Value {
    json!({"v": 1, "type": "relay-senders", "host_pubkey": host_pubkey,
        "senders": senders, "iat": iso_ms(now_ms())})
}

/// A v2 enc ad valid for 30 days from now.
fn enc_ad_v2(host_pubkey: &str, host: &str) -> Value {
    let now = now_ms();
    json!({"v": 2, "type": "enc-ad", "host": host, "host_pubkey": host_pubkey,
        "enc_pub": b64(&[6u8; 32]), "iat": iso_ms(now), "exp": iso_ms(now + 30 * 86_400_000)})
}

fn vectors() -> Value {
    serde_json::from_str(include_str!("../../tests/fixtures/wire-vectors.json")).expect("vectors")
}

/// Write every seed under `root/<target>/`; returns the real backup's bytes.
///
/// # Panics
/// When the fixture relay refuses a valid call (the seeds would be wrong).
pub fn write_all(root: &Path) -> Vec<u8> {
    let f = Fixture::get();
    let a_pub = f.a.public_b64();
    let b_pub = f.b.public_b64();
    let env = serde_json::to_vec(&sealed_envelope(ULID)).expect("json");
    let rec = receipt_rec();
    let rsig = f.a.sign(canonical_json(&rec).as_bytes());
    let receipt_wire = canonical_json(&json!({"rec": rec, "sig": rsig}));
    let receipt_id = format!("receipt:{ULID}:agent@alpha:2");
    let s = |v: &Value| v.to_string().into_bytes();

    // bodies: one seed per mode.
    let push = json!({"items": [{"kind": "envelope", "item_id": ULID,
        "targets": [{"host_pubkey": b_pub, "wire_b64": b64(&env)}]}]});
    let bodies: Vec<(u8, Vec<u8>)> = vec![
        (0, s(&json!({"host": "newhost", "pubkey": a_pub}))),
        (
            1,
            s(&json!({"host": "alpha", "pubkey": a_pub, "owner_fp": "", "sig": "AAAA"})),
        ),
        (2, s(&json!({"host": "enrolee", "owner_fp": "acct-1"}))),
        (3, s(&json!({"enc_pub": b64(&[9u8; 32]), "sig": "AAAA"}))),
        (4, s(&json!({"enc_pub": b64(&[9u8; 32])}))),
        (
            5,
            s(&json!({"list": senders_list(&b_pub, std::slice::from_ref(&a_pub)), "sig": "AAAA"})),
        ),
        (6, s(&senders_list("", &[a_pub.clone(), b_pub.clone()]))),
        (
            7,
            s(&json!({"rotation": {"rec": rotation_rec(), "old_sig": "", "new_sig": ""}})),
        ),
        (8, s(&rotation_rec())),
        (9, s(&push)),
        (10, env.clone()),
        (11, s(&rec)),
        (12, receipt_wire.clone().into_bytes()),
        (13, s(&json!({"epoch": f.relay.epoch(), "through": 0}))),
        (
            14,
            [
                b"\x01\x01\x01\xff0\xff100\xff".as_slice(),
                f.relay.epoch().as_bytes(),
            ]
            .concat(),
        ),
        (
            15,
            s(&json!({"envelopes": [sealed_envelope("01KB5Z2X3Y4Z5A6B7C8D9E0F1H")]})),
        ),
        (16, s(&json!({"cursor": 0}))),
        (17, b"0".to_vec()),
        (18, [b"\x00\xff".as_slice(), b_pub.as_bytes()].concat()),
        (18, b"\x01\xffbravo".to_vec()),
    ];
    for (i, (mode, body)) in bodies.iter().enumerate() {
        write(
            root,
            "bodies",
            &format!("seed-{i:02}-mode{mode}"),
            Some(*mode),
            body,
        );
    }

    // hop: a correctly signed hop by alpha (flags: query, host, key, ts, sig present).
    let ts = now_ms().to_string();
    let body = "{\"items\":[]}";
    let sig = sign_hop(&f.a, "POST", "/v2/relay/items", &ts, body);
    let hop = [
        &[0x1F][..],
        b"\xffalpha\xff",
        a_pub.as_bytes(),
        b"\xff",
        ts.as_bytes(),
        b"\xff",
        sig.as_bytes(),
        b"\xffPOST\xff/v2/relay/items\xffafter=0&limit=10\xff",
        body.as_bytes(),
    ]
    .concat();
    write(root, "hop", "seed-00-signed", None, &hop);
    for (i, h) in vectors()["hops"]
        .as_array()
        .expect("hops")
        .iter()
        .enumerate()
    {
        let g = |k: &str| h[k].as_str().unwrap_or_default().as_bytes().to_vec();
        let seed = [
            vec![0x3E, 0xFF],
            g("host"),
            vec![0xFF],
            vec![0xFF],
            g("ts"),
            vec![0xFF],
            g("x_mbx_sig"),
            vec![0xFF],
            g("method"),
            vec![0xFF],
            g("signed_path"),
            vec![0xFF, 0xFF],
            g("body"),
        ]
        .concat();
        write(
            root,
            "hop",
            &format!("seed-{:02}-vector", i + 1),
            None,
            &seed,
        );
    }

    // shapes: modes 0 envelope, 1 receipt raw, 2 receipt signed, 3/4 senders, 5/6 rotation,
    // 7/8 v2 enc ad.
    write(root, "shapes", "seed-00-envelope", Some(0), &env);
    // agentmbx T344: an external origin with its since and source (valid), and a month-13 since.
    for (name, since) in [
        ("seed-00-envelope-external", "2026-11-29T14:00:00.123Z"),
        ("seed-00-envelope-external-month13", "2026-13-29T14:00:00Z"),
    ] {
        let mut e = sealed_envelope(ULID);
        e["meta"]["origin"] = json!("external");
        e["meta"]["external_since"] = json!(since);
        e["meta"]["external_source"] = json!("declared");
        write(
            root,
            "shapes",
            name,
            Some(0),
            &serde_json::to_vec(&e).expect("json"),
        );
    }
    for (i, e) in vectors()["envelope_shape"]
        .as_array()
        .expect("shapes")
        .iter()
        .enumerate()
    {
        write(
            root,
            "shapes",
            &format!("seed-v{i:02}-envelope"),
            Some(0),
            &s(&e["envelope"]),
        );
    }
    write(
        root,
        "shapes",
        "seed-01-receipt",
        Some(1),
        receipt_wire.as_bytes(),
    );
    for (i, r) in vectors()["receipt_records"]
        .as_array()
        .expect("receipts")
        .iter()
        .enumerate()
    {
        write(
            root,
            "shapes",
            &format!("seed-r{i:02}-receipt"),
            Some(2),
            &s(&r["record"]),
        );
    }
    let lk = SigningKey::from_seed(&[1u8; 32]);
    let list = senders_list(&lk.public_b64(), std::slice::from_ref(&a_pub));
    let lsig = lk.sign(canonical_json(&list).as_bytes());
    write(
        root,
        "shapes",
        "seed-03-senders",
        Some(3),
        &s(&json!({"list": list, "sig": lsig})),
    );
    write(root, "shapes", "seed-04-senders-signed", Some(4), &s(&list));
    write(root, "shapes", "seed-05-rotation", Some(5), &bodies[7].1);
    write(
        root,
        "shapes",
        "seed-06-rotation-signed",
        Some(6),
        &s(&rotation_rec()),
    );
    let ad = enc_ad_v2(&lk.public_b64(), "fuzz-host");
    let adsig = lk.sign(canonical_json(&ad).as_bytes());
    write(
        root,
        "shapes",
        "seed-07-enc-ad",
        Some(7),
        &s(&json!({"ad": ad, "sig": adsig})),
    );
    write(root, "shapes", "seed-08-enc-ad-signed", Some(8), &s(&ad));

    // canonical: the reference vectors' inputs, plus numbers.
    for (i, c) in vectors()["canonical"]
        .as_array()
        .expect("canonical")
        .iter()
        .enumerate()
    {
        let input = c["input"].as_str().expect("input");
        write(
            root,
            "canonical",
            &format!("seed-{i:02}-json"),
            Some(0),
            input.as_bytes(),
        );
    }
    for (i, x) in [1e21, 1e-7, -0.0, 0.1, 123456789.125, 5e-324, f64::MAX]
        .iter()
        .enumerate()
    {
        write(
            root,
            "canonical",
            &format!("seed-n{i:02}-number"),
            Some(1),
            &x.to_le_bytes(),
        );
    }

    // backup: state through the relay's own functions, then Store::backup_to.
    let rt = &f.rt;
    let relay = &f.relay;
    let sig = f.a.sign(
        canonical_json(&relay_wire::records::enc_ad_statement(
            "alpha",
            &b64(&[9u8; 32]),
        ))
        .as_bytes(),
    );
    let ok = |r: relay_core::Reply, what: &str| {
        r.unwrap_or_else(|e| panic!("{what}: {}", e.body));
    };
    ok(
        rt.block_on(relay.put_enc_ad(
            &f.caller_a,
            &json!({"enc_pub": b64(&[9u8; 32]), "sig": sig}),
        )),
        "enc ad",
    );
    let ad = enc_ad_v2(&a_pub, "alpha");
    let adsig = f.a.sign(canonical_json(&ad).as_bytes());
    ok(
        rt.block_on(relay.put_enc_ad_v2(&f.caller_a, &json!({"ad": ad, "sig": adsig}))),
        "v2 enc ad",
    );
    let list = senders_list(&f.s.public_b64(), std::slice::from_ref(&a_pub));
    let lsig = f.s.sign(canonical_json(&list).as_bytes());
    ok(
        rt.block_on(relay.put_sender_list(&f.caller_s, &json!({"list": list, "sig": lsig}))),
        "senders",
    );
    ok(rt.block_on(relay.push(&f.caller_a, &push)), "push envelope");
    let rpush = json!({"items": [{"kind": "receipt", "item_id": receipt_id,
        "targets": [{"host_pubkey": b_pub, "wire_b64": b64(receipt_wire.as_bytes())}]}]});
    ok(rt.block_on(relay.push(&f.caller_a, &rpush)), "push receipt");
    let mut out = Vec::new();
    relay
        .store()
        .backup_to(&mut out, &mut |_| {})
        .expect("backup");
    for mode in 0u8..3 {
        write(
            root,
            "backup",
            &format!("seed-{mode}-real-backup"),
            Some(mode),
            &out,
        );
    }
    out
}
