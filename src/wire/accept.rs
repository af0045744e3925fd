//! Accept statements (skeleton).
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptTarget {
    pub host_pubkey: String,
    pub seq: u64,
    pub wire_hash: String,
}

pub fn accept_statement(
    relay_pubkey: &str,
    epoch: &str,
    sender_pubkey: &str,
    item_id: &str,
    targets: &[AcceptTarget],
    at_ms: u64,
) -> Value {
    let _ = (relay_pubkey, epoch, sender_pubkey, item_id, targets, at_ms);
    todo!()
}
pub fn wire_hash_hex(wire: &[u8]) -> String {
    let _ = wire;
    todo!()
}
pub fn sha256(wire: &[u8]) -> [u8; 32] {
    let _ = wire;
    todo!()
}
