//! Keys (skeleton).
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyError {
    BadSeed,
    BadKeyFile,
    PublicKeyMismatch,
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self)
    }
}
impl std::error::Error for KeyError {}

pub fn parse_pubkey(s: &str) -> Option<[u8; 32]> {
    let _ = s;
    todo!()
}
pub fn b64(bytes: &[u8]) -> String {
    let _ = bytes;
    todo!()
}
pub fn unb64(s: &str) -> Option<Vec<u8>> {
    let _ = s;
    todo!()
}
pub fn fingerprint(pk: &[u8; 32]) -> String {
    let _ = pk;
    todo!()
}

pub struct SigningKey {
    inner: ed25519_dalek::SigningKey,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", fingerprint(&self.public()))
    }
}

impl SigningKey {
    pub fn generate() -> Self {
        todo!()
    }
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        SigningKey {
            inner: ed25519_dalek::SigningKey::from_bytes(seed),
        }
    }
    pub fn from_seed_b64(s: &str) -> Result<Self, KeyError> {
        let _ = s;
        todo!()
    }
    pub fn from_key_file(contents: &str) -> Result<Self, KeyError> {
        let _ = contents;
        todo!()
    }
    pub fn seed_b64(&self) -> String {
        todo!()
    }
    pub fn public(&self) -> [u8; 32] {
        self.inner.verifying_key().to_bytes()
    }
    pub fn public_b64(&self) -> String {
        todo!()
    }
    pub fn sign(&self, msg: &[u8]) -> String {
        let _ = msg;
        todo!()
    }
    pub fn sign_canonical(&self, v: &Value) -> String {
        let _ = v;
        todo!()
    }
}

pub fn verify(pk: &[u8; 32], msg: &[u8], sig_b64: &str) -> bool {
    let _ = (pk, msg, sig_b64);
    todo!()
}
pub fn verify_canonical(pk: &[u8; 32], v: &Value, sig_b64: &str) -> bool {
    let _ = (pk, v, sig_b64);
    todo!()
}
