//! The relay's accept statement (PROTOCOL.md §3 Push) and wire hashes.

use super::time::iso_ms;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// One stored target of an accepted item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptTarget {
    /// The target host's public key (protocol base64 form).
    pub host_pubkey: String,
    /// The seq allocated in that target's queue.
    pub seq: u64,
    /// [`wire_hash_hex`] of the stored wire bytes.
    pub wire_hash: String,
}

/// `{"v":1,"type":"relay-accept","relay_pubkey","epoch","sender_pubkey","item_id",
/// "targets":[{"host_pubkey","seq","wire_hash"}],"at"}`; the relay signs its canonical form.
pub fn accept_statement(
    relay_pubkey: &str,
    epoch: &str,
    sender_pubkey: &str,
    item_id: &str,
    targets: &[AcceptTarget],
    at_ms: u64,
) -> Value {
    let targets: Vec<Value> = targets
        .iter()
        .map(|t| json!({"host_pubkey": t.host_pubkey, "seq": t.seq, "wire_hash": t.wire_hash}))
        .collect();
    json!({
        "v": 1,
        "type": "relay-accept",
        "relay_pubkey": relay_pubkey,
        "epoch": epoch,
        "sender_pubkey": sender_pubkey,
        "item_id": item_id,
        "targets": targets,
        "at": iso_ms(at_ms),
    })
}

/// SHA-256 of the exact wire bytes.
pub fn sha256(wire: &[u8]) -> [u8; 32] {
    Sha256::digest(wire).into()
}

/// Lowercase hex SHA-256 of the exact wire bytes (the protocol's `wire_hash`).
pub fn wire_hash_hex(wire: &[u8]) -> String {
    sha256(wire).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::canonical::canonical_json;

    #[test]
    fn hash_of_empty_and_abc() {
        assert_eq!(
            wire_hash_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            wire_hash_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn statement_shape() {
        let t = AcceptTarget {
            host_pubkey: "H".into(),
            seq: 1_795_963_620_919,
            wire_hash: "ab".into(),
        };
        let v = accept_statement("R", "E", "S", "I", &[t], 1_795_963_620_919);
        assert_eq!(
            canonical_json(&v),
            "{\"at\":\"2026-11-29T14:47:00.919Z\",\"epoch\":\"E\",\"item_id\":\"I\",\"relay_pubkey\":\"R\",\"sender_pubkey\":\"S\",\"targets\":[{\"host_pubkey\":\"H\",\"seq\":1795963620919,\"wire_hash\":\"ab\"}],\"type\":\"relay-accept\",\"v\":1}"
        );
    }
}
