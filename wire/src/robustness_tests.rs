//! Deterministic pseudo-random robustness tests for the wire layer: no input may panic, and
//! canonical JSON must be stable (re-parsing canonical text gives the same value and the same
//! text). Bounded: a few thousand small cases, well under a second.

use super::canonical::canonical_json;
use super::envelope::{check_envelope_wire, envelope_recipient_hosts, envelope_shape_error};
use super::hop::ts_fresh;
use super::keys::{parse_pubkey, unb64, verify, SigningKey};
use super::receipt::{check_receipt_wire, receipt_item_id, receipt_record_valid};
use super::records::{parse_rotation, parse_sender_list};
use super::time::{iso_ms, parse_date_loose, parse_iso_strict};
use serde_json::{json, Value};

/// xorshift64*: a fixed-seed generator so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const PIECES: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    "\"",
    "\\",
    "\\u",
    "d83d",
    "0",
    "1",
    "-",
    ".",
    "e",
    "+",
    "9",
    "null",
    "true",
    "false",
    "\"v\"",
    "\"id\"",
    "\"to\"",
    "\"enc\"",
    "\"rec\"",
    "\"sig\"",
    "é",
    "😀",
    "\u{2028}",
    "\u{0}",
    " ",
    "\n",
    "T",
    "Z",
    "2026-11-29",
    "T14:00:00",
    ".000Z",
    "@",
    "=",
    "A",
    "/",
    "1e308",
    "1e400",
    "\u{ffff}",
];

fn random_text(rng: &mut Rng) -> String {
    let n = rng.below(24);
    (0..n).map(|_| *rng.pick(PIECES)).collect()
}

fn random_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 4 { 5 } else { 8 }) {
        0 => Value::Null,
        1 => json!(rng.below(2) == 0),
        2 => json!(f64::from_bits(rng.next()) % 1e22),
        3 => json!((rng.next() >> 11) as f64 * if rng.below(2) == 0 { 1.0 } else { -1e-9 }),
        4 => json!(random_text(rng)),
        5 => Value::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth + 1))
                .collect(),
        ),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.below(5) {
                m.insert(random_text(rng), random_value(rng, depth + 1));
            }
            Value::Object(m)
        }
    }
}

fn sealed_envelope() -> Value {
    json!({
        "v": 3, "id": "01KB5Z2X3Y4Z5A6B7C8D9E0F1G", "ts": "2026-11-29T14:00:00.000Z",
        "from": "agent@laptop", "to": ["bob@desk"], "thread": "t", "reply_to": null,
        "kind": "message", "subject": "hello", "body": "Y2lwaGVy", "needs_reply": false,
        "refs": [], "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
        "authority": null,
        "enc": {"v": 1, "alg": "x25519+xchacha20poly1305", "epk": super::keys::b64(&[1u8; 32]),
                "nonce": super::keys::b64(&[2u8; 24]), "body": "Y2lwaGVy"}
    })
}

/// Replaces one randomly chosen field (possibly nested) of `v` with a random value.
fn mutate(rng: &mut Rng, v: &mut Value) {
    let mut cur = v;
    for _ in 0..3 {
        let keys: Vec<String> = match cur.as_object() {
            Some(o) if !o.is_empty() => o.keys().cloned().collect(),
            _ => break,
        };
        let k = rng.pick(&keys).clone();
        if rng.below(3) == 0 || !cur[&k].is_object() {
            cur[&k] = random_value(rng, 2);
            return;
        }
        cur = &mut cur[&k];
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let key = SigningKey::from_seed(&[7u8; 32]);
    let pk = key.public();
    for _ in 0..3000 {
        let text = random_text(&mut rng);
        let _ = check_envelope_wire(text.as_bytes(), &text);
        let _ = check_receipt_wire(text.as_bytes(), &text, &pk);
        let _ = parse_date_loose(&text);
        let _ = parse_iso_strict(&text);
        let _ = parse_pubkey(&text);
        let _ = unb64(&text);
        let _ = verify(&pk, text.as_bytes(), &text);
        let _ = ts_fresh(&text, i64::MAX);
        let _ = ts_fresh(&text, i64::MIN);
        let _ = SigningKey::from_key_file(&text);
        let mut bytes = text.into_bytes();
        if !bytes.is_empty() {
            let i = rng.below(bytes.len());
            bytes[i] = rng.next() as u8;
        }
        let _ = check_envelope_wire(&bytes, "");
        let _ = check_receipt_wire(&bytes, "", &pk);
    }
}

#[test]
fn random_values_never_panic_and_canonical_is_stable() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for _ in 0..2000 {
        let v = random_value(&mut rng, 0);
        let text = canonical_json(&v);
        let back: Value = serde_json::from_str(&text).expect("canonical text is JSON");
        assert_eq!(canonical_json(&back), text);
        let _ = envelope_shape_error(&v);
        let _ = envelope_recipient_hosts(&v);
        let _ = receipt_record_valid(&v);
        let _ = receipt_item_id(&v);
        let _ = parse_sender_list(&v, u64::MAX, &[0u8; 32]);
        let _ = parse_sender_list(&json!({"list": v, "sig": "x"}), 0, &[0u8; 32]);
        let _ = parse_rotation(&json!({"rotation": {"rec": v, "old_sig": "a", "new_sig": "b"}}));
    }
}

#[test]
fn mutated_envelopes_never_panic() {
    let mut rng = Rng(0x94D0_49BB_1331_11EB);
    for _ in 0..2000 {
        let mut env = sealed_envelope();
        for _ in 0..=rng.below(3) {
            mutate(&mut rng, &mut env);
        }
        let verdict = envelope_shape_error(&env);
        let wire = serde_json::to_vec(&env).unwrap_or_default();
        match (
            verdict,
            check_envelope_wire(&wire, "01KB5Z2X3Y4Z5A6B7C8D9E0F1G"),
        ) {
            (Some(why), Err(full)) => assert_eq!(full, format!("bad envelope: {why}")),
            (Some(why), Ok(_)) => panic!("shape says {why} but the wire check passed"),
            (None, _) => {}
        }
    }
}

#[test]
fn iso_roundtrip_over_the_range() {
    let mut rng = Rng(0xBF58_476D_1CE4_E5B9);
    for _ in 0..2000 {
        let ms = rng.next() % 253_402_300_800_000; // years 1970..=9999
        let text = iso_ms(ms);
        assert_eq!(parse_iso_strict(&text), Some(ms), "{text}");
        assert_eq!(parse_date_loose(&text), i64::try_from(ms).ok(), "{text}");
    }
}
