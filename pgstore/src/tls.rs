//! TLS to PostgreSQL (rustls, ring provider): libpq's `sslmode` (`disable`, `prefer`,
//! `require`, `verify-ca`, `verify-full`) and `sslrootcert` url parameters, and the connector
//! tokio-postgres negotiates with. Both parameters are taken out of the url before
//! tokio-postgres reads it (it knows neither `verify-*` nor `sslrootcert`).
//!
//! As libpq: `prefer` and `require` encrypt without checking the server's certificate
//! (`require` with an `sslrootcert` checks it as `verify-ca`); `verify-ca` checks the chain to
//! the root; `verify-full` also the host name. Unlike libpq the default is not `prefer`
//! everywhere: a url whose hosts are all on loopback defaults to `prefer`, any other to
//! `verify-full` (the link then carries sealed items and keys across a network). Roots:
//! `sslrootcert=FILE` (PEM), else the bundled public CAs (`sslrootcert=system`).

use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use relay_store::{Result, StoreError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use tokio_postgres::Socket;

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl Mode {
    fn parse(v: &str) -> Result<Mode> {
        Ok(match v {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            // libpq's `allow` (plain first) is refused: a downgrade by design.
            other => {
                return Err(StoreError::Engine(format!(
                    "bad postgres url: sslmode={other} (use disable, prefer, require, verify-ca \
                     or verify-full)"
                )))
            }
        })
    }
}

/// The TLS parameters of a url.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TlsParams {
    /// `sslmode`, when the url gives it.
    pub(crate) mode: Option<Mode>,
    /// `sslrootcert`: a PEM file, or `system` (the bundled public CAs).
    pub(crate) root: Option<String>,
}

/// Split `url` into the url tokio-postgres reads and its TLS parameters.
///
/// # Errors
/// `Engine` for an `sslmode` libpq does not name (or `allow`).
pub(crate) fn split_url(url: &str) -> Result<(String, TlsParams)> {
    let mut params = TlsParams {
        mode: None,
        root: None,
    };
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_string(), params));
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("sslmode", v)) => params.mode = Some(Mode::parse(&percent_decode(v))?),
            Some(("sslrootcert", v)) => params.root = Some(percent_decode(v)),
            _ => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((url, params))
}

/// `%XX` escapes of a url parameter decoded (a path may carry them); anything else as is.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push(u8::try_from(h * 16 + l).unwrap_or(b'?'));
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether every host of `cfg` is this machine (loopback address, `localhost`, a unix socket),
/// and every `hostaddr` (the address actually dialled, whatever the host name says) is loopback.
fn all_loopback(cfg: &tokio_postgres::Config) -> bool {
    let addrs_loopback = cfg.get_hostaddrs().iter().all(|ip| ip.is_loopback());
    addrs_loopback
        && cfg.get_hosts().iter().all(|h| match h {
            Host::Tcp(name) => {
                name == "localhost"
                    || name
                        .trim_matches(|c| c == '[' || c == ']')
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
            Host::Unix(_) => true,
        })
}

/// The connector for `params` on `cfg`, and `cfg`'s `ssl_mode` set to match.
///
/// # Errors
/// `Engine` naming an unreadable or empty `sslrootcert` file.
pub(crate) fn connector(
    cfg: &mut tokio_postgres::Config,
    params: &TlsParams,
) -> Result<MakeRustls> {
    let mode = params.mode.unwrap_or(if all_loopback(cfg) {
        Mode::Prefer
    } else {
        Mode::VerifyFull
    });
    // libpq: `require` with a root certificate verifies as `verify-ca`.
    let mode = match (mode, &params.root) {
        (Mode::Require, Some(_)) => Mode::VerifyCa,
        (m, _) => m,
    };
    cfg.ssl_mode(match mode {
        Mode::Disable => SslMode::Disable,
        Mode::Prefer => SslMode::Prefer,
        _ => SslMode::Require,
    });
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        Mode::Disable | Mode::Prefer | Mode::Require => Arc::new(Unverified(provider.clone())),
        Mode::VerifyCa | Mode::VerifyFull => {
            let roots = Arc::new(roots(params.root.as_deref())?);
            let chain = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| StoreError::Engine(format!("postgres tls: {e}")))?;
            if mode == Mode::VerifyCa {
                Arc::new(ChainOnly(chain))
            } else {
                chain
            }
        }
    };
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Engine(format!("postgres tls: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustls(Arc::new(config)))
}

/// The root certificates of `sslrootcert`: a PEM file, or the bundled public CAs.
fn roots(root: Option<&str>) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match root {
        None | Some("system") => store.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(file) => {
            let path = PathBuf::from(file);
            let bad = |why: String| {
                StoreError::Engine(format!(
                    "postgres tls: sslrootcert {}: {why}",
                    path.display()
                ))
            };
            let certs = CertificateDer::pem_file_iter(&path)
                .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
                .map_err(|e| bad(e.to_string()))?;
            let (added, _) = store.add_parsable_certificates(certs);
            if added == 0 {
                return Err(bad("no certificate in it".into()));
            }
        }
    }
    Ok(store)
}

/// `verify-ca`: the chain must reach a root; the name in it is not checked (libpq's rule).
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `prefer` / `require`: encrypted, the certificate not checked (libpq's rule); the handshake
/// signatures still are.
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The connector tokio-postgres asks for each host it tries.
#[derive(Clone)]
pub(crate) struct MakeRustls(Arc<ClientConfig>);

impl MakeTlsConnect<Socket> for MakeRustls {
    type Stream = RustlsStream;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<RustlsConnect> {
        let name = ServerName::try_from(domain.trim_matches(|c| c == '[' || c == ']').to_string())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(RustlsConnect(self.0.clone(), name))
    }
}

/// One host's TLS handshake.
pub(crate) struct RustlsConnect(Arc<ClientConfig>, ServerName<'static>);

impl TlsConnect<Socket> for RustlsConnect {
    type Stream = RustlsStream;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream>> + Send>>;

    fn connect(self, stream: Socket) -> Self::Future {
        let RustlsConnect(config, name) = self;
        Box::pin(async move {
            let s = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await?;
            Ok(RustlsStream(Box::new(s)))
        })
    }
}

/// A TLS session to the server.
pub(crate) struct RustlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for RustlsStream {
    /// None offered: SCRAM then runs without channel binding (as libpq's `prefer` allows).
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}

impl AsyncRead for RustlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for RustlsStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_parameters_leave_the_url_and_the_rest_stays() {
        let (url, p) = split_url(
            "postgres://u@db:5432,db2:5432/relay?sslmode=verify-ca&target_session_attrs=read-write&sslrootcert=/etc/ca%20x.pem",
        )
        .unwrap();
        assert_eq!(
            url,
            "postgres://u@db:5432,db2:5432/relay?target_session_attrs=read-write"
        );
        assert_eq!(p.mode, Some(Mode::VerifyCa));
        assert_eq!(p.root.as_deref(), Some("/etc/ca x.pem"));
        assert!(split_url("postgres://db/x?sslmode=allow").is_err());
        assert_eq!(split_url("postgres://db/x").unwrap().1.mode, None);
    }

    #[test]
    fn the_default_is_verify_full_off_loopback_and_prefer_on_it() {
        let params = TlsParams {
            mode: None,
            root: None,
        };
        let mut remote: tokio_postgres::Config =
            "postgres://u@127.0.0.1,db.example/x".parse().unwrap();
        connector(&mut remote, &params).unwrap();
        assert_eq!(remote.get_ssl_mode(), SslMode::Require);
        let mut local: tokio_postgres::Config = "postgres://u@127.0.0.1,[::1]/x".parse().unwrap();
        connector(&mut local, &params).unwrap();
        assert_eq!(local.get_ssl_mode(), SslMode::Prefer);
    }

    #[test]
    fn a_remote_hostaddr_behind_a_local_name_is_verified() {
        let params = TlsParams {
            mode: None,
            root: None,
        };
        let mut cfg: tokio_postgres::Config = "host=localhost hostaddr=203.0.113.5 user=u dbname=x"
            .parse()
            .unwrap();
        connector(&mut cfg, &params).unwrap();
        assert_eq!(
            cfg.get_ssl_mode(),
            SslMode::Require,
            "verify-full, not prefer"
        );
        let mut local: tokio_postgres::Config = "host=localhost hostaddr=127.0.0.1 user=u dbname=x"
            .parse()
            .unwrap();
        connector(&mut local, &params).unwrap();
        assert_eq!(local.get_ssl_mode(), SslMode::Prefer);
    }
}
