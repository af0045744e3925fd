//! `mbx-relay health`: exit 0 when the relay's `GET /health` answers 200, else 1 with one line
//! on stderr; for container health checks (a slim image carries no curl or wget). An https
//! relay is checked against the bundled web roots or, with `--ca FILE`, that private CA alone
//! (the trust `mbx-relay host relay set --ca` uses); certificate failures are said in words.

use std::path::PathBuf;
use std::time::Duration;

/// Longest the probe waits for the whole answer.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Flags of `mbx-relay health`.
#[derive(Debug, Clone, clap::Args)]
pub struct HealthArgs {
    /// The relay's health URL (`https://relay.example/health` for a TLS relay).
    #[arg(
        long,
        value_name = "URL",
        default_value = "http://127.0.0.1:8787/health"
    )]
    pub url: String,
    /// Trust only this CA (PEM) for an https --url: a private CA, or a self-signed relay
    /// certificate (default: the bundled web roots).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// Why `health` did not answer 0.
#[derive(Debug)]
pub enum ProbeError {
    /// A bad `--url` or `--ca`: exit 2.
    Usage(String),
    /// No answer, or not 200: exit 1.
    Unhealthy(String),
}

impl ProbeError {
    /// The process exit code ([`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            ProbeError::Usage(_) => crate::exit::USAGE,
            ProbeError::Unhealthy(_) => crate::exit::FAILURE,
        }
    }
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProbeError::Usage(m) => f.write_str(m),
            ProbeError::Unhealthy(m) => write!(f, "unhealthy: {m}"),
        }
    }
}

/// Ask `args.url` once.
///
/// # Errors
/// A bad flag ([`ProbeError::Usage`]), or a line saying why the relay is not healthy (no
/// answer, a certificate refused, or the status it gave).
pub fn probe(args: &HealthArgs) -> Result<(), ProbeError> {
    let https = args.url.starts_with("https://");
    if !https && !args.url.starts_with("http://") {
        return Err(ProbeError::Usage(format!(
            "--url {}: give an http:// or https:// url",
            args.url
        )));
    }
    if args.ca.is_some() && !https {
        return Err(ProbeError::Usage(
            "--ca applies to an https:// --url only".into(),
        ));
    }
    let ca = args
        .ca
        .as_deref()
        .map(mbx_host::trust::read_ca)
        .transpose()
        .map_err(ProbeError::Usage)?;
    let tls = mbx_host::trust::tls_config(ca.as_deref()).map_err(ProbeError::Usage)?;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(PROBE_TIMEOUT))
        .tls_config(tls)
        .build()
        .into();
    let r = agent.get(&args.url).call().map_err(|e| {
        ProbeError::Unhealthy(format!(
            "{}: no answer: {}",
            args.url,
            in_words(&e.to_string(), args.ca.is_some())
        ))
    })?;
    match r.status().as_u16() {
        200 => Ok(()),
        s => Err(ProbeError::Unhealthy(format!("{}: answered {s}", args.url))),
    }
}

/// A connection or certificate failure in the operator's words (rustls names its errors as
/// debug text: `Other(OtherError(CaUsedAsEndEntity))`), with what to do; other errors as given.
fn in_words(raw: &str, has_ca: bool) -> String {
    let cert = [
        (
            "CaUsedAsEndEntity",
            "the relay's certificate is a CA certificate (basicConstraints CA:TRUE), which TLS \
             refuses as a server certificate; issue the relay a leaf certificate signed by that \
             CA and give the CA to --ca",
        ),
        (
            "UnknownIssuer",
            if has_ca {
                "the relay's certificate is not signed by the --ca given"
            } else {
                "the relay's certificate is not signed by a trusted CA (a private CA or a \
                 self-signed certificate: give it with --ca FILE)"
            },
        ),
        (
            "NotValidForName",
            "the relay's certificate is not valid for the --url's host name",
        ),
        ("Expired", "the relay's certificate has expired"),
        ("NotValidYet", "the relay's certificate is not valid yet"),
        (
            "BadSignature",
            "the relay's certificate has a bad signature",
        ),
        ("InvalidCertificate", "the relay's certificate was refused"),
    ];
    if let Some((_, words)) = cert.iter().find(|(name, _)| raw.contains(name)) {
        return format!("certificate refused: {words}");
    }
    if raw.contains("Connection refused") {
        return "connection refused (no relay listens there)".into();
    }
    if raw.contains("CorruptMessage") || raw.contains("InvalidContentType") {
        return "not a TLS server at that address (an http:// relay?)".into();
    }
    raw.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certificate_failures_are_said_in_words_without_rustls_debug_text() {
        let ca = in_words(
            "io: invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))",
            true,
        );
        assert!(ca.contains("leaf certificate"), "{ca}");
        assert!(!ca.contains("OtherError"), "{ca}");
        let unknown = in_words("invalid peer certificate: UnknownIssuer", false);
        assert!(unknown.contains("--ca FILE"), "{unknown}");
    }
}
