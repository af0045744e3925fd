//! agentmbx's cloud-key certificate and the thumbprint an account token is bound by (spec §8):
//! a host certifies its cloud key with its host key, `{v:1, type:"cloud-key", host_pub,
//! cloud_pub, aud, iat}` signed over its canonical JSON; the accounts service binds the host's
//! relay token to that cloud key by `cnf.jkt`, the RFC 7638 thumbprint of the key's JWK. The
//! host builds both, the relay checks both: one definition serves the two sides.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::accept::sha256;
use crate::keys::b64;

/// The certificate (unsigned) that `host_pub` certifies `cloud_pub` with, for the relay at
/// `aud`, made at `iat` (seconds since the epoch).
pub fn certificate(host_pub: &[u8; 32], cloud_pub: &[u8; 32], aud: &str, iat: u64) -> Value {
    json!({
        "v": 1,
        "type": "cloud-key",
        "host_pub": b64(host_pub),
        "cloud_pub": b64(cloud_pub),
        "aud": aud,
        "iat": iat,
    })
}

/// The RFC 7638 thumbprint of an Ed25519 public key (`cnf.jkt` of a token bound to it):
/// base64url of the SHA-256 of `{"crv":"Ed25519","kty":"OKP","x":"<base64url key>"}`.
pub fn thumbprint(key: &[u8; 32]) -> String {
    let jwk = format!(
        r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
        URL_SAFE_NO_PAD.encode(key)
    );
    URL_SAFE_NO_PAD.encode(sha256(jwk.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{verify_canonical, SigningKey};

    /// RFC 8037 Appendix A.3: the thumbprint of its Ed25519 example key.
    #[test]
    fn the_thumbprint_is_rfc_8037s() {
        let x = URL_SAFE_NO_PAD
            .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
            .unwrap();
        assert_eq!(
            thumbprint(&x.try_into().unwrap()),
            "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"
        );
    }

    #[test]
    fn a_certificate_signed_by_the_host_key_verifies_with_it_only() {
        let (host, cloud, other) = (
            SigningKey::generate(),
            SigningKey::generate(),
            SigningKey::generate(),
        );
        let cert = certificate(&host.public(), &cloud.public(), "https://r.example", 5);
        assert_eq!(cert.as_object().unwrap().len(), 6);
        let sig = host.sign_canonical(&cert);
        assert!(verify_canonical(&host.public(), &cert, &sig));
        assert!(!verify_canonical(&other.public(), &cert, &sig));
    }
}
