//! The relay's accept statement (docs/protocol.md §3 Push) and wire hashes.

use super::canonical::{js_number, write_string};
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

/// Largest integer every JSON reader holds exactly (2^53): up to it, a seq prints the same as
/// an exact integer and as a JavaScript number.
const EXACT_INT_MAX: u64 = 1 << 53;

/// The fields of one accept statement, borrowed, for writing its texts without a value tree.
#[derive(Debug, Clone, Copy)]
pub struct AcceptParts<'a> {
    /// The relay's public key (base64): who states the acceptance.
    pub relay_pubkey: &'a str,
    /// The epoch the seqs belong to.
    pub epoch: &'a str,
    /// The pushing host's public key (base64).
    pub sender_pubkey: &'a str,
    /// The sender's id of the item.
    pub item_id: &'a str,
    /// Each target with the seq it got.
    pub targets: &'a [AcceptTarget],
    /// When the relay accepted it.
    pub at_ms: u64,
}

impl AcceptParts<'_> {
    /// The canonical text of [`accept_statement`] (what the relay signs): equal to
    /// `canonical_json(&accept_statement(..))` for every input (tested), seqs as JavaScript
    /// numbers.
    pub fn canonical(&self) -> String {
        self.write(|out, seq| out.push_str(&js_number(seq as f64)))
    }

    /// The accept as a push answer prints it (`serde_json` over [`accept_statement`]): the same
    /// text as [`Self::canonical`] except that a seq above 2^53 keeps all its digits, so
    /// `canonical` is returned as is unless a seq is that large.
    pub fn answer_text(&self, canonical: String) -> String {
        if self.targets.iter().all(|t| t.seq <= EXACT_INT_MAX) {
            return canonical;
        }
        self.write(|out, seq| out.push_str(&seq.to_string()))
    }

    /// `{"at","epoch","item_id","relay_pubkey","sender_pubkey","targets":[{"host_pubkey",
    /// "seq","wire_hash"}],"type":"relay-accept","v":1}` with each seq printed by `write_seq`.
    /// The keys are all ASCII, so code-unit order (canonical) and byte order (`serde_json`)
    /// agree, and both escape strings alike.
    fn write(&self, write_seq: impl Fn(&mut String, u64)) -> String {
        let strings = self.relay_pubkey.len()
            + self.epoch.len()
            + self.sender_pubkey.len()
            + self.item_id.len();
        let per_target: usize = self
            .targets
            .iter()
            .map(|t| t.host_pubkey.len() + t.wire_hash.len() + 64)
            .sum();
        let mut out = String::with_capacity(160 + strings + per_target);
        out.push_str("{\"at\":");
        write_string(&mut out, &iso_ms(self.at_ms));
        out.push_str(",\"epoch\":");
        write_string(&mut out, self.epoch);
        out.push_str(",\"item_id\":");
        write_string(&mut out, self.item_id);
        out.push_str(",\"relay_pubkey\":");
        write_string(&mut out, self.relay_pubkey);
        out.push_str(",\"sender_pubkey\":");
        write_string(&mut out, self.sender_pubkey);
        out.push_str(",\"targets\":[");
        for (i, t) in self.targets.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str("{\"host_pubkey\":");
            write_string(&mut out, &t.host_pubkey);
            out.push_str(",\"seq\":");
            write_seq(&mut out, t.seq);
            out.push_str(",\"wire_hash\":");
            write_string(&mut out, &t.wire_hash);
            out.push('}');
        }
        out.push_str("],\"type\":\"relay-accept\",\"v\":1}");
        out
    }
}

/// SHA-256 of the exact wire bytes.
pub fn sha256(wire: &[u8]) -> [u8; 32] {
    Sha256::digest(wire).into()
}

/// Lowercase hex SHA-256 of the exact wire bytes (the protocol's `wire_hash`).
pub fn wire_hash_hex(wire: &[u8]) -> String {
    hex(&sha256(wire))
}

/// Lowercase hex of `bytes` (a table lookup per nibble: one per accepted item and target).
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical_json;

    #[test]
    fn direct_texts_equal_the_value_forms() {
        use rand::{Rng as _, SeedableRng as _};
        let strings = crate::test_util::adversarial_strings(5, 2000);
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let seqs = [
            0,
            1,
            (1 << 53) - 1,
            1 << 53,
            (1 << 53) + 1,
            1 << 60,
            u64::MAX,
        ];
        for (n, w) in strings.chunks_exact(6).enumerate() {
            let targets: Vec<AcceptTarget> = (0..n % 4)
                .map(|i| AcceptTarget {
                    host_pubkey: w[(i + 4) % 6].clone(),
                    seq: if rng.gen_bool(0.3) {
                        seqs[rng.gen_range(0..seqs.len())]
                    } else {
                        rng.gen_range(0..1u64 << 45)
                    },
                    wire_hash: w[5].clone(),
                })
                .collect();
            let at = rng.gen_range(0..4_000_000_000_000u64);
            let value = accept_statement(&w[0], &w[1], &w[2], &w[3], &targets, at);
            let parts = AcceptParts {
                relay_pubkey: &w[0],
                epoch: &w[1],
                sender_pubkey: &w[2],
                item_id: &w[3],
                targets: &targets,
                at_ms: at,
            };
            let canonical = parts.canonical();
            assert_eq!(canonical, canonical_json(&value));
            assert_eq!(parts.answer_text(canonical), value.to_string());
        }
    }

    #[test]
    fn hex_matches_format() {
        let all: Vec<u8> = (0..=255).collect();
        let want: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&all), want);
        assert_eq!(hex(&[]), "");
    }

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
