//! Protocol floor bench: the CPU that docs/protocol.md itself asks of a relay for each item of a
//! batched push, measured alone on one core with the relay's own functions (no HTTP, no store).
//!
//! Per batch of 100 sealed envelopes of about 1 KiB (the e2e batch phase), it times:
//! - the hop check: strict Ed25519 verification over canonical(M:P:TS:BODY), one per request;
//! - the body parse (`relay::parse_json`), one per request;
//! - each item's wire work: base64 decode, SHA-256 (the accept's `wire_hash`), the §5 envelope
//!   check;
//! - the accept signatures: one Ed25519 signature per accepted item (`sign_many`, the batch
//!   signer the push path uses).
//!
//! Their sum is what any relay must spend per item before storing it, answering over HTTP or
//! sharing the machine with a load generator, so `2 cores / sum` bounds batched throughput on
//! this machine. docs/performance.md compares it with the e2e figures.
//!
//! Run: `cargo bench -p relay-bench --bench floor`. Knobs (environment): MBX_FLOOR_ROUNDS (default 40),
//! MBX_FLOOR_BATCH (items per request, default 100), MBX_FLOOR_ITEM_BYTES (default 1024).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark: a panic aborts the measurement, nothing to recover"
)]

use std::hint::black_box;
use std::time::Instant;

use mbx_host::message::{draft_envelope, ulid};
use mbx_host::now_ms;
use relay_core::check_wire;
use relay_core::parse_json;
use relay_keyspace::ItemKind;
use relay_wire::accept::{sha256, wire_hash_hex, AcceptParts, AcceptTarget};
use relay_wire::hop::{sign_hop, verify_hop_with};
use relay_wire::keys::{b64, unb64, SigningKey};
use relay_wire::seal::{seal_envelope, EncSecret};
use relay_wire::strict_stream::HopKey;

const PATH: &str = "/v2/relay/items";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One sealed envelope from `sender` with `plain` bytes of body: its id and wire bytes.
fn envelope(sender: &SigningKey, enc_pub: &[u8; 32], plain: usize) -> (String, Vec<u8>) {
    let now = now_ms();
    let id = ulid(now);
    let draft = draft_envelope(&id, "bench-a", "bench-b", "floor", &"x".repeat(plain), now)
        .expect("a valid draft");
    let sealed = seal_envelope(draft, enc_pub, "bench-a", sender).expect("a sealable draft");
    (id, serde_json::to_vec(&sealed).expect("JSON"))
}

/// The largest plaintext whose envelope stays within `want` wire bytes (sealing adds a fixed
/// overhead, then base64 of the ciphertext: 4/3 of the plaintext).
fn plain_for(sender: &SigningKey, enc_pub: &[u8; 32], want: usize) -> usize {
    let mut plain = want.saturating_sub(envelope(sender, enc_pub, 1).1.len()) * 3 / 4;
    while plain > 1 && envelope(sender, enc_pub, plain).1.len() > want {
        plain -= 1;
    }
    plain.max(1)
}

/// A push request: its body text, and each item's id and wire bytes.
struct Request {
    body: String,
    items: Vec<(String, Vec<u8>)>,
}

fn request(
    sender: &SigningKey,
    target_b64: &str,
    enc_pub: &[u8; 32],
    n: usize,
    plain: usize,
) -> Request {
    let items: Vec<(String, Vec<u8>)> = (0..n).map(|_| envelope(sender, enc_pub, plain)).collect();
    let entries: Vec<serde_json::Value> = items
        .iter()
        .map(|(id, wire)| {
            serde_json::json!({"kind": "envelope", "item_id": id,
                "targets": [{"host_pubkey": target_b64, "wire_b64": b64(wire)}]})
        })
        .collect();
    let body = serde_json::json!({ "items": entries }).to_string();
    Request { body, items }
}

/// Median of `rounds` timings of `f`, in microseconds per item of an `n`-item request.
fn median_us_per_item(rounds: usize, n: usize, mut f: impl FnMut()) -> f64 {
    f(); // warm caches and lazily built tables
    let mut t: Vec<f64> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e6 / n as f64
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

fn main() {
    let rounds = env_usize("MBX_FLOOR_ROUNDS", 40).max(1);
    let n = env_usize("MBX_FLOOR_BATCH", 100).max(1);
    let want = env_usize("MBX_FLOOR_ITEM_BYTES", 1024);

    let sender = SigningKey::generate();
    let relay = SigningKey::generate();
    let target = SigningKey::generate();
    let enc_pub = EncSecret::generate().public();
    let plain = plain_for(&sender, &enc_pub, want);
    let req = request(&sender, &target.public_b64(), &enc_pub, n, plain);
    let wire_bytes = req.items[0].1.len();

    let ts = now_ms().to_string();
    let hop_sig = sign_hop(&sender, "POST", PATH, &ts, &req.body);
    let sender_key = HopKey::decode(&sender.public()).expect("a valid key");
    let sender_pub = sender.public();
    let relay_b64 = relay.public_b64();
    let sender_b64 = sender.public_b64();
    let epoch = "6f1c2a9e-1d4b-4c53-9a57-0b8f3e2d7c11";
    let at = now_ms();
    let targets: Vec<[AcceptTarget; 1]> = req
        .items
        .iter()
        .enumerate()
        .map(|(i, (_, wire))| {
            [AcceptTarget {
                host_pubkey: target.public_b64(),
                seq: at + i as u64,
                wire_hash: wire_hash_hex(wire),
            }]
        })
        .collect();
    let wires_b64: Vec<String> = req.items.iter().map(|(_, w)| b64(w)).collect();

    let hop = median_us_per_item(rounds, n, || {
        assert!(verify_hop_with(
            &sender_key,
            "POST",
            PATH,
            &ts,
            &req.body,
            &hop_sig
        ));
    });
    let parse = median_us_per_item(rounds, n, || {
        black_box(parse_json(black_box(req.body.as_bytes())).expect("valid JSON"));
    });
    let wire = median_us_per_item(rounds, n, || {
        for ((id, _), w64) in req.items.iter().zip(&wires_b64) {
            let wire = unb64(black_box(w64)).expect("base64");
            black_box(sha256(&wire));
            assert_eq!(
                check_wire(ItemKind::Envelope, &wire, id, &sender_pub),
                Ok(())
            );
        }
    });
    let sign = median_us_per_item(rounds, n, || {
        let canonicals: Vec<String> = req
            .items
            .iter()
            .zip(&targets)
            .map(|((id, _), t)| {
                AcceptParts {
                    relay_pubkey: &relay_b64,
                    epoch,
                    sender_pubkey: &sender_b64,
                    item_id: id,
                    targets: t,
                    at_ms: at,
                }
                .canonical()
            })
            .collect();
        let msgs: Vec<&[u8]> = canonicals.iter().map(String::as_bytes).collect();
        black_box(relay.sign_many(&msgs));
    });

    let total = hop + parse + wire + sign;
    println!(
        "protocol floor per item: requests of {n} sealed envelopes of {wire_bytes} wire bytes \
         ({} body bytes), one core, median of {rounds} rounds",
        req.body.len()
    );
    for (what, us) in [
        ("accept signature (Ed25519, one per item)", sign),
        ("hop check, shared by the request's items", hop),
        ("wire: base64, SHA-256, envelope check", wire),
        ("request body JSON parse, shared", parse),
    ] {
        println!("  {what:<44} {us:>7.2} us");
    }
    println!("  {:<44} {total:>7.2} us", "sum");
    println!(
        "  => at most {:.0} items/s on 2 cores for this work alone (before storage, HTTP and \
         the load generator)",
        2e6 / total
    );
}
