//! The flags of `--enrol-authority account-tokens` (spec §8, docs/deploy.md "Account tokens"):
//! which issuer's tokens the relay accepts, for which audience, where the issuer's key set is
//! fetched and how long it is trusted; and the [`JwksSource`] that fetches it over HTTPS.

use std::path::PathBuf;
use std::time::Duration;

use relay_core::{parse_duration, JwksSource, JwksTiming, TokenSettings, MAX_JWKS_BYTES};

const HEAD: &str = "Account tokens (--enrol-authority account-tokens)";
/// The longest a key-set fetch may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Flags of the account-token authority.
#[derive(Debug, Clone, clap::Args)]
pub struct TokenArgs {
    /// The accounts service's issuer URL: a token's `iss` must equal it.
    #[arg(long, env = "MBX_RELAY_TOKEN_ISSUER", value_name = "URL", help_heading = HEAD)]
    pub token_issuer: Option<String>,
    /// This relay's URL as the accounts service names it: a token's `aud` (and the cloud-key
    /// certificate's) must equal it.
    #[arg(long, env = "MBX_RELAY_TOKEN_AUDIENCE", value_name = "URL", help_heading = HEAD)]
    pub token_audience: Option<String>,
    /// Where the issuer's key set is fetched (https; default: the issuer URL +
    /// `/.well-known/jwks.json`).
    #[arg(long, env = "MBX_RELAY_TOKEN_JWKS_URL", value_name = "URL", help_heading = HEAD)]
    pub token_jwks_url: Option<String>,
    /// A private CA (PEM) the key set's server is checked against, instead of the bundled
    /// web roots.
    #[arg(long, env = "MBX_RELAY_TOKEN_ISSUER_CA", value_name = "FILE", help_heading = HEAD)]
    pub token_issuer_ca: Option<PathBuf>,
    /// How often the key set is fetched again.
    #[arg(long, env = "MBX_RELAY_TOKEN_JWKS_REFRESH", default_value = "10m", value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD)]
    pub token_jwks_refresh: Duration,
    /// How long a fetched key set verifies tokens while the issuer cannot be reached; then new
    /// enrolments fail closed.
    #[arg(long, env = "MBX_RELAY_TOKEN_JWKS_CACHE_LIFE", default_value = "1h", value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD)]
    pub token_jwks_cache_life: Duration,
    /// Least time between fetches asked for by an unknown `kid` or a failed fetch.
    #[arg(long, env = "MBX_RELAY_TOKEN_JWKS_RETRY", default_value = "1m", value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD)]
    pub token_jwks_retry: Duration,
}

/// The checked token settings and their key-set source.
#[derive(Debug, Clone)]
pub(crate) struct TokenConfig {
    pub(crate) settings: TokenSettings,
    pub(crate) jwks_url: String,
    /// The `--token-issuer-ca` file's PEM text.
    pub(crate) ca_pem: Option<String>,
}

impl TokenArgs {
    /// The settings, if the issuer or audience is given.
    ///
    /// # Errors
    /// One of issuer and audience without the other; a key-set URL that is not https (but
    /// for a loopback address); a CA file that cannot be read.
    pub(crate) fn config(&self) -> Result<Option<TokenConfig>, String> {
        let (issuer, audience) = match (&self.token_issuer, &self.token_audience) {
            (None, None) => return Ok(None),
            (Some(i), Some(a)) if !i.is_empty() && !a.is_empty() => (i.clone(), a.clone()),
            _ => return Err("--token-issuer and --token-audience go together".into()),
        };
        let jwks_url = self
            .token_jwks_url
            .clone()
            .unwrap_or_else(|| format!("{}/.well-known/jwks.json", issuer.trim_end_matches('/')));
        if !jwks_url.starts_with("https://") && !is_loopback_http(&jwks_url) {
            return Err(format!(
                "--token-jwks-url {jwks_url}: the key set is fetched over https only"
            ));
        }
        let ca_pem = self
            .token_issuer_ca
            .as_deref()
            .map(mbx_host::trust::read_ca)
            .transpose()
            .map_err(|e| e.replacen("--ca", "--token-issuer-ca", 1))?;
        Ok(Some(TokenConfig {
            settings: TokenSettings {
                issuer,
                audience,
                timing: JwksTiming {
                    cache_life: self.token_jwks_cache_life,
                    refresh_every: self.token_jwks_refresh,
                    unknown_kid_every: self.token_jwks_retry,
                },
            },
            jwks_url,
            ca_pem,
        }))
    }
}

/// `http://127.0.0.1...`, `http://[::1]...` or `http://localhost...`: a key set on this machine.
fn is_loopback_http(url: &str) -> bool {
    ["http://127.0.0.1", "http://[::1]", "http://localhost"]
        .iter()
        .any(|p| {
            url.strip_prefix(p)
                .is_some_and(|r| r.is_empty() || r.starts_with([':', '/']))
        })
}

/// The issuer's key set over HTTPS (ureq on rustls, the host's trust set-up).
pub(crate) struct HttpsJwks {
    url: String,
    agent: ureq::Agent,
}

impl HttpsJwks {
    /// # Errors
    /// The CA text is not usable.
    pub(crate) fn new(config: &TokenConfig) -> Result<HttpsJwks, String> {
        let tls = mbx_host::trust::tls_config(config.ca_pem.as_deref())?;
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(FETCH_TIMEOUT))
            .tls_config(tls)
            .build()
            .into();
        Ok(HttpsJwks {
            url: config.jwks_url.clone(),
            agent,
        })
    }
}

impl JwksSource for HttpsJwks {
    fn fetch(&self) -> Result<Vec<u8>, String> {
        let mut r = self
            .agent
            .get(&self.url)
            .call()
            .map_err(|e| format!("{}: {e}", self.url))?;
        if r.status().as_u16() != 200 {
            return Err(format!("{}: answered {}", self.url, r.status().as_u16()));
        }
        r.body_mut()
            .with_config()
            .limit(MAX_JWKS_BYTES)
            .read_to_vec()
            .map_err(|e| format!("{}: {e}", self.url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_loopback_address_may_serve_the_key_set_over_plain_http() {
        assert!(is_loopback_http("http://127.0.0.1:8080/jwks"));
        assert!(is_loopback_http("http://localhost/jwks"));
        assert!(is_loopback_http("http://[::1]:9/x"));
        assert!(!is_loopback_http("http://127.0.0.1.evil.example/jwks"));
        assert!(!is_loopback_http("http://accounts.example/jwks"));
    }
}
