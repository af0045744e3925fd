//! Ed25519 keys, base64 and signatures as the protocol encodes them (docs/protocol.md §1).
//!
//! Public keys travel as 44-char standard padded base64; signatures as base64 of 64 bytes and
//! always over the UTF-8 of canonical JSON. Verification is strict (`verify_strict`: no
//! small-order keys, no non-canonical signatures). Nothing here ever puts key material into an
//! error or a `Debug` string: a key shows up only as its fingerprint.

use super::canonical::canonical_bytes;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
/// A decoded (decompressed) public key, ready to verify with [`verify_with`].
pub use ed25519_dalek::VerifyingKey;
use ed25519_dalek::{Signature, Signer as _};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Why a private key could not be loaded. Messages never contain key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    /// The seed is not standard base64 of exactly 32 bytes.
    BadSeed,
    /// The key file is neither a base64 seed nor `{"publicKey","privateKey"}` JSON.
    BadKeyFile,
    /// The key file's `publicKey` is not the public key of its `privateKey`.
    PublicKeyMismatch,
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyError::BadSeed => "private key is not a base64 32-byte Ed25519 seed",
            KeyError::BadKeyFile => {
                "key file is neither a base64 seed nor JSON {\"publicKey\",\"privateKey\"}"
            }
            KeyError::PublicKeyMismatch => "key file publicKey does not match its privateKey",
        })
    }
}

impl std::error::Error for KeyError {}

/// A protocol public key: a 44-char string matching `^[A-Za-z0-9+/]+={0,2}$` that decodes to
/// 32 bytes. Anything else is `None`.
pub fn parse_pubkey(s: &str) -> Option<[u8; 32]> {
    if s.len() != 44 {
        return None;
    }
    let body = s.trim_end_matches('=');
    if body.is_empty()
        || s.len() - body.len() > 2
        || !body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
    {
        return None;
    }
    // Decoded in place (one per pushed target): 44 chars decode to at most 33 bytes.
    let mut out = [0u8; 33];
    match STANDARD.decode_slice(s, &mut out) {
        Ok(32) => out[..32].try_into().ok(),
        _ => None,
    }
}

/// Standard base64 with padding.
pub fn b64(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Strict standard base64 (padding required, no whitespace, canonical trailing bits).
pub fn unb64(s: &str) -> Option<Vec<u8>> {
    STANDARD.decode(s).ok()
}

/// The protocol fingerprint: first 16 lowercase hex chars of sha256(raw key), as 4 groups of 4.
pub fn fingerprint(pk: &[u8; 32]) -> String {
    let digest = Sha256::digest(pk);
    let mut out = String::with_capacity(19);
    for (i, byte) in digest.iter().take(8).enumerate() {
        if i > 0 && i % 2 == 0 {
            out.push('-');
        }
        out.push_str(&format!("{byte:02x}"));
    }
    out
}

/// Overwrites secret bytes we are done with (volatile writes, so they are not optimised away).
fn wipe(bytes: &mut [u8]) {
    for b in bytes.iter_mut() {
        // SAFETY: `b` is a valid, aligned, exclusive reference to a u8.
        unsafe { std::ptr::write_volatile(b, 0) };
    }
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// An Ed25519 signing key. The inner key zeroizes its seed on drop (ed25519-dalek's default
/// `zeroize` feature); `Debug` prints only the fingerprint.
pub struct SigningKey {
    inner: ed25519_dalek::SigningKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", fingerprint(&self.public()))
    }
}

impl SigningKey {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        SigningKey {
            inner: ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng),
        }
    }

    /// The key whose 32-byte seed is `seed`.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        SigningKey {
            inner: ed25519_dalek::SigningKey::from_bytes(seed),
        }
    }

    /// The key from a base64 seed (surrounding whitespace, e.g. a trailing newline, ignored).
    pub fn from_seed_b64(s: &str) -> Result<Self, KeyError> {
        let mut bytes = unb64(s.trim()).ok_or(KeyError::BadSeed)?;
        let key = match bytes.len() {
            32 => Self::from_secret_bytes(&bytes),
            _ => Err(KeyError::BadSeed),
        };
        wipe(&mut bytes);
        key
    }

    /// The key from decoded private key bytes: a 32-byte seed, or the 64-byte seed‖public form
    /// (whose public half must match).
    fn from_secret_bytes(bytes: &[u8]) -> Result<Self, KeyError> {
        let (seed, public) = match bytes.len() {
            32 => (bytes, None),
            64 => {
                let (seed, public) = bytes.split_at(32);
                (seed, Some(public))
            }
            _ => return Err(KeyError::BadSeed),
        };
        let mut seed_arr = [0u8; 32];
        seed_arr.copy_from_slice(seed);
        let key = Self::from_seed(&seed_arr);
        wipe(&mut seed_arr);
        match public {
            Some(p) if key.public().as_slice() != p => Err(KeyError::PublicKeyMismatch),
            _ => Ok(key),
        }
    }

    /// The key from a key file's text: a base64 seed, or JSON `{"publicKey","privateKey"}`
    /// where privateKey is the base64 seed (or the 64-byte seed‖public form) and publicKey, if
    /// present, must be its public key.
    pub fn from_key_file(contents: &str) -> Result<Self, KeyError> {
        let text = contents.trim();
        if !text.starts_with('{') {
            return Self::from_seed_b64(text);
        }
        let v: Value = serde_json::from_str(text).map_err(|_| KeyError::BadKeyFile)?;
        let private = v
            .get("privateKey")
            .and_then(Value::as_str)
            .ok_or(KeyError::BadKeyFile)?;
        let mut bytes = unb64(private.trim()).ok_or(KeyError::BadSeed)?;
        let key = Self::from_secret_bytes(&bytes);
        wipe(&mut bytes);
        let key = key?;
        match v.get("publicKey") {
            None | Some(Value::Null) => Ok(key),
            Some(Value::String(p)) if parse_pubkey(p.trim()) == Some(key.public()) => Ok(key),
            Some(_) => Err(KeyError::PublicKeyMismatch),
        }
    }

    /// The base64 seed (for writing a key file; handle with care).
    pub fn seed_b64(&self) -> String {
        b64(self.inner.as_bytes())
    }

    /// The raw 32-byte public key.
    pub fn public(&self) -> [u8; 32] {
        self.inner.verifying_key().to_bytes()
    }

    /// The public key in protocol form (44-char base64).
    pub fn public_b64(&self) -> String {
        b64(&self.public())
    }

    /// The base64 signature of `msg`.
    pub fn sign(&self, msg: &[u8]) -> String {
        b64(&self.inner.sign(msg).to_bytes())
    }

    /// The base64 signatures of `msgs`, in order: what [`Self::sign`] gives for each, computed
    /// as one batch ([`super::batch_sign`]).
    pub fn sign_many(&self, msgs: &[&[u8]]) -> Vec<String> {
        super::batch_sign::sign_batch(self.inner.as_bytes(), &self.public(), msgs)
            .iter()
            .map(|s| b64(s))
            .collect()
    }

    /// The base64 signature of canonical(`v`).
    pub fn sign_canonical(&self, v: &Value) -> String {
        self.sign(&canonical_bytes(v))
    }
}

/// Strict verification of a base64 signature; a bad key, bad base64 or wrong length is `false`.
pub fn verify(pk: &[u8; 32], msg: &[u8], sig_b64: &str) -> bool {
    verifying_key(pk).is_some_and(|key| verify_with(&key, msg, sig_b64))
}

/// Decode (decompress) a raw public key; `None` when it is not a curve point. This square root
/// is the part of [`verify`] a caller may memoise per key.
pub fn verifying_key(pk: &[u8; 32]) -> Option<VerifyingKey> {
    VerifyingKey::from_bytes(pk).ok()
}

/// [`verify`] with an already decoded key: the one strict verification routine.
pub fn verify_with(key: &VerifyingKey, msg: &[u8], sig_b64: &str) -> bool {
    let Some(sig_bytes) = unb64(sig_b64) else {
        return false;
    };
    let Ok(sig_arr) = <[u8; 64]>::try_from(sig_bytes.as_slice()) else {
        return false;
    };
    key.verify_strict(msg, &Signature::from_bytes(&sig_arr))
        .is_ok()
}

/// [`verify`] over canonical(`v`).
pub fn verify_canonical(pk: &[u8; 32], v: &Value, sig_b64: &str) -> bool {
    verify(pk, &canonical_bytes(v), sig_b64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SEED: &str = "1IPTnsfO4/QMRVsIxZecNEiuRlmJE/EPGX9LwjyzhS8=";
    const PUB: &str = "RGFywaMKEAqDxDq8ONlqDj48IAilo9uA2tLmfI/i70g=";

    #[test]
    fn pubkey_form_is_strict() {
        assert!(parse_pubkey(PUB).is_some());
        assert!(parse_pubkey(&PUB[..43]).is_none());
        assert!(parse_pubkey(&format!("{PUB}=")).is_none());
        assert!(parse_pubkey(&format!(" {}", &PUB[1..])).is_none());
        // url-safe alphabet, 33 bytes, 31 bytes, non-ASCII, whitespace
        assert!(parse_pubkey("RGFywaMKEAqDxDq8ONlqDj48IAilo9uA2tLmfI_i70g=").is_none());
        assert!(parse_pubkey(&b64(&[7u8; 33])).is_none());
        assert!(parse_pubkey(&b64(&[7u8; 31])).is_none());
        assert!(parse_pubkey("é".repeat(22).as_str()).is_none());
        assert!(parse_pubkey("RGFywaMKEAqDxDq8ONlqDj48IAilo9uA2tLmfI/i70\n=").is_none());
        assert!(parse_pubkey("============================================").is_none());
        assert!(parse_pubkey("").is_none());
        // non-canonical trailing bits are refused, like `unb64` refuses them
        let loose = PUB.replace("70g=", "70h=");
        assert_eq!(unb64(&loose), None);
        assert!(parse_pubkey(&loose).is_none());
        assert_eq!(parse_pubkey(PUB).map(|k| k.to_vec()), unb64(PUB));
    }

    #[test]
    fn base64_roundtrip_and_strictness() {
        assert_eq!(b64(b"hi"), "aGk=");
        assert_eq!(unb64("aGk="), Some(b"hi".to_vec()));
        assert_eq!(unb64("aGk"), None);
        assert_eq!(unb64("aG k="), None);
        assert_eq!(unb64("aGl="), None, "non-canonical trailing bits");
        assert_eq!(unb64(""), Some(vec![]));
    }

    #[test]
    fn seed_loading_and_debug() {
        let key = SigningKey::from_seed_b64(SEED).expect("seed");
        assert_eq!(key.public_b64(), PUB);
        assert_eq!(key.seed_b64(), SEED);
        let dbg = format!("{key:?}");
        assert_eq!(dbg, "SigningKey(7952-5199-3237-3dd6)");
        assert!(!dbg.contains(SEED));
        assert_eq!(
            SigningKey::from_seed_b64(&format!("{SEED}\n")).map(|k| k.public_b64()),
            Ok(PUB.to_string())
        );
        assert_eq!(
            SigningKey::from_seed_b64("nope").err(),
            Some(KeyError::BadSeed)
        );
        assert_eq!(
            SigningKey::from_seed_b64(&b64(&[1u8; 31])).err(),
            Some(KeyError::BadSeed)
        );
    }

    #[test]
    fn key_file_forms() {
        let ok = SigningKey::from_key_file(&format!("{SEED}\n")).expect("plain seed");
        assert_eq!(ok.public_b64(), PUB);
        let json = format!("{{\"publicKey\":\"{PUB}\",\"privateKey\":\"{SEED}\"}}");
        assert_eq!(
            SigningKey::from_key_file(&json).map(|k| k.public_b64()),
            Ok(PUB.to_string())
        );
        let no_pub = format!("{{\"privateKey\":\"{SEED}\"}}");
        assert!(SigningKey::from_key_file(&no_pub).is_ok());
        let mut long = unb64(SEED).unwrap_or_default();
        long.extend_from_slice(&unb64(PUB).unwrap_or_default());
        let sixty_four = format!("{{\"privateKey\":\"{}\"}}", b64(&long));
        assert_eq!(
            SigningKey::from_key_file(&sixty_four).map(|k| k.public_b64()),
            Ok(PUB.to_string())
        );
        long[63] ^= 1;
        let bad_tail = format!("{{\"privateKey\":\"{}\"}}", b64(&long));
        assert_eq!(
            SigningKey::from_key_file(&bad_tail).err(),
            Some(KeyError::PublicKeyMismatch)
        );
        let other = b64(&[9u8; 32]);
        let mismatch = format!("{{\"publicKey\":\"{other}\",\"privateKey\":\"{SEED}\"}}");
        assert_eq!(
            SigningKey::from_key_file(&mismatch).err(),
            Some(KeyError::PublicKeyMismatch)
        );
        let pub_not_string = format!("{{\"publicKey\":5,\"privateKey\":\"{SEED}\"}}");
        assert_eq!(
            SigningKey::from_key_file(&pub_not_string).err(),
            Some(KeyError::PublicKeyMismatch)
        );
        assert_eq!(
            SigningKey::from_key_file("{\"publicKey\":\"x\"}").err(),
            Some(KeyError::BadKeyFile)
        );
        assert_eq!(
            SigningKey::from_key_file("{not json").err(),
            Some(KeyError::BadKeyFile)
        );
        assert_eq!(SigningKey::from_key_file("").err(), Some(KeyError::BadSeed));
        for err in [
            KeyError::BadSeed,
            KeyError::BadKeyFile,
            KeyError::PublicKeyMismatch,
        ] {
            assert!(!err.to_string().contains(SEED));
        }
    }

    #[test]
    fn sign_and_verify() {
        let key = SigningKey::generate();
        let pk = key.public();
        let v = json!({"b": 1, "a": "x"});
        let sig = key.sign_canonical(&v);
        assert!(verify_canonical(&pk, &v, &sig));
        assert!(verify(&pk, b"{\"a\":\"x\",\"b\":1}", &sig));
        assert!(!verify_canonical(&pk, &json!({"a": "x", "b": 2}), &sig));
        assert!(!verify(&pk, b"m", "not base64"));
        assert!(!verify(&pk, b"m", &b64(&[0u8; 63])));
        assert!(!verify(&pk, b"m", &b64(&[0u8; 64])));
        let other = SigningKey::generate();
        assert!(!verify_canonical(&other.public(), &v, &sig));
        // identity point (small order) is refused by strict verification
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert!(!verify(&identity, b"m", &sig));
        // the decoded-key form is the same check
        let decoded = verifying_key(&pk).expect("a generated key is a point");
        assert!(verify_with(&decoded, b"{\"a\":\"x\",\"b\":1}", &sig));
        assert!(!verify_with(&decoded, b"m", &sig));
        let weak = verifying_key(&identity).expect("the identity is a point");
        assert!(!verify_with(&weak, b"m", &sig));
        // y = 2 is not on the curve: no key, so nothing verifies
        let mut off_curve = [0u8; 32];
        off_curve[0] = 2;
        assert!(verifying_key(&off_curve).is_none());
        assert!(!verify(&off_curve, b"m", &sig));
    }

    #[test]
    fn fingerprint_format() {
        let fp = fingerprint(&[0u8; 32]);
        assert_eq!(fp, "6668-7aad-f862-bd77");
        assert_eq!(fp.len(), 19);
    }
}
