//! The relay log's chain, one statement for every backend (a backup moves a log between
//! them): entry `n` stores `hash_n = SHA-256(hash_{n-1} ++ canonical_n)`, where `canonical_n`
//! is `seq u64 | at_ms u64 | len(kind) u32 | kind | len(detail) u32 | detail` (integers
//! big-endian); the first entry of a log chains from 32 zero bytes.

use sha2::{Digest, Sha256};

/// The canonical bytes of an entry (what its hash covers besides the previous hash).
pub fn canonical(seq: u64, at_ms: u64, kind: &str, detail: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + kind.len() + detail.len());
    b.extend_from_slice(&seq.to_be_bytes());
    b.extend_from_slice(&at_ms.to_be_bytes());
    for s in [kind, detail] {
        // Kinds and details are short texts we write; a length over u32 cannot occur.
        b.extend_from_slice(&u32::try_from(s.len()).unwrap_or(u32::MAX).to_be_bytes());
        b.extend_from_slice(s.as_bytes());
    }
    b
}

/// `SHA-256(prev ++ canonical(entry))`.
pub fn chain_hash(prev: &[u8; 32], seq: u64, at_ms: u64, kind: &str, detail: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(prev);
    h.update(canonical(seq, at_ms, kind, detail));
    h.finalize().into()
}
