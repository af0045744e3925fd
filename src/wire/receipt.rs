//! Receipts (skeleton).
use serde_json::Value;

pub fn receipt_record_valid(rec: &Value) -> bool {
    let _ = rec;
    todo!()
}
pub fn receipt_item_id(rec: &Value) -> Option<String> {
    let _ = rec;
    todo!()
}
pub fn check_receipt_wire(wire: &[u8], item_id: &str, sender: &[u8; 32]) -> Result<(), String> {
    let _ = (wire, item_id, sender);
    todo!()
}
