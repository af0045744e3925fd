//! Canonical JSON (`wire::canonical`) against a reference written here, independently of the
//! relay's code: object keys sorted by UTF-16 code units (what JavaScript's default sort does),
//! strings escaped as `JSON.stringify` does, numbers printed as `Number#toString` (by the
//! `ryu-js` crate, an independent implementation of the ECMAScript algorithm).
//!
//! Input: first byte picks a mode. Mode 0: the rest is JSON text; oracles: canonical(v) equals the
//! reference, is valid JSON, and canonical(parse(canonical(v))) == canonical(v). Mode 1: 8 bytes
//! are an f64; oracle: `js_number` equals the reference for every finite value.
#![no_main]

use std::cmp::Ordering;

use libfuzzer_sys::fuzz_target;
use relay_wire::canonical::{canonical_bytes, canonical_json, js_number};
use serde_json::Value;

/// JavaScript's default string order: by UTF-16 code unit.
fn cmp_js(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn ref_number(x: f64) -> String {
    let mut buf = ryu_js::Buffer::new();
    buf.format(x).to_owned()
}

fn ref_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn reference(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&ref_number(n.as_f64().expect("finite number"))),
        Value::String(s) => ref_string(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                reference(out, x);
            }
            out.push(']');
        }
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort_by(|a, b| cmp_js(a, b));
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                ref_string(out, k);
                out.push(':');
                reference(out, &o[k.as_str()]);
            }
            out.push('}');
        }
    }
}

fn json_mode(text: &[u8]) {
    let Ok(v) = serde_json::from_slice::<Value>(text) else {
        return;
    };
    let c = canonical_json(&v);
    assert_eq!(canonical_bytes(&v), c.as_bytes());
    let mut r = String::new();
    reference(&mut r, &v);
    assert_eq!(c, r, "canonical differs from the JS reference for {v:?}");
    let back: Value = serde_json::from_str(&c)
        .unwrap_or_else(|e| panic!("canonical output is not JSON ({e}): {c}"));
    assert_eq!(canonical_json(&back), c, "canonical is not idempotent");
}

fn number_mode(b: &[u8]) {
    let Some(bytes) = b.get(..8) else { return };
    let x = f64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    if !x.is_finite() {
        return;
    }
    assert_eq!(
        js_number(x),
        ref_number(x),
        "js_number({x:e}) bits {:#x}",
        x.to_bits()
    );
}

fuzz_target!(|data: &[u8]| {
    match data.split_first() {
        Some((m, rest)) if m % 2 == 1 => number_mode(rest),
        Some((_, rest)) => json_mode(rest),
        None => {}
    }
});
