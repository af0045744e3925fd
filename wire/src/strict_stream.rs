//! Strict Ed25519 verification of a message handed over in pieces, against a key decoded once
//! ([`HopKey`], memoised per key by the relay): exactly `verify_strict`'s accepted set, one
//! field inversion cheaper, since the recomputed R' is compared with the decoded R
//! projectively instead of being compressed and compared as bytes.

use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use sha2::{Digest, Sha512};

use super::keys::unb64;

/// A public key decoded for [`verify_stream_with`]: its bytes (hashed into every challenge),
/// the negated point the verification equation uses, and whether it is of small order (a weak
/// key, which strict verification refuses). All are pure functions of the 32 bytes, so a memo
/// of them holds no authorisation state.
#[derive(Clone, Copy)]
pub struct HopKey {
    bytes: [u8; 32],
    minus_a: EdwardsPoint,
    weak: bool,
}

impl HopKey {
    /// Decode (decompress) `pk`, the field square root a caller may memoise; `None` when it is
    /// not a curve point (what `VerifyingKey::from_bytes` refuses).
    pub fn decode(pk: &[u8; 32]) -> Option<HopKey> {
        let a = CompressedEdwardsY(*pk).decompress()?;
        Some(HopKey {
            bytes: *pk,
            minus_a: -a,
            weak: a.is_small_order(),
        })
    }

    /// The key's 32 bytes, as decoded.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.bytes
    }
}

/// Whether the low 255 bits of `enc` (a compressed point's y) are below p = 2^255 - 19, as
/// every encoding `compress` produces is. Decompression reduces the 19 larger values silently:
/// without this check the projective comparison would accept an R whose bytes
/// `verify_strict`'s byte comparison refuses.
fn canonical_y(enc: &[u8; 32]) -> bool {
    !(enc[31] & 0x7f == 0x7f && enc[1..31].iter().all(|&b| b == 0xff) && enc[0] >= 0xed)
}

/// Strict verification of a base64 signature over the message `feed` hands over (through the
/// `update` it is given), hashed as it arrives so the message is never assembled. Accepts
/// exactly what `VerifyingKey::verify_strict` accepts: a canonical `s`, neither the key nor
/// `R` of small order, `R` canonically encoded, and `[s]B - [k]A = R` with
/// k = SHA-512(R || A || M); bad base64 or a wrong length is `false`.
pub fn verify_stream_with(
    key: &HopKey,
    sig_b64: &str,
    feed: impl FnOnce(&mut dyn FnMut(&[u8])),
) -> bool {
    let Some(sig) = unb64(sig_b64) else {
        return false;
    };
    if sig.len() != 64 || key.weak {
        return false;
    }
    let (mut r_enc, mut s_enc) = ([0u8; 32], [0u8; 32]);
    r_enc.copy_from_slice(&sig[..32]);
    s_enc.copy_from_slice(&sig[32..]);
    let Some(s) = Option::<Scalar>::from(Scalar::from_canonical_bytes(s_enc)) else {
        return false;
    };
    if !canonical_y(&r_enc) {
        return false;
    }
    let Some(r) = CompressedEdwardsY(r_enc)
        .decompress()
        .filter(|r| !r.is_small_order())
    else {
        return false;
    };
    let mut h = Sha512::new();
    h.update(r_enc);
    h.update(key.bytes);
    feed(&mut |piece: &[u8]| h.update(piece));
    let mut wide = [0u8; 64];
    wide.copy_from_slice(&h.finalize());
    let k = Scalar::from_bytes_mod_order_wide(&wide);
    EdwardsPoint::vartime_double_scalar_mul_basepoint(&k, &key.minus_a, &s) == r
}

/// The field arithmetic curve25519-dalek chose when the process started for the multiplication
/// [`verify_stream_with`] spends most of its time in: `avx512ifma` (compiled in only through the
/// cfg of `.cargo/config.toml`, and used where the CPU has it), else `avx2`, else `serial`. It
/// mirrors the crate's own run-time choice, which it does not expose, so the relay's start-up
/// log can say which one its figures were measured with.
pub fn curve_arithmetic() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if cfg!(curve25519_dalek_backend = "avx512")
            && std::arch::is_x86_feature_detected!("avx512ifma")
            && std::arch::is_x86_feature_detected!("avx512vl")
        {
            return "avx512ifma";
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return "avx2";
        }
    }
    "serial"
}

#[cfg(test)]
mod tests {
    /// `.cargo/config.toml` asks curve25519-dalek for its IFMA backend on x86-64 (the hop
    /// check's multiplication in 12.5 µs against AVX2's 32.7 on an AMD EPYC): on a CPU with
    /// IFMA, a build without that cfg (RUSTFLAGS set in the environment replaces it) would
    /// quietly run the slower arithmetic.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_cpu_with_ifma_runs_the_hop_check_on_ifma() {
        let ifma = std::arch::is_x86_feature_detected!("avx512ifma")
            && std::arch::is_x86_feature_detected!("avx512vl");
        let expected = if ifma { "avx512ifma" } else { "avx2" };
        assert_eq!(
            curve_arithmetic(),
            expected,
            "is .cargo/config.toml's cfg in the build?"
        );
    }

    use super::*;
    use crate::keys::{b64, verify_with, verifying_key, SigningKey};
    use rand::{Rng as _, SeedableRng as _};

    /// The eight points of small order, each as its canonical encoding: `[l]Q` is the torsion
    /// part of `Q` times `l` (odd, so a bijection of the torsion group), from curve points `Q`.
    fn torsion_encodings() -> Vec<[u8; 32]> {
        let minus_one = Scalar::ZERO - Scalar::ONE;
        let mut out: Vec<[u8; 32]> = Vec::new();
        for y in 0u8..=255 {
            let mut enc = [0u8; 32];
            enc[0] = y;
            enc[5] = 9;
            let Some(q) = CompressedEdwardsY(enc).decompress() else {
                continue;
            };
            let t = q * minus_one + q;
            assert!(t.is_small_order());
            let t = t.compress().to_bytes();
            if !out.contains(&t) {
                out.push(t);
            }
        }
        assert_eq!(out.len(), 8, "all eight small-order points");
        out
    }

    /// The 19 non-canonical encodings of y (p..=2^255-1), with the sign bit clear and set.
    fn non_canonical_encodings() -> Vec<[u8; 32]> {
        let mut out = Vec::new();
        for low in 0xedu8..=0xff {
            for sign in [0u8, 0x80] {
                let mut enc = [0xffu8; 32];
                enc[0] = low;
                enc[31] = 0x7f | sign;
                out.push(enc);
            }
        }
        out
    }

    #[test]
    fn canonical_y_refuses_exactly_the_encodings_at_or_above_p() {
        for enc in non_canonical_encodings() {
            assert!(!canonical_y(&enc), "{enc:?}");
        }
        // p - 1 (= -1, the point of order 2) and everything below p are canonical.
        let mut p_minus_1 = [0xffu8; 32];
        p_minus_1[0] = 0xec;
        p_minus_1[31] = 0x7f;
        assert!(canonical_y(&p_minus_1));
        p_minus_1[31] = 0xff;
        assert!(canonical_y(&p_minus_1));
        let mut below = [0xffu8; 32];
        below[30] = 0xfe;
        below[31] = 0x7f;
        assert!(canonical_y(&below));
        assert!(canonical_y(&[0u8; 32]));
        // Decompression reduces them silently: p + 2 decodes to the same point as 2 would, so
        // only the encoding check separates such an R from its canonical twin.
        for enc in non_canonical_encodings() {
            let reduced = CompressedEdwardsY(enc).decompress();
            if let Some(point) = reduced {
                assert_ne!(point.compress().to_bytes(), enc);
            }
        }
    }

    fn challenge(r: &[u8; 32], a: &[u8; 32], msg: &[u8]) -> Scalar {
        let mut h = Sha512::new();
        h.update(r);
        h.update(a);
        h.update(msg);
        let mut wide = [0u8; 64];
        wide.copy_from_slice(&h.finalize());
        Scalar::from_bytes_mod_order_wide(&wide)
    }

    /// A weak key (a point of order 8) and a signature on `m` the cofactorless equation holds
    /// for: R = [r]B - T_j for the j with [k]T = T_j (about one in eight j match).
    fn weak_key_forgery(torsion: &[[u8; 32]]) -> ([u8; 32], [u8; 64]) {
        use curve25519_dalek::constants::ED25519_BASEPOINT_POINT as B;
        let t_enc = torsion
            .iter()
            .find(|t| {
                let t = CompressedEdwardsY(**t).decompress().expect("a point");
                (t * Scalar::from(4u64)) != EdwardsPoint::default()
            })
            .expect("a point of order 8");
        let t = CompressedEdwardsY(*t_enc).decompress().expect("a point");
        for r_seed in 1u64.. {
            let r = Scalar::from(r_seed);
            for j in 0u64..8 {
                let r_point = B * r - t * Scalar::from(j);
                let r_enc = r_point.compress().to_bytes();
                let k = challenge(&r_enc, t_enc, b"m");
                if t * k == t * Scalar::from(j) {
                    let mut sig = [0u8; 64];
                    sig[..32].copy_from_slice(&r_enc);
                    sig[32..].copy_from_slice(r.as_bytes());
                    return (*t_enc, sig);
                }
            }
        }
        unreachable!("some j matches")
    }

    /// A signature on `m` by the key of `seed` whose R is the identity: s = k * a.
    fn identity_r_forgery(seed: &[u8; 32]) -> [u8; 64] {
        let expanded = ed25519_dalek::hazmat::ExpandedSecretKey::from(seed);
        let a = Scalar::from_bytes_mod_order(expanded.scalar.to_bytes());
        let public = SigningKey::from_seed(seed).public();
        let mut r_enc = [0u8; 32];
        r_enc[0] = 1;
        let s = challenge(&r_enc, &public, b"m") * a;
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&r_enc);
        sig[32..].copy_from_slice(s.as_bytes());
        sig
    }

    /// Differential: on valid, corrupted and hostile signatures and keys, the projective check
    /// answers exactly what ed25519-dalek's `verify_strict` answers (`verify_with`).
    #[test]
    fn streamed_verification_is_exactly_the_strict_check() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(19);
        let key = SigningKey::from_seed(&[7u8; 32]);
        let strict = verifying_key(&key.public()).expect("a point");
        let decoded = HopKey::decode(&key.public()).expect("a point");
        // l, little-endian: s + l is a non-reduced s below 2^253 (the legacy check passes it).
        let l: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let torsion = torsion_encodings();
        let non_canonical = non_canonical_encodings();
        let mut accepted = 0;
        for n in 0..600 {
            let len = rng.gen_range(0..3 * 8192);
            let msg: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let mut sig = unb64(&key.sign(&msg)).expect("base64");
            match n % 8 {
                1 => sig[rng.gen_range(0..64)] ^= 1 << rng.gen_range(0..8),
                2 => sig[63] |= 0xf0, // s not canonical
                3 => {
                    // s + l: the same scalar, not reduced
                    let mut carry = 0u16;
                    for (b, add) in sig[32..].iter_mut().zip(l) {
                        let v = u16::from(*b) + u16::from(add) + carry;
                        *b = v as u8;
                        carry = v >> 8;
                    }
                }
                4 => sig[..32].copy_from_slice(&torsion[n % torsion.len()]),
                5 => sig[..32].copy_from_slice(&non_canonical[n % non_canonical.len()]),
                6 => sig[31] ^= 0x80, // R's sign bit: -R
                _ => {}
            }
            let sig = b64(&sig);
            // Hand the message over in random pieces, some longer than a block.
            let streamed = verify_stream_with(&decoded, &sig, |update| {
                let mut at = 0;
                while at < msg.len() {
                    let step = rng.gen_range(0..=(msg.len() - at).min(2 * 8192));
                    update(&msg[at..at + step]);
                    at += step;
                }
            });
            assert_eq!(streamed, verify_with(&strict, &msg, &sig), "case {n}");
            accepted += usize::from(streamed);
        }
        assert_eq!(accepted, 600 / 8 * 2, "the untouched signatures verify");
        // Weak keys: every small-order point, with R = identity and s = 0 (which passes the
        // lax check for any message) and with a real signature's R and s.
        let real = unb64(&key.sign(b"m")).expect("base64");
        for t in &torsion {
            let weak_strict = verifying_key(t).expect("a point");
            let weak = HopKey::decode(t).expect("a point");
            let mut forged = [0u8; 64];
            forged[0] = 1;
            for sig in [b64(&forged), b64(&real)] {
                assert!(!verify_with(&weak_strict, b"m", &sig));
                assert!(!verify_stream_with(&weak, &sig, |u| u(b"m")));
            }
        }
        // Keys: the same points decode, the same bytes do not.
        for y in 0u8..=40 {
            let mut enc = [0u8; 32];
            enc[0] = y;
            assert_eq!(
                HopKey::decode(&enc).is_some(),
                verifying_key(&enc).is_some(),
                "y {y}"
            );
        }
        for enc in &non_canonical {
            assert_eq!(HopKey::decode(enc).is_some(), verifying_key(enc).is_some());
        }
        // Signatures that satisfy the equation but only by a small-order part: ed25519-dalek's
        // lax `verify` takes both, strict verification neither (each check is needed for this).
        let (weak_key, weak_sig) = weak_key_forgery(&torsion);
        let lax = ed25519_dalek::VerifyingKey::from_bytes(&weak_key).expect("a point");
        let as_sig = ed25519_dalek::Signature::from_bytes(&weak_sig);
        assert!(ed25519_dalek::Verifier::verify(&lax, b"m", &as_sig).is_ok());
        let weak = HopKey::decode(&weak_key).expect("a point");
        assert!(!verify_stream_with(&weak, &b64(&weak_sig), |u| u(b"m")));
        assert!(!verify_with(&lax, b"m", &b64(&weak_sig)));
        let identity_r = identity_r_forgery(&[7u8; 32]);
        let lax = ed25519_dalek::VerifyingKey::from_bytes(&key.public()).expect("a point");
        let as_sig = ed25519_dalek::Signature::from_bytes(&identity_r);
        assert!(ed25519_dalek::Verifier::verify(&lax, b"m", &as_sig).is_ok());
        assert!(!verify_stream_with(&decoded, &b64(&identity_r), |u| u(
            b"m"
        )));
        assert!(!verify_with(&strict, b"m", &b64(&identity_r)));
        assert!(!verify_stream_with(&decoded, "junk", |u| u(b"m")));
        assert!(!verify_stream_with(&decoded, &b64(&[0u8; 63]), |u| u(b"m")));
    }
}
