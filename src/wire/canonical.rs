//! Canonical JSON (skeleton).
use serde_json::Value;

pub fn canonical_json(v: &Value) -> String {
    let _ = v;
    todo!()
}

pub fn canonical_bytes(v: &Value) -> Vec<u8> {
    canonical_json(v).into_bytes()
}

pub fn js_number(x: f64) -> String {
    let _ = x;
    todo!()
}
