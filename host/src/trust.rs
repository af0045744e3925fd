//! How a host (and `relay-bench`) reaches a relay safely: https is checked against the
//! bundled Mozilla roots (`webpki-roots`, through ureq's `rustls` feature) or, after
//! `relay set URL --ca FILE`, against that private CA alone; plain http is refused for anything
//! but a loopback address unless the user says `--insecure-http`, because pull pages, epochs and
//! heads are not signed: anyone on the path could withhold mail or force rewinds.
//!
//! Bundled roots rather than the platform store: the same trust on every machine and in a
//! minimal container (no CA bundle to install), no platform-specific code, and ureq's default
//! TLS set-up; an operator with a private CA names it with `--ca`.

use std::net::IpAddr;
use std::path::Path;

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::CertificateDer;
use ureq::tls::{Certificate, RootCerts, TlsConfig};

use super::HostError;

/// Largest CA file read (a handful of PEM certificates).
const MAX_CA_FILE: u64 = 1 << 20;

/// The TLS settings for a relay: its private CA (PEM) when given, else the bundled web roots.
///
/// # Errors
/// The PEM text holds no certificate, or a malformed one.
pub fn tls_config(ca_pem: Option<&str>) -> Result<TlsConfig, String> {
    let Some(pem) = ca_pem else {
        return Ok(TlsConfig::default());
    };
    let certs = ca_certs(pem)?;
    Ok(TlsConfig::builder()
        .root_certs(RootCerts::from(
            certs
                .iter()
                .map(|c| Certificate::from_der(c.as_ref()).to_owned()),
        ))
        .build())
}

/// The certificates of a PEM text (at least one).
fn ca_certs(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "not valid PEM".to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in it".into());
    }
    Ok(certs)
}

/// Read a CA file for `--ca`: its PEM text, checked to hold at least one certificate.
///
/// # Errors
/// A message naming the file.
pub fn read_ca(path: &Path) -> Result<String, String> {
    let fail = |why: String| format!("--ca {}: {why}", path.display());
    let len = std::fs::metadata(path)
        .map_err(|e| fail(e.to_string()))?
        .len();
    if len > MAX_CA_FILE {
        return Err(fail(format!("larger than {MAX_CA_FILE} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    ca_certs(&text).map_err(fail)?;
    Ok(text)
}

/// Add the way out to a certificate failure: a relay whose certificate chains to a private CA
/// needs `--ca`.
pub(crate) fn hint_ca(e: HostError) -> HostError {
    match e {
        HostError::Network(m) if m.contains("certificate") || m.contains("UnknownIssuer") => {
            HostError::Network(format!(
                "{m} (for a relay with a private CA: relay set URL --ca FILE)"
            ))
        }
        other => other,
    }
}

/// Refuse a relay URL this host must not use as given: not http(s); plain http to a host that
/// is not loopback without `insecure_http`; `--ca` with plain http.
///
/// # Errors
/// A message saying why, and what to do.
pub(crate) fn check_relay_url(url: &str, insecure_http: bool, has_ca: bool) -> Result<(), String> {
    if url.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!("{url:?} is not an http(s) URL"));
    };
    if has_ca {
        return Err("--ca applies to https:// relays only".into());
    }
    if insecure_http || is_loopback(host_of(rest)) {
        return Ok(());
    }
    Err(format!(
        "refusing plain http to {url}: pull pages, epochs and heads are not signed, so anyone on \
         the path could withhold mail or force rewinds. Use https://, or pass --insecure-http if \
         the network path is trusted"
    ))
}

/// The host part of `authority[/path]` (no user info, brackets or port).
fn host_of(rest: &str) -> &str {
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit('@').next().unwrap_or("");
    if let Some(v6) = hostport.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    hostport.split(':').next().unwrap_or("")
}

/// 127.0.0.0/8, ::1 and `localhost`.
fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_only_to_loopback_unless_insecure() {
        for ok in [
            "http://127.0.0.1:8787",
            "http://127.9.9.9/",
            "http://[::1]:80",
            "http://localhost:1",
            "http://LOCALHOST",
            "http://u@127.0.0.1:8/x",
            "https://example.com",
        ] {
            assert_eq!(check_relay_url(ok, false, false), Ok(()), "{ok}");
        }
        for bad in [
            "http://example.com",
            "http://10.0.0.1:8787",
            "http://127.0.0.1.evil.com",
            "http://localhost.evil.com/",
            "http://[::2]:80",
            "http://127.0.0.1@example.com",
        ] {
            let e = check_relay_url(bad, false, false).unwrap_err();
            assert!(e.contains("not signed"), "{bad}: {e}");
            assert_eq!(check_relay_url(bad, true, false), Ok(()), "{bad}");
        }
        assert!(check_relay_url("ftp://x", true, false).is_err());
        assert!(check_relay_url("http://127.0.0.1", false, true)
            .unwrap_err()
            .contains("--ca"));
    }

    #[test]
    fn a_ca_without_a_certificate_is_refused() {
        assert!(tls_config(Some("hello")).is_err());
        assert!(tls_config(Some(
            "-----BEGIN CERTIFICATE-----\n!!\n-----END CERTIFICATE-----\n"
        ))
        .is_err());
        assert!(tls_config(None).is_ok());
    }
}
