//! The client address used for per-address rate windows: the socket peer, or with
//! `--trust-proxy xff` the rightmost `X-Forwarded-For` entry (the one the trusted proxy appended),
//! or with `--trust-proxy cloudflare` `CF-Connecting-IP`. The rate tables key it with
//! [`relay_core::address_key`] (IPv6 by /64 prefix).

use std::net::SocketAddr;

use axum::http::HeaderMap;

/// Which proxy header, if any, names the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TrustProxy {
    #[default]
    /// No proxy: the socket's address is the client.
    Off,
    /// The rightmost `X-Forwarded-For` entry (the one the trusted proxy appended).
    Xff,
    /// Cloudflare's `CF-Connecting-IP`.
    Cloudflare,
}

impl std::str::FromStr for TrustProxy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "off" | "" | "none" => Ok(TrustProxy::Off),
            "xff" => Ok(TrustProxy::Xff),
            "cloudflare" => Ok(TrustProxy::Cloudflare),
            other => Err(format!(
                "bad --trust-proxy {other:?}: expected off, xff or cloudflare"
            )),
        }
    }
}

/// Longest address string kept (a hostile header cannot inflate the rate table's keys).
const MAX_ADDR: usize = 64;

/// The client address for rate limiting.
pub(crate) fn client_addr(trust: TrustProxy, peer: SocketAddr, headers: &HeaderMap) -> String {
    let from_header = match trust {
        TrustProxy::Off => None,
        TrustProxy::Xff => headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .next_back()
            .and_then(|v| v.rsplit(',').next())
            .map(str::trim),
        TrustProxy::Cloudflare => headers
            .get("cf-connecting-ip")
            .and_then(|v| v.to_str().ok())
            .map(str::trim),
    };
    match from_header.filter(|s| !s.is_empty()) {
        Some(s) => s.chars().take(MAX_ADDR).collect(),
        None => peer.ip().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_trusted_entry() {
        let peer: SocketAddr = "10.0.0.1:5000".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", "1.1.1.1, 2.2.2.2".parse().unwrap());
        h.insert("cf-connecting-ip", "3.3.3.3".parse().unwrap());
        assert_eq!(client_addr(TrustProxy::Off, peer, &h), "10.0.0.1");
        assert_eq!(client_addr(TrustProxy::Xff, peer, &h), "2.2.2.2");
        assert_eq!(client_addr(TrustProxy::Cloudflare, peer, &h), "3.3.3.3");
        assert_eq!(
            client_addr(TrustProxy::Xff, peer, &HeaderMap::new()),
            "10.0.0.1"
        );
        assert!("bogus".parse::<TrustProxy>().is_err());
    }
}
