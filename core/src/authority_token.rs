//! The hosted relay's enrolment authority (spec §8 "Owner decision", `--enrol-authority
//! account-tokens`): a host enrols with a short-lived access token of the accounts service,
//! issued for this relay (RFC 8707: `aud` is the relay's URL) and bound to the host: its
//! `cnf.jkt` is the thumbprint of the host's cloud key, which the host key certified. The enrol
//! body's `proof` carries all three:
//!
//! ```json
//! {"token": "<JWT>",
//!  "cloud_cert": {"v":1, "type":"cloud-key", "host_pub":"<host key>", "cloud_pub":"<cloud key>",
//!                 "aud":"<relay URL>", "iat":<seconds>},
//!  "cloud_cert_sig": "<host key's signature over the certificate's canonical JSON>"}
//! ```
//!
//! The token is verified offline against the issuer's key set ([`super::authority_jwks`]); the
//! enrol statement is signed by the host key already (the challenge), so a token is good only
//! for the host whose key certified the cloud key it is bound to. The enrolment records the
//! token's `account` (quotas and name uniqueness use it) and this authority's name.

use std::sync::Arc;

use serde_json::{Map, Value};

use relay_wire::cloud_key::thumbprint;
use relay_wire::keys::{parse_pubkey, verify_canonical};

use super::authority::{AuthorityRequest, Decision, EnrolmentAuthority, Settle, Unavailable};
use super::authority_jwks::{Jwks, JwksTiming, Lookup};
use super::authority_jwt::Unverified;

/// The longest token lifetime accepted (`exp - iat`), in seconds (spec §8: at most 15 minutes).
pub(crate) const MAX_TOKEN_LIFETIME_S: u64 = 15 * 60;
/// Clock difference tolerated between the issuer, the host and this relay, in seconds.
const CLOCK_SKEW_S: u64 = 60;
/// The longest claim value read (account, org, client and host ids).
const MAX_CLAIM_CHARS: usize = 256;

/// The reason shown to a host that presented no token.
pub(crate) const NO_TOKEN_REASON: &str =
    "this relay admits hosts with an account token only: put it in proof.token";

/// What the authority checks tokens against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSettings {
    /// The accounts service's issuer (`iss`), exactly.
    pub issuer: String,
    /// This relay's URL (`aud`, and the cloud-key certificate's `aud`), exactly.
    pub audience: String,
    /// When the issuer's key set is fetched and how long it is trusted.
    pub timing: JwksTiming,
}

/// What a verified token allowed (logged on enrolment; `account` is stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    pub account: String,
    pub org: String,
    pub client_id: String,
    pub sub: String,
}

/// The account-token authority.
pub struct TokenAuthority {
    settings: TokenSettings,
    jwks: Arc<Jwks>,
    now_s: fn() -> u64,
}

fn system_now_s() -> u64 {
    super::now_ms() / 1000
}

impl TokenAuthority {
    /// The authority for `settings`, its key set empty until the refresher's first fetch.
    pub fn new(settings: TokenSettings) -> Arc<TokenAuthority> {
        let jwks = Jwks::new(settings.timing);
        Arc::new(TokenAuthority {
            settings,
            jwks,
            now_s: system_now_s,
        })
    }

    /// The key set the server's refresher keeps fresh ([`Jwks::run`]).
    pub fn jwks(&self) -> Arc<Jwks> {
        self.jwks.clone()
    }

    /// The token in `req`'s proof, unverified, if it has one that parses.
    fn token(req: &AuthorityRequest<'_>) -> Option<Unverified> {
        let token = req.proof?.get("token")?.as_str()?;
        Unverified::parse(token).ok()
    }

    /// The checks of spec §8 in order: proof shape, token signature by a key in force, claims,
    /// then the host binding (certificate by the hop key, thumbprint of its cloud key).
    fn check(&self, req: &AuthorityRequest<'_>) -> Result<Result<Grant, String>, Unavailable> {
        let Some(proof) = req.proof.and_then(Value::as_object) else {
            return Ok(Err(NO_TOKEN_REASON.into()));
        };
        let Some(token) = proof.get("token").and_then(Value::as_str) else {
            return Ok(Err(NO_TOKEN_REASON.into()));
        };
        let token = match Unverified::parse(token) {
            Ok(t) => t,
            Err(why) => return Ok(Err(why)),
        };
        let key = match self.jwks.lookup(&token.kid) {
            Lookup::Key(k) => k,
            Lookup::UnknownKid => {
                return Ok(Err(
                    "the token's signing key (kid) is not in the issuer's key set; \
                     the relay fetches it again within a minute"
                        .into(),
                ))
            }
            Lookup::NoKeys => {
                return Err(Unavailable(
                    "no token issuer key set in force (issuer unreachable past the cache life)"
                        .into(),
                ))
            }
        };
        let claims = match token.verify(&key) {
            Ok(c) => c,
            Err(why) => return Ok(Err(why)),
        };
        Ok(self.claims(&claims).and_then(|(grant, jkt)| {
            self.binding(req, proof, &jkt)?;
            Ok(grant)
        }))
    }

    /// The claims of a verified token: its grant and `cnf.jkt`.
    fn claims(&self, c: &Map<String, Value>) -> Result<(Grant, String), String> {
        let now = (self.now_s)();
        let s = &self.settings;
        if c.get("iss").and_then(Value::as_str) != Some(s.issuer.as_str()) {
            return Err("the token's iss is not this relay's issuer".into());
        }
        let aud_ok = match c.get("aud") {
            Some(Value::String(a)) => *a == s.audience,
            Some(Value::Array(l)) => l.iter().any(|a| a.as_str() == Some(&s.audience)),
            _ => false,
        };
        if !aud_ok {
            return Err("the token's aud is not this relay".into());
        }
        let (Some(iat), Some(exp)) = (seconds(c, "iat"), seconds(c, "exp")) else {
            return Err("the token has no iat or exp".into());
        };
        if iat > now + CLOCK_SKEW_S || seconds(c, "nbf").is_some_and(|n| n > now + CLOCK_SKEW_S) {
            return Err("the token is not valid yet".into());
        }
        if exp + CLOCK_SKEW_S <= now {
            return Err("the token has expired".into());
        }
        if exp <= iat || exp - iat > MAX_TOKEN_LIFETIME_S {
            return Err("the token's lifetime is over 15 minutes".into());
        }
        let claim = |name: &str| {
            c.get(name)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty() && v.chars().count() <= MAX_CLAIM_CHARS)
                .map(str::to_owned)
                .ok_or_else(|| format!("the token has no usable {name}"))
        };
        let grant = Grant {
            sub: claim("sub")?,
            account: claim("account")?,
            org: claim("org")?,
            client_id: claim("client_id")?,
        };
        claim("jti")?;
        let jkt = c
            .get("cnf")
            .and_then(|cnf| cnf.get("jkt"))
            .and_then(Value::as_str)
            .ok_or("the token is not bound to a key (no cnf.jkt)")?;
        Ok((grant, jkt.to_owned()))
    }

    /// The host binding: the cloud-key certificate names the enrolling host key and this relay,
    /// is signed by that host key, and certifies the key the token is bound to.
    fn binding(
        &self,
        req: &AuthorityRequest<'_>,
        proof: &Map<String, Value>,
        jkt: &str,
    ) -> Result<(), String> {
        let cert = proof
            .get("cloud_cert")
            .filter(|c| c.is_object())
            .ok_or("no cloud_cert in the proof")?;
        let field = |name: &str| cert.get(name).and_then(Value::as_str);
        let well_formed = cert.get("v").and_then(Value::as_u64) == Some(1)
            && field("type") == Some("cloud-key")
            && cert.as_object().is_some_and(|o| o.len() == 6);
        if !well_formed {
            return Err("cloud_cert is not a v1 cloud-key certificate".into());
        }
        let host = parse_pubkey(req.host_pubkey).ok_or("bad host key")?;
        if field("host_pub").and_then(parse_pubkey) != Some(host) {
            return Err("cloud_cert certifies another host key".into());
        }
        if field("aud") != Some(self.settings.audience.as_str()) {
            return Err("cloud_cert is for another relay".into());
        }
        if seconds_of(cert.get("iat")).is_none_or(|t| t > (self.now_s)() + CLOCK_SKEW_S) {
            return Err("cloud_cert has no iat, or one in the future".into());
        }
        let sig = proof.get("cloud_cert_sig").and_then(Value::as_str);
        if !sig.is_some_and(|s| verify_canonical(&host, cert, s)) {
            return Err("cloud_cert is not signed by the host key".into());
        }
        let cloud = field("cloud_pub")
            .and_then(parse_pubkey)
            .ok_or("cloud_cert has no cloud_pub key")?;
        if thumbprint(&cloud) != jkt {
            return Err("the token is bound to another key than the certified cloud key".into());
        }
        Ok(())
    }
}

/// A claim in whole seconds since the epoch (a JSON number; a fraction is cut).
fn seconds(c: &Map<String, Value>, name: &str) -> Option<u64> {
    seconds_of(c.get(name))
}

fn seconds_of(v: Option<&Value>) -> Option<u64> {
    let v = v?;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0 && *f < 1e15)
            .map(|f| f as u64)
    })
}

impl EnrolmentAuthority for TokenAuthority {
    fn name(&self) -> &str {
        "account-tokens"
    }
    fn rank(&self) -> u8 {
        2
    }
    /// A token whose `kid` the set in force lacks (or with no set in force) waits for the fetch
    /// that asks for, when it is under way or allowed now ([`Jwks::fetch_now`]).
    fn settle(&self, req: &AuthorityRequest<'_>) -> Option<Settle> {
        let token = Self::token(req)?;
        if matches!(self.jwks.peek(&token.kid), Lookup::Key(_)) {
            return None;
        }
        let wait = self.jwks.fetch_now()?;
        Some(Box::pin(wait))
    }

    fn authorize(&self, req: &AuthorityRequest<'_>) -> Result<Decision, Unavailable> {
        match self.check(req)? {
            Ok(g) => {
                tracing::info!(account = %g.account, org = %g.org, client_id = %g.client_id,
                    sub = %g.sub, "account token accepted");
                Ok(Decision::AllowClient {
                    account: g.account,
                    org: g.org,
                    client_id: g.client_id,
                })
            }
            Err(reason) => Ok(Decision::Deny {
                reason: Some(reason),
            }),
        }
    }
}
