//! Issue 19 item 2 against the real binary: an enrolled key may store its own sender list only
//! (docs/protocol.md §3 "Sender allowlist"), bounded to 64 KiB canonical, and every refusal answers
//! the reference's exact text with nothing stored.
use crate::common;

use common::{backend_tests, Backend};

use std::path::Path;
use std::time::Instant;

use common::*;
use relay_wire::canonical::canonical_json;
use relay_wire::keys::SigningKey;
use serde_json::{json, Value};

const SENDERS: &str = "/v2/relay/senders";

/// `{"list","sig"}` for `list`, signed by `key`.
fn signed(list: &Value, key: &SigningKey) -> Value {
    json!({"list": list, "sig": key.sign(canonical_json(list).as_bytes())})
}

/// A list record naming `host_pubkey` with `senders`, its canonical form padded (by a signed
/// extra field) to exactly `canonical_len` bytes when given.
fn list_record(
    host_pubkey: &str,
    senders: &[String],
    iat_ms: i64,
    canonical_len: Option<usize>,
) -> Value {
    let mut l = json!({"v": 1, "type": "relay-senders", "host_pubkey": host_pubkey,
        "senders": senders, "iat": iso(iat_ms)});
    if let Some(len) = canonical_len {
        l["pad"] = json!("");
        let base = canonical_json(&l).len();
        l["pad"] = json!("x".repeat(len - base));
        assert_eq!(canonical_json(&l).len(), len);
    }
    l
}

/// Bytes of every file under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        n += if m.is_dir() {
            bytes_under(&e.path())
        } else {
            m.len()
        };
    }
    n
}

/// The store's size: the bytes of the fjall directory, or of the PostgreSQL database.
fn store_bytes(relay: &Relay) -> u64 {
    match relay.db_url() {
        None => bytes_under(relay.store_dir()),
        Some(url) => psql(url, "SELECT pg_database_size(current_database())")
            .parse()
            .expect("database size"),
    }
}

/// The attack of issue 19: one enrolled key posts 1 MB lists for 200 fresh keys (each validly
/// signed by the key it names) and another enrolled host's own signed list. Every one is
/// refused with `400 bad sender list`, the store does not grow, and the other host's list
/// was not stored (it can still store that very list itself); the attacker's own list works.
fn one_key_cannot_store_sender_lists_for_other_keys(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let attacker = Host::enrolled(&relay, "attacker");
    let victim = Host::enrolled(&relay, "victim");
    let friend = Host::enrolled(&relay, "friend");
    // Let the enrolments' writes settle before measuring the store.
    assert_eq!(relay.get("/health").status, 200);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before = store_bytes(&relay);

    let started = Instant::now();
    let mut sent = 0usize;
    for _ in 0..200 {
        let fresh = SigningKey::generate();
        // 1 MB canonical: over the 64 KiB cap too, but refused first as another key's list.
        let l = list_record(
            &fresh.public_b64(),
            &[random_pubkey()],
            now_ms(),
            Some(1 << 20),
        );
        let body = signed(&l, &fresh);
        sent += serde_json::to_vec(&body).unwrap().len();
        attacker
            .post_json(&relay, SENDERS, &body)
            .assert_error(400, "bad sender list");
    }
    let elapsed = started.elapsed();
    let victims_list = signed(
        &list_record(
            &victim.pubkey(),
            &[attacker.pubkey()],
            now_ms() - 1_000,
            None,
        ),
        &victim.key,
    );
    attacker
        .post_json(&relay, SENDERS, &victims_list)
        .assert_error(400, "bad sender list");

    std::thread::sleep(std::time::Duration::from_millis(1500));
    let after = store_bytes(&relay);
    println!(
        "200 foreign lists ({} MB sent) refused in {elapsed:?}; store {before} -> {after} bytes",
        sent / 1_000_000
    );
    assert!(
        after < before + 64 * 1024,
        "store grew from {before} to {after} bytes"
    );
    // Nothing was stored for the victim: the friend pushes to it freely, and the victim's own
    // post of the very list the attacker replayed is stored (not "a newer list is stored").
    assert_eq!(
        friend.push_one(&relay, &envelope_item(&friend, &[&victim]))["status"],
        json!("accepted")
    );
    victim.post_json(&relay, SENDERS, &victims_list).ok();
    assert_rejected(
        &friend.push_one(&relay, &envelope_item(&friend, &[&victim])),
        "sender not accepted by target",
    );
    // The attacker's own list works.
    attacker
        .publish_senders(&relay, &[friend.pubkey()], now_ms())
        .ok();
    assert_eq!(
        friend.push_one(&relay, &envelope_item(&friend, &[&attacker]))["status"],
        json!("accepted")
    );
}

/// canonical(list) of 65,536 bytes is stored; one byte more is `400 bad sender list`, with
/// nothing stored (the smaller list, posted later with an older iat, is still refused as not
/// newer only because the first was stored).
fn a_sender_list_over_64_kib_canonical_is_refused(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-cap");
    let friend = Host::enrolled(&relay, "f-cap");
    let iat = now_ms() - 10_000;
    let over = list_record(&t.pubkey(), &[friend.pubkey()], iat, Some(65_537));
    t.post_json(&relay, SENDERS, &signed(&over, &t.key))
        .assert_error(400, "bad sender list");
    // Nothing stored: a stranger still pushes.
    let stranger = Host::enrolled(&relay, "s-cap");
    assert_eq!(
        stranger.push_one(&relay, &envelope_item(&stranger, &[&t]))["status"],
        json!("accepted")
    );
    let at_cap = list_record(&t.pubkey(), &[friend.pubkey()], iat, Some(65_536));
    t.post_json(&relay, SENDERS, &signed(&at_cap, &t.key)).ok();
    assert_rejected(
        &stranger.push_one(&relay, &envelope_item(&stranger, &[&t])),
        "sender not accepted by target",
    );
    // A full list of 1,024 real keys is far below the cap.
    let keys: Vec<String> = (0..1024).map(|_| random_pubkey()).collect();
    let full = list_record(&t.pubkey(), &keys, iat + 1, None);
    assert!(canonical_json(&full).len() < 50_000);
    t.post_json(&relay, SENDERS, &signed(&full, &t.key)).ok();
}

// ----- one test per docs/protocol.md §3 text -----

/// `400 {"error":"bad sender list"}` for a malformed list: the bare text, no `: <why>`.
fn bad_sender_list_is_the_whole_text_for_a_malformed_list(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-bad");
    let good = list_record(&t.pubkey(), &[random_pubkey()], now_ms(), None);
    let mut bodies = vec![
        json!([1]),
        json!({"sig": "x"}),
        json!({"list": "x", "sig": "x"}),
    ];
    for (field, val) in [
        ("v", json!(2)),
        ("type", json!("relay-sender")),
        ("senders", json!(["not-a-key"])),
        ("iat", json!("yesterday")),
        ("host_pubkey", json!("short")),
    ] {
        let mut l = good.clone();
        l[field] = val;
        bodies.push(signed(&l, &t.key));
    }
    let too_many: Vec<String> = (0..1025).map(|_| random_pubkey()).collect();
    bodies.push(signed(
        &list_record(&t.pubkey(), &too_many, now_ms(), None),
        &t.key,
    ));
    for b in &bodies {
        t.post_json(&relay, SENDERS, b)
            .assert_error(400, "bad sender list");
    }
}

/// `400 {"error":"bad sender list"}` for a list naming any key but the caller's, even one
/// validly signed by that (enrolled) key.
fn bad_sender_list_for_another_keys_list_even_validly_signed(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let caller = Host::enrolled(&relay, "t-caller");
    let owner = Host::enrolled(&relay, "t-owner");
    let theirs = signed(
        &list_record(&owner.pubkey(), &[random_pubkey()], now_ms(), None),
        &owner.key,
    );
    caller
        .post_json(&relay, SENDERS, &theirs)
        .assert_error(400, "bad sender list");
    // Refused before the signature and iat checks: forged or future, still the same text.
    let mut forged = theirs.clone();
    forged["sig"] = json!(caller.key.sign(b"x"));
    caller
        .post_json(&relay, SENDERS, &forged)
        .assert_error(400, "bad sender list");
    owner.post_json(&relay, SENDERS, &theirs).ok();
}

/// `400 {"error":"sender list iat is in the future"}` past 5 minutes ahead.
fn sender_list_iat_is_in_the_future_text(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-fut");
    t.publish_senders(&relay, &[random_pubkey()], now_ms() + 6 * 60_000)
        .assert_error(400, "sender list iat is in the future");
}

/// `401 {"error":"sender list is not signed by the target"}` for a signature by another key
/// or over other content.
fn sender_list_is_not_signed_by_the_target_text(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-sig");
    let l = list_record(&t.pubkey(), &[random_pubkey()], now_ms(), None);
    t.post_json(&relay, SENDERS, &signed(&l, &SigningKey::generate()))
        .assert_error(401, "sender list is not signed by the target");
    let mut tampered = signed(&l, &t.key);
    tampered["list"]["senders"] = json!([random_pubkey()]);
    t.post_json(&relay, SENDERS, &tampered)
        .assert_error(401, "sender list is not signed by the target");
}

/// `409 {"error":"a newer sender list is already stored"}` for an older list, and for one of
/// the same iat (the stored one stays: "newer iat replaces older").
fn a_newer_sender_list_is_already_stored_text(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let t = Host::enrolled(&relay, "t-409");
    let iat = now_ms() - 10_000;
    t.publish_senders(&relay, &[random_pubkey()], iat).ok();
    for older_or_same in [iat - 1, iat] {
        t.publish_senders(&relay, &[random_pubkey()], older_or_same)
            .assert_error(409, "a newer sender list is already stored");
    }
}

backend_tests! {
    ;
    postgres ignored:
    one_key_cannot_store_sender_lists_for_other_keys,
    a_sender_list_over_64_kib_canonical_is_refused,
    bad_sender_list_is_the_whole_text_for_a_malformed_list,
    bad_sender_list_for_another_keys_list_even_validly_signed,
    sender_list_iat_is_in_the_future_text,
    sender_list_is_not_signed_by_the_target_text,
    a_newer_sender_list_is_already_stored_text,
}
