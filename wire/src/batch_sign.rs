//! Ed25519 signatures of many messages at once, byte for byte what signing each alone gives.
//!
//! RFC 8032 signing is deterministic: r = H(prefix ‖ M), R = [r]B, S = r + H(R ‖ A ‖ M)·a. The
//! costly part besides [r]B is turning R into its 32-byte form, which needs one field inversion
//! (a quarter of a signature's time). A push answers up to `max_batch` accept statements, so
//! the relay computes every R of the batch first and inverts all their Z coordinates with one
//! inversion (Montgomery's trick, `compress_batch_alloc`). Equality with single signing is
//! tested below against ed25519-dalek.

use curve25519_dalek::edwards::EdwardsPoint;
use curve25519_dalek::scalar::{clamp_integer, Scalar};
use sha2::{Digest, Sha512};
use zeroize::Zeroize;

/// The signatures of `msgs` by the key with `seed` and public key `public`, in order.
/// `public` must be the seed's public key (the caller holds both; it is not recomputed here).
pub(crate) fn sign_batch(seed: &[u8; 32], public: &[u8; 32], msgs: &[&[u8]]) -> Vec<[u8; 64]> {
    let mut expanded: [u8; 64] = Sha512::digest(seed).into();
    let mut lower = [0u8; 32];
    lower.copy_from_slice(&expanded[..32]);
    let mut secret = Scalar::from_bytes_mod_order(clamp_integer(lower));
    lower.zeroize();
    let prefix = &expanded[32..];

    let mut nonces: Vec<Scalar> = msgs
        .iter()
        .map(|m| {
            let mut h: [u8; 64] = Sha512::new()
                .chain_update(prefix)
                .chain_update(m)
                .finalize()
                .into();
            let r = Scalar::from_bytes_mod_order_wide(&h);
            h.zeroize();
            r
        })
        .collect();
    let commitments: Vec<EdwardsPoint> = nonces.iter().map(EdwardsPoint::mul_base).collect();
    let compressed = EdwardsPoint::compress_batch_alloc(&commitments);

    let sigs = msgs
        .iter()
        .zip(&nonces)
        .zip(&compressed)
        .map(|((m, r), big_r)| {
            let h: [u8; 64] = Sha512::new()
                .chain_update(big_r.as_bytes())
                .chain_update(public)
                .chain_update(m)
                .finalize()
                .into();
            let k = Scalar::from_bytes_mod_order_wide(&h);
            let s = k * secret + r;
            let mut sig = [0u8; 64];
            sig[..32].copy_from_slice(big_r.as_bytes());
            sig[32..].copy_from_slice(s.as_bytes());
            sig
        })
        .collect();
    nonces.zeroize();
    secret.zeroize();
    expanded.zeroize();
    sigs
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer as _;

    /// Every signature equals ed25519-dalek's single signature, for batches of 0..=40
    /// messages of assorted lengths (empty, one SHA-512 block boundary, long) and many keys.
    #[test]
    fn batch_signatures_equal_single_signatures() {
        for n in 0..=40usize {
            let seed = [n as u8 ^ 0x5a; 32];
            let key = ed25519_dalek::SigningKey::from_bytes(&seed);
            let public = key.verifying_key().to_bytes();
            let msgs: Vec<Vec<u8>> = (0..n)
                .map(|i| {
                    let len = [0, 1, 63, 64, 111, 112, 128, 500, 4096][(i + n) % 9];
                    (0..len).map(|j| (i * 31 + j * 7 + n) as u8).collect()
                })
                .collect();
            let refs: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
            let got = sign_batch(&seed, &public, &refs);
            assert_eq!(got.len(), n);
            for (m, sig) in msgs.iter().zip(&got) {
                assert_eq!(*sig, key.sign(m).to_bytes(), "batch of {n}");
            }
        }
    }

    /// The same message twice in one batch signs the same twice (deterministic nonces).
    #[test]
    fn repeated_messages_sign_alike() {
        let seed = [9u8; 32];
        let key = ed25519_dalek::SigningKey::from_bytes(&seed);
        let public = key.verifying_key().to_bytes();
        let got = sign_batch(&seed, &public, &[b"accept", b"accept", b"other"]);
        assert_eq!(got[0], got[1]);
        assert_ne!(got[0], got[2]);
    }
}
