//! Signed JSON Web Tokens (RFC 7515/7519) and the JSON Web Keys that verify them (RFC 7517/7518),
//! for the account-token authority ([`super::authority_token`]): the compact form split and
//! decoded, the header's `alg`/`kid`, and the signature checked with `ring` (already linked for
//! TLS) for the three algorithms an accounts service signs with: `EdDSA` (Ed25519), `ES256`
//! (P-256) and `RS256` (RSA, 2048 bits or more). A key's type decides the one algorithm it
//! verifies, so a token cannot pick a weaker reading of a key (`alg: none`, HMAC with a public
//! key, ... are refused).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

/// The longest token read (tokens of an accounts service are well under 2 KiB).
pub(crate) const MAX_TOKEN_BYTES: usize = 8 * 1024;
/// The shortest RSA modulus accepted, in bytes (2048 bits).
const MIN_RSA_BYTES: usize = 256;
/// The longest RSA modulus accepted, in bytes (8192 bits: bounds a verification's CPU).
const MAX_RSA_BYTES: usize = 1024;

/// A signature algorithm this relay verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alg {
    EdDsa,
    Es256,
    Rs256,
}

impl Alg {
    fn from_name(name: &str) -> Option<Alg> {
        match name {
            "EdDSA" => Some(Alg::EdDsa),
            "ES256" => Some(Alg::Es256),
            "RS256" => Some(Alg::Rs256),
            _ => None,
        }
    }
}

/// A public key from a JWKS, ready to verify.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PublicJwk {
    /// `kty: OKP, crv: Ed25519`: the 32-byte key.
    Ed25519(Vec<u8>),
    /// `kty: EC, crv: P-256`: the uncompressed point `04 || x || y`.
    P256(Vec<u8>),
    /// `kty: RSA`: modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
}

impl PublicJwk {
    /// The one algorithm this key verifies.
    pub(crate) fn alg(&self) -> Alg {
        match self {
            PublicJwk::Ed25519(_) => Alg::EdDsa,
            PublicJwk::P256(_) => Alg::Es256,
            PublicJwk::Rsa { .. } => Alg::Rs256,
        }
    }

    /// Read one JWK of a key set: its `kid` and key, or why it is not usable (a key for
    /// encryption, an unknown type, a short RSA modulus, an `alg` other than its type's).
    ///
    /// # Errors
    /// A short text naming what is wrong.
    pub(crate) fn parse(jwk: &Value) -> Result<(String, PublicJwk), String> {
        let o = jwk.as_object().ok_or("a key that is not an object")?;
        let kid = text(o, "kid").ok_or("a key without kid")?;
        if o.get("use").is_some_and(|u| u.as_str() != Some("sig")) {
            return Err(format!("key {kid}: use is not sig"));
        }
        let bytes = |name: &str| -> Result<Vec<u8>, String> {
            text(o, name)
                .and_then(|s| URL_SAFE_NO_PAD.decode(s).ok())
                .ok_or_else(|| format!("key {kid}: no readable {name}"))
        };
        let key = match (text(o, "kty"), text(o, "crv")) {
            (Some("OKP"), Some("Ed25519")) => {
                let x = bytes("x")?;
                if x.len() != 32 {
                    return Err(format!("key {kid}: an Ed25519 x is 32 bytes"));
                }
                PublicJwk::Ed25519(x)
            }
            (Some("EC"), Some("P-256")) => {
                let (x, y) = (bytes("x")?, bytes("y")?);
                if x.len() != 32 || y.len() != 32 {
                    return Err(format!("key {kid}: a P-256 coordinate is 32 bytes"));
                }
                let mut point = Vec::with_capacity(65);
                point.push(4);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                PublicJwk::P256(point)
            }
            (Some("RSA"), _) => {
                let n = strip_zeros(bytes("n")?);
                let e = strip_zeros(bytes("e")?);
                if !(MIN_RSA_BYTES..=MAX_RSA_BYTES).contains(&n.len()) || e.is_empty() {
                    return Err(format!("key {kid}: RSA modulus of 2048 to 8192 bits only"));
                }
                PublicJwk::Rsa { n, e }
            }
            _ => {
                return Err(format!(
                    "key {kid}: not an OKP/Ed25519, EC/P-256 or RSA key"
                ))
            }
        };
        if let Some(alg) = o.get("alg") {
            if alg.as_str().and_then(Alg::from_name) != Some(key.alg()) {
                return Err(format!("key {kid}: alg does not match its key type"));
            }
        }
        Ok((kid.to_owned(), key))
    }

    fn verifies(&self, msg: &[u8], sig: &[u8]) -> bool {
        match self {
            PublicJwk::Ed25519(k) => UnparsedPublicKey::new(&signature::ED25519, k)
                .verify(msg, sig)
                .is_ok(),
            PublicJwk::P256(p) => UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, p)
                .verify(msg, sig)
                .is_ok(),
            PublicJwk::Rsa { n, e } => RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, msg, sig)
                .is_ok(),
        }
    }
}

fn strip_zeros(mut v: Vec<u8>) -> Vec<u8> {
    let zeros = v.iter().take_while(|b| **b == 0).count();
    v.drain(..zeros);
    v
}

fn text<'a>(o: &'a Map<String, Value>, name: &str) -> Option<&'a str> {
    o.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A compact token split and decoded, its signature not yet checked.
#[derive(Debug)]
pub(crate) struct Unverified {
    alg: Alg,
    /// The header's `kid`: which key of the issuer's set signed it.
    pub(crate) kid: String,
    claims: Map<String, Value>,
    signed: Vec<u8>,
    sig: Vec<u8>,
}

impl Unverified {
    /// Split and decode `token`: three base64url parts, a header naming a supported `alg` and
    /// a `kid` with no `crit` extensions, and a claims object.
    ///
    /// # Errors
    /// A short text naming what is wrong (never the token itself).
    pub(crate) fn parse(token: &str) -> Result<Unverified, String> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err("the token is too long".into());
        }
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("the token is not a compact JWS (three parts)".into());
        };
        let decode = |p: &str| URL_SAFE_NO_PAD.decode(p).ok();
        let object = |p: &str| -> Option<Map<String, Value>> {
            match serde_json::from_slice(&decode(p)?).ok()? {
                Value::Object(m) => Some(m),
                _ => None,
            }
        };
        let header = object(h).ok_or("the token header is not a JSON object")?;
        let claims = object(c).ok_or("the token claims are not a JSON object")?;
        let sig = decode(s).ok_or("the token signature is not base64url")?;
        if header.contains_key("crit") {
            return Err("the token header has crit extensions".into());
        }
        let alg = text(&header, "alg")
            .and_then(Alg::from_name)
            .ok_or("the token alg is not EdDSA, ES256 or RS256")?;
        let kid = text(&header, "kid").ok_or("the token header has no kid")?;
        Ok(Unverified {
            alg,
            kid: kid.to_owned(),
            claims,
            signed: format!("{h}.{c}").into_bytes(),
            sig,
        })
    }

    /// The claims, if `key` (the issuer's key named by [`Unverified::kid`]) signed them with
    /// the algorithm its type allows.
    ///
    /// # Errors
    /// The algorithm does not match the key, or the signature does not verify.
    pub(crate) fn verify(self, key: &PublicJwk) -> Result<Map<String, Value>, String> {
        if key.alg() != self.alg {
            return Err("the token alg does not match its key".into());
        }
        if !key.verifies(&self.signed, &self.sig) {
            return Err("the token signature does not verify".into());
        }
        Ok(self.claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
    use serde_json::json;

    fn b64(b: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(b)
    }

    fn compact(header: &Value, claims: &Value, sign: impl Fn(&[u8]) -> Vec<u8>) -> String {
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let sig = sign(signed.as_bytes());
        format!("{signed}.{}", b64(&sig))
    }

    fn ed_key() -> (Ed25519KeyPair, PublicJwk) {
        let doc = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let pair = Ed25519KeyPair::from_pkcs8(doc.as_ref()).unwrap();
        let jwk =
            json!({"kty":"OKP","crv":"Ed25519","kid":"a","x": b64(pair.public_key().as_ref())});
        let (_, key) = PublicJwk::parse(&jwk).unwrap();
        (pair, key)
    }

    #[test]
    fn an_eddsa_token_verifies_with_its_key_and_not_with_another() {
        let (pair, key) = ed_key();
        let (_, other) = ed_key();
        let token = compact(
            &json!({"alg":"EdDSA","kid":"a"}),
            &json!({"sub":"h"}),
            |m| pair.sign(m).as_ref().to_vec(),
        );
        let t = Unverified::parse(&token).unwrap();
        assert_eq!(t.kid, "a");
        assert_eq!(t.verify(&key).unwrap()["sub"], "h");
        assert!(Unverified::parse(&token).unwrap().verify(&other).is_err());
        // One claim changed after signing.
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = b64(br#"{"sub":"x"}"#);
        parts[1] = &forged;
        assert!(Unverified::parse(&parts.join("."))
            .unwrap()
            .verify(&key)
            .is_err());
    }

    #[test]
    fn an_es256_token_verifies_with_its_p256_key() {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let doc = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(alg, doc.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let jwk = json!({"kty":"EC","crv":"P-256","kid":"e","alg":"ES256",
            "x": b64(&point[1..33]), "y": b64(&point[33..])});
        let (_, key) = PublicJwk::parse(&jwk).unwrap();
        let token = compact(&json!({"alg":"ES256","kid":"e"}), &json!({"a":1}), |m| {
            pair.sign(&rng, m).unwrap().as_ref().to_vec()
        });
        assert!(Unverified::parse(&token).unwrap().verify(&key).is_ok());
    }

    /// RFC 7515 Appendix A.2: an RS256 JWS and the RSA key that signed it.
    #[test]
    fn the_rfc_7515_rs256_example_verifies() {
        let n = "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ";
        let jwk = json!({"kty":"RSA","kid":"r","n": n, "e":"AQAB"});
        let (_, key) = PublicJwk::parse(&jwk).unwrap();
        let token = "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw";
        // The example carries no kid: give it one for this parser.
        let mut parts: Vec<String> = token.split('.').map(str::to_owned).collect();
        let signed_header = parts[0].clone();
        parts[0] = b64(br#"{"alg":"RS256","kid":"r"}"#);
        let mut t = Unverified::parse(&parts.join(".")).unwrap();
        t.signed = format!("{signed_header}.{}", parts[1]).into_bytes();
        assert_eq!(t.verify(&key).unwrap()["iss"], "joe");
    }

    #[test]
    fn tokens_with_unsupported_or_mismatched_algorithms_are_refused() {
        let (pair, key) = ed_key();
        for header in [
            json!({"alg":"none","kid":"a"}),
            json!({"alg":"HS256","kid":"a"}),
            json!({"alg":"EdDSA"}),
            json!({"alg":"EdDSA","kid":"a","crit":["x"]}),
        ] {
            let token = compact(&header, &json!({}), |m| pair.sign(m).as_ref().to_vec());
            assert!(Unverified::parse(&token).is_err(), "{header}");
        }
        let token = compact(&json!({"alg":"ES256","kid":"a"}), &json!({}), |m| {
            pair.sign(m).as_ref().to_vec()
        });
        assert!(Unverified::parse(&token).unwrap().verify(&key).is_err());
        for bad in ["", "a.b", "a.b.c.d", &"x".repeat(MAX_TOKEN_BYTES + 1)] {
            assert!(Unverified::parse(bad).is_err());
        }
    }

    #[test]
    fn keys_that_cannot_verify_a_token_are_refused() {
        let x = b64(&[7; 32]);
        for jwk in [
            json!({"kty":"OKP","crv":"Ed25519","x": x}),
            json!({"kty":"OKP","crv":"Ed25519","kid":"k","use":"enc","x": x}),
            json!({"kty":"OKP","crv":"Ed25519","kid":"k","alg":"RS256","x": x}),
            json!({"kty":"OKP","crv":"X25519","kid":"k","x": x}),
            json!({"kty":"oct","kid":"k","k": x}),
            json!({"kty":"RSA","kid":"k","n": b64(&[1; 128]),"e":"AQAB"}),
            json!({"kty":"OKP","crv":"Ed25519","kid":"k","x": b64(&[7; 31])}),
        ] {
            assert!(PublicJwk::parse(&jwk).is_err(), "{jwk}");
        }
    }
}
