//! Envelope shape check (skeleton).
use serde_json::Value;

pub fn envelope_shape_error(v: &Value) -> Option<String> {
    let _ = v;
    todo!()
}
pub fn check_envelope_wire(wire: &[u8], item_id: &str) -> Result<Value, String> {
    let _ = (wire, item_id);
    todo!()
}
pub fn envelope_recipient_hosts(v: &Value) -> Vec<String> {
    let _ = v;
    todo!()
}
