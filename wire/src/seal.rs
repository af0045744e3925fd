//! Body sealing and envelope host signatures, the agentmbx way (T028).
//!
//! Sealing: an ephemeral X25519 key agrees a secret with the recipient host's advertised enc key;
//! HKDF-SHA256 (salt = the ephemeral public key, info = `agentmbx-enc-1:<envelope id>`) stretches it
//! to a 32-byte key; XChaCha20-Poly1305 with a random 24-byte nonce seals the UTF-8 body (no
//! associated data). The envelope carries `enc = {"v":1,"alg","epk","nonce","body"}` (base64) and,
//! as agentmbx does on the wire, its `body` field holds the same base64 ciphertext as `enc.body`.
//!
//! Host signature: `sig = {"alg":"ed25519","host","key":<fingerprint of the host key>,"value"}`,
//! where `value` signs canonical(envelope without `sig`, with `body` replaced by `enc.body` when
//! sealed). The signature so commits to the exact ciphertext, and a locally opened copy (plaintext
//! `body`, same `enc`) verifies identically.
//!
//! No I/O; randomness comes from the OS generator.

use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use rand::RngCore;
use serde_json::{json, Map, Value};
use sha2::Sha256;
use x25519_dalek::{PublicKey, StaticSecret};

use super::canonical::canonical_json;
use super::keys::{b64, fingerprint, unb64, verify, SigningKey};

/// The `enc.alg` this module seals with (the one the shape check accepts).
pub(crate) use crate::envelope::ENC_ALG;

/// Why a body could not be sealed or opened. Messages never contain key material or plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SealError {
    /// The `enc` object is not a well-formed v1 seal.
    BadEnc(&'static str),
    /// Authentication failed: wrong key, tampered ciphertext, or another envelope's seal.
    Undecryptable,
    /// The plaintext is not UTF-8 (agentmbx bodies are strings).
    NotUtf8,
    /// The envelope is not a JSON object with a string `id` and `body`.
    BadEnvelope,
}

impl std::fmt::Display for SealError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SealError::BadEnc(why) => write!(f, "{why}"),
            SealError::Undecryptable => write!(f, "undecryptable"),
            SealError::NotUtf8 => write!(f, "sealed body is not UTF-8"),
            SealError::BadEnvelope => write!(f, "not an envelope"),
        }
    }
}
impl std::error::Error for SealError {}

/// A host's long-lived X25519 enc key (its public half is advertised through the relay).
pub struct EncSecret(StaticSecret);

impl std::fmt::Debug for EncSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EncSecret({})", fingerprint(&self.public()))
    }
}

impl EncSecret {
    /// A fresh random enc key.
    pub fn generate() -> Self {
        EncSecret(StaticSecret::random_from_rng(rand::rngs::OsRng))
    }
    /// From the raw 32-byte secret.
    pub fn from_bytes(b: [u8; 32]) -> Self {
        EncSecret(StaticSecret::from(b))
    }
    /// From the base64 secret (the key file's contents); `None` if it is not 32 bytes of base64.
    pub fn from_b64(s: &str) -> Option<Self> {
        let v = unb64(s.trim())?;
        let b: [u8; 32] = v.try_into().ok()?;
        Some(Self::from_bytes(b))
    }
    /// The base64 secret, for the 0600 key file only.
    pub fn secret_b64(&self) -> String {
        b64(self.0.as_bytes())
    }
    /// The public enc key.
    pub fn public(&self) -> [u8; 32] {
        PublicKey::from(&self.0).to_bytes()
    }
    /// The public enc key, base64.
    pub fn public_b64(&self) -> String {
        b64(&self.public())
    }
}

/// The 32-byte body key: HKDF-SHA256(ikm = shared, salt = epk, info = `agentmbx-enc-1:<id>`).
fn body_key(shared: &[u8; 32], epk: &[u8; 32], envelope_id: &str) -> [u8; 32] {
    let hk = Hkdf::<Sha256>::new(Some(epk), shared);
    let mut okm = [0u8; 32];
    let info = format!("agentmbx-enc-1:{envelope_id}");
    #[allow(
        clippy::expect_used,
        reason = "32 bytes is far below HKDF-SHA256's 8160-byte limit: expand cannot fail"
    )]
    hk.expand(info.as_bytes(), &mut okm)
        .expect("32-byte HKDF output");
    okm
}

/// Seal `plain` for the recipient's enc key; returns the `enc` v1 object.
pub(crate) fn seal_body(plain: &[u8], recipient_enc_pub: &[u8; 32], envelope_id: &str) -> Value {
    let eph = StaticSecret::random_from_rng(rand::rngs::OsRng);
    let epk = PublicKey::from(&eph).to_bytes();
    let shared = eph.diffie_hellman(&PublicKey::from(*recipient_enc_pub));
    let key = body_key(shared.as_bytes(), &epk, envelope_id);
    let mut nonce = [0u8; 24];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let cipher = XChaCha20Poly1305::new((&key).into());
    #[allow(
        clippy::expect_used,
        reason = "XChaCha20-Poly1305 with a valid key and nonce fails only past 256 GiB of plaintext"
    )]
    let ct = cipher
        .encrypt(XNonce::from_slice(&nonce), plain)
        .expect("XChaCha20-Poly1305 encrypt");
    json!({"v": 1, "alg": ENC_ALG, "epk": b64(&epk), "nonce": b64(&nonce), "body": b64(&ct)})
}

/// Decode a base64 field of `enc` to exactly `N` bytes.
fn enc_field<const N: usize>(
    enc: &Value,
    field: &str,
    why: &'static str,
) -> Result<[u8; N], SealError> {
    let s = enc
        .get(field)
        .and_then(Value::as_str)
        .ok_or(SealError::BadEnc(why))?;
    unb64(s)
        .and_then(|v| v.try_into().ok())
        .ok_or(SealError::BadEnc(why))
}

/// Open an `enc` v1 object with the recipient's enc secret.
///
/// # Errors
/// `BadEnc` for a malformed seal, `Undecryptable` when authentication fails.
pub(crate) fn open_body(
    enc: &Value,
    secret: &EncSecret,
    envelope_id: &str,
) -> Result<Vec<u8>, SealError> {
    if !enc.is_object() {
        return Err(SealError::BadEnc("bad enc"));
    }
    if enc.get("v").and_then(Value::as_u64) != Some(1) {
        return Err(SealError::BadEnc("unsupported enc version"));
    }
    if enc.get("alg").and_then(Value::as_str) != Some(ENC_ALG) {
        return Err(SealError::BadEnc("unsupported enc algorithm"));
    }
    let epk: [u8; 32] = enc_field(enc, "epk", "bad enc epk")?;
    let nonce: [u8; 24] = enc_field(enc, "nonce", "bad enc nonce")?;
    let ct = enc
        .get("body")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .and_then(unb64)
        .ok_or(SealError::BadEnc("bad enc body"))?;
    let shared = secret.0.diffie_hellman(&PublicKey::from(epk));
    let key = body_key(shared.as_bytes(), &epk, envelope_id);
    XChaCha20Poly1305::new((&key).into())
        .decrypt(XNonce::from_slice(&nonce), ct.as_slice())
        .map_err(|_| SealError::Undecryptable)
}

/// The bytes an envelope's host signature covers: canonical(envelope without `sig`), with `body`
/// replaced by `enc.body` when the envelope is sealed. `None` if it is not an object.
pub(crate) fn envelope_signing_payload(env: &Value) -> Option<String> {
    let mut m: Map<String, Value> = env.as_object()?.clone();
    m.remove("sig");
    if let Some(enc_body) = m.get("enc").and_then(|e| e.get("body")).cloned() {
        if m.get("enc").is_some_and(Value::is_object) {
            m.insert("body".into(), enc_body);
        }
    }
    Some(canonical_json(&Value::Object(m)))
}

/// Host-sign an envelope (replacing any previous `sig`).
///
/// # Errors
/// `BadEnvelope` if it is not a JSON object.
pub(crate) fn sign_envelope(env: Value, host: &str, key: &SigningKey) -> Result<Value, SealError> {
    let payload = envelope_signing_payload(&env).ok_or(SealError::BadEnvelope)?;
    let value = key.sign(payload.as_bytes());
    let mut m = match env {
        Value::Object(m) => m,
        _ => return Err(SealError::BadEnvelope),
    };
    m.insert(
        "sig".into(),
        json!({"alg": "ed25519", "host": host, "key": fingerprint(&key.public()), "value": value}),
    );
    Ok(Value::Object(m))
}

/// Seal a plaintext envelope's body for one recipient host's enc key and host-sign the wire form:
/// `enc` filled, `body` = the base64 ciphertext, `sig` added.
///
/// # Errors
/// `BadEnvelope` if it is not an object with a string `id` and `body`.
pub fn seal_envelope(
    env: Value,
    recipient_enc_pub: &[u8; 32],
    host: &str,
    key: &SigningKey,
) -> Result<Value, SealError> {
    let id = env
        .get("id")
        .and_then(Value::as_str)
        .ok_or(SealError::BadEnvelope)?;
    let body = env
        .get("body")
        .and_then(Value::as_str)
        .ok_or(SealError::BadEnvelope)?;
    let enc = seal_body(body.as_bytes(), recipient_enc_pub, id);
    let mut m = match env {
        Value::Object(m) => m,
        _ => return Err(SealError::BadEnvelope),
    };
    m.insert("body".into(), enc["body"].clone());
    m.insert("enc".into(), enc);
    sign_envelope(Value::Object(m), host, key)
}

/// Whether the envelope carries a valid host signature by `host_pub` (alg ed25519, key = its
/// fingerprint, value over [`envelope_signing_payload`]).
pub fn verify_envelope(env: &Value, host_pub: &[u8; 32]) -> bool {
    let Some(sig) = env.get("sig") else {
        return false;
    };
    if sig.get("alg").and_then(Value::as_str) != Some("ed25519")
        || sig.get("key").and_then(Value::as_str) != Some(fingerprint(host_pub).as_str())
    {
        return false;
    }
    let Some(value) = sig.get("value").and_then(Value::as_str) else {
        return false;
    };
    match envelope_signing_payload(env) {
        Some(p) => verify(host_pub, p.as_bytes(), value),
        None => false,
    }
}

/// Open a sealed envelope's body (the caller verified its signature first).
///
/// # Errors
/// `BadEnvelope` without a string id, `BadEnc`/`Undecryptable` from [`open_body`], `NotUtf8`.
pub fn open_envelope(env: &Value, secret: &EncSecret) -> Result<String, SealError> {
    let id = env
        .get("id")
        .and_then(Value::as_str)
        .ok_or(SealError::BadEnvelope)?;
    let enc = env.get("enc").ok_or(SealError::BadEnc("bad enc"))?;
    let plain = open_body(enc, secret, id)?;
    String::from_utf8(plain).map_err(|_| SealError::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::check_envelope_wire;

    const ID: &str = "01KB5Z2X3Y4Z5A6B7C8D9E0F1G";

    fn plain_envelope(body: &str) -> Value {
        json!({
            "v": 3, "id": ID, "ts": "2026-11-29T14:00:00.000Z", "from": "owner@laptop",
            "to": ["owner@desk"], "thread": ID, "reply_to": null, "kind": "message",
            "subject": "hello", "body": body, "needs_reply": false, "refs": [],
            "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
            "authority": null, "enc": null
        })
    }

    fn sealed(body: &str) -> (Value, EncSecret, SigningKey) {
        let enc = EncSecret::generate();
        let host = SigningKey::generate();
        let env = seal_envelope(plain_envelope(body), &enc.public(), "laptop", &host).unwrap();
        (env, enc, host)
    }

    #[test]
    fn round_trip_opens_and_verifies() {
        let body = "héllo 中文 \u{1F600}\nline two";
        let (env, enc, host) = sealed(body);
        assert_eq!(env["body"], env["enc"]["body"]);
        assert_ne!(env["body"].as_str().unwrap(), body);
        assert!(verify_envelope(&env, &host.public()));
        assert_eq!(open_envelope(&env, &enc).unwrap(), body);
    }

    #[test]
    fn sealed_envelope_passes_the_relay_wire_check() {
        let (env, _, _) = sealed("some body");
        let wire = crate::canonical::canonical_bytes(&env);
        let parsed = check_envelope_wire(&wire, ID).expect("relay accepts the sealed envelope");
        assert_eq!(parsed["id"], ID);
        assert!(check_envelope_wire(&wire, "01KB5Z2X3Y4Z5A6B7C8D9E0F1H").is_err());
    }

    #[test]
    fn wrong_key_fails() {
        let (env, _, host) = sealed("secret");
        let other = EncSecret::generate();
        assert_eq!(open_envelope(&env, &other), Err(SealError::Undecryptable));
        assert!(!verify_envelope(&env, &SigningKey::generate().public()));
        assert!(verify_envelope(&env, &host.public()));
    }

    #[test]
    fn tampered_ciphertext_fails_both_checks() {
        let (mut env, enc, host) = sealed("secret");
        let mut ct = unb64(env["enc"]["body"].as_str().unwrap()).unwrap();
        ct[0] ^= 1;
        env["enc"]["body"] = Value::String(b64(&ct));
        env["body"] = env["enc"]["body"].clone();
        assert!(!verify_envelope(&env, &host.public()));
        assert_eq!(open_envelope(&env, &enc), Err(SealError::Undecryptable));
    }

    #[test]
    fn seal_is_bound_to_the_envelope_id() {
        let (mut env, enc, _) = sealed("secret");
        env["id"] = Value::String("01KB5Z2X3Y4Z5A6B7C8D9E0F1H".into());
        assert_eq!(open_envelope(&env, &enc), Err(SealError::Undecryptable));
    }

    #[test]
    fn tampered_header_breaks_the_signature_only() {
        let (mut env, enc, host) = sealed("secret");
        env["subject"] = Value::String("changed".into());
        assert!(!verify_envelope(&env, &host.public()));
        assert_eq!(open_envelope(&env, &enc).unwrap(), "secret");
    }

    #[test]
    fn opened_copy_with_plaintext_body_still_verifies() {
        let (mut env, enc, host) = sealed("secret");
        env["body"] = Value::String(open_envelope(&env, &enc).unwrap());
        assert!(verify_envelope(&env, &host.public()));
    }

    #[test]
    fn malformed_enc_is_refused_before_decryption() {
        let enc = EncSecret::generate();
        for (bad, why) in [
            (json!("x"), "bad enc"),
            (json!({"v": 2}), "unsupported enc version"),
            (json!({"v": 1, "alg": "rsa"}), "unsupported enc algorithm"),
            (
                json!({"v": 1, "alg": ENC_ALG, "epk": "AAAA"}),
                "bad enc epk",
            ),
        ] {
            assert_eq!(open_body(&bad, &enc, ID), Err(SealError::BadEnc(why)));
        }
    }

    #[test]
    fn enc_secret_round_trips_through_base64() {
        let a = EncSecret::generate();
        let b = EncSecret::from_b64(&a.secret_b64()).unwrap();
        assert_eq!(a.public(), b.public());
        assert!(EncSecret::from_b64("not base64!").is_none());
        assert!(!format!("{a:?}").contains(&a.secret_b64()));
    }
}
