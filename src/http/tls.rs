//! TLS for `mbx-relay serve` (`--tls-cert`/`--tls-key`): load the PEM pair into a rustls server
//! configuration (ring provider, TLS 1.2 and 1.3, ALPN `http/1.1`), hand the guarded accept loop
//! the acceptor of the moment, and reload the pair on SIGHUP or when the files change (checked
//! every [`WATCH_EVERY`]). A pair that fails to load is refused with one log line and the old one
//! stays in use; connections already open keep the configuration they were accepted with.
//!
//! The key file is held to the rule of `relay.key` (owner-only, [`relay_os::private`]) at start and
//! at every reload; the change watch includes the files' modes, so a pair refused for a loose
//! key is taken once the key is `chmod 600`. Errors name files, never their bytes.
//!
//! Handshakes are counted per client address (IPv4 address, IPv6 /64) in a one-minute window
//! (`--tls-handshakes-per-minute`): a connection past it is closed before its handshake, so one
//! address replaying ClientHellos costs the relay a window's worth of handshakes a minute, not
//! a core.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use rustls::pki_types::pem::{self, PemObject as _};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use super::tls_cert::{now_unix, CertInfo, ExpiryWatch};
use relay_core::{ip_key, AddrKey, RateTable};
use relay_os::private::{require_private_or, Kind};

/// How often the certificate and key files are checked for a change (one `stat` each).
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(30);
/// Tests only: a file-check period in milliseconds instead of [`WATCH_EVERY`] (undocumented for
/// operators; a test should not wait 30 s for one check).
pub(crate) const WATCH_TEST_ENV: &str = "MBX_RELAY_TEST_TLS_WATCH_MS";

/// The file-check period in force.
fn watch_every() -> Duration {
    std::env::var(WATCH_TEST_ENV)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(WATCH_EVERY, Duration::from_millis)
}
/// The one application protocol offered: hyper serves HTTP/1.1 only.
const ALPN_HTTP11: &[u8] = b"http/1.1";
/// Default of `--tls-handshakes-per-minute`: two a second from one address, far more than a
/// host's keep-alive connections need, a small fraction of a core (docs/deploy.md).
const DEFAULT_HANDSHAKES_PER_MINUTE: u32 = 120;
/// Most client addresses whose handshake windows are tracked at once (the oldest window is
/// evicted when full, like the other address tables).
const HANDSHAKE_TABLE_CAP: usize = 100_000;

/// Flags for TLS (flattened into `mbx-relay serve`'s flags).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "TLS")]
pub struct TlsArgs {
    /// PEM certificate chain (leaf first) to serve HTTPS; needs --tls-key. Reloaded on SIGHUP.
    #[arg(long, env = "MBX_RELAY_TLS_CERT", value_name = "FILE")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (owner-only file, like relay.key); needs --tls-cert.
    #[arg(long, env = "MBX_RELAY_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// TLS handshakes per client address (IPv6: per /64) per minute; past it, a new connection
    /// from that address is closed before its handshake.
    #[arg(long, value_name = "N", env = "MBX_RELAY_TLS_HANDSHAKES_PER_MINUTE", default_value_t = DEFAULT_HANDSHAKES_PER_MINUTE)]
    pub tls_handshakes_per_minute: u32,
}

impl Default for TlsArgs {
    /// TLS off, the flags' defaults.
    fn default() -> Self {
        TlsArgs {
            tls_cert: None,
            tls_key: None,
            tls_handshakes_per_minute: DEFAULT_HANDSHAKES_PER_MINUTE,
        }
    }
}

/// The certificate chain and key files of a TLS relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TlsArgs {
    /// Refuse a handshake window of 0 (it would refuse every client).
    ///
    /// # Errors
    /// A message naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.tls_handshakes_per_minute == 0 {
            return Err("--tls-handshakes-per-minute must be at least 1".into());
        }
        Ok(())
    }

    /// The TLS side of the relay, when TLS is on: the pair loaded, refusing a bad one.
    ///
    /// # Errors
    /// See [`TlsArgs::files`] and [`Tls::load`].
    pub fn load(&self) -> Result<Option<Arc<Tls>>, String> {
        self.files()?
            .map(|f| Tls::load(f, self.tls_handshakes_per_minute))
            .transpose()
    }

    /// The files, when TLS is on.
    ///
    /// # Errors
    /// Only one of the two flags is given (the message names the missing one).
    pub fn files(&self) -> Result<Option<TlsFiles>, String> {
        match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Ok(Some(TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
            })),
            (None, None) => Ok(None),
            (Some(_), None) => {
                Err("--tls-cert needs --tls-key (MBX_RELAY_TLS_KEY): give both or neither".into())
            }
            (None, Some(_)) => {
                Err("--tls-key needs --tls-cert (MBX_RELAY_TLS_CERT): give both or neither".into())
            }
        }
    }
}

/// The TLS side of a relay: the acceptor new connections use, replaced whole by a reload.
pub struct Tls {
    files: TlsFiles,
    acceptor: RwLock<TlsAcceptor>,
    /// The files' state when they were last loaded (or last refused), for the change watch.
    seen: Mutex<Option<Stamp>>,
    /// Handshakes per client address this minute.
    handshakes: RateTable<AddrKey>,
    /// The leaf certificate of the pair loaded last (none if it does not parse as X.509).
    cert: RwLock<Option<CertInfo>>,
    expiry: ExpiryWatch,
}

/// Why a TLS handshake did not give a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HandshakeFailed {
    /// The address was past its handshake window: closed before the handshake.
    Window,
    /// The handshake failed.
    Failed,
    /// The handshake did not finish in time.
    TimedOut,
}

/// What a `stat` tells about the two files (modification time, length, inode, mode): a change
/// in any part means "reload".
type Stamp = [(Option<SystemTime>, u64, u64, u32); 2];

impl Tls {
    /// Load the pair, refusing a key file other users can read.
    ///
    /// # Errors
    /// A message naming the file and what is wrong with it.
    pub fn load(files: TlsFiles, handshakes_per_minute: u32) -> Result<Arc<Tls>, String> {
        let seen = stamp(&files);
        let (config, cert) = server_config(&files, "refusing to start")?;
        let tls = Arc::new(Tls {
            files,
            acceptor: RwLock::new(TlsAcceptor::from(Arc::new(config))),
            seen: Mutex::new(seen),
            handshakes: RateTable::new(handshakes_per_minute, HANDSHAKE_TABLE_CAP),
            cert: RwLock::new(cert),
            expiry: ExpiryWatch::default(),
        });
        tls.check_expiry(true);
        Ok(tls)
    }

    /// The served leaf certificate's subject and expiry.
    pub fn cert_info(&self) -> Option<CertInfo> {
        match self.cert.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Warn when the served certificate is close to expiry (`fresh`: just loaded).
    fn check_expiry(&self, fresh: bool) {
        if let Some(c) = self.cert_info() {
            self.expiry.check(&c, now_unix(), fresh);
        }
    }

    /// The acceptor for a new connection (the pair loaded last).
    fn acceptor(&self) -> TlsAcceptor {
        match self.acceptor.read() {
            Ok(a) => a.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Load the pair again; on success new connections use it, else the current one stays.
    ///
    /// # Errors
    /// Why the new pair was refused (names files, never their bytes).
    pub fn reload(&self) -> Result<(), String> {
        self.remember(stamp(&self.files));
        let (config, cert) = server_config(&self.files, "keeping the current certificate")?;
        let next = TlsAcceptor::from(Arc::new(config));
        match self.acceptor.write() {
            Ok(mut a) => *a = next,
            Err(poisoned) => *poisoned.into_inner() = next,
        }
        match self.cert.write() {
            Ok(mut c) => *c = cert,
            Err(poisoned) => *poisoned.into_inner() = cert,
        }
        self.check_expiry(true);
        Ok(())
    }

    /// Record the files' state; true when it differs from the one recorded before.
    fn remember(&self, now: Option<Stamp>) -> bool {
        let mut seen = match self.seen.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let changed = *seen != now;
        *seen = now;
        changed
    }

    /// The TLS handshake of one accepted connection from `peer`, cut off after `within` (a
    /// client that never finishes it holds its connection slots no longer than a slow request
    /// head); none at all (the connection closes) past the address's handshake window.
    pub(crate) async fn handshake<IO>(
        &self,
        io: IO,
        peer: std::net::IpAddr,
        within: Duration,
    ) -> Result<TlsStream<IO>, HandshakeFailed>
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        if !self.handshakes.hit(&ip_key(peer), relay_core::now_ms()) {
            tracing::debug!("TLS handshake refused: the address is past its handshake window");
            return Err(HandshakeFailed::Window);
        }
        match tokio::time::timeout(within, self.acceptor().accept(io)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "TLS handshake failed");
                Err(HandshakeFailed::Failed)
            }
            Err(_) => {
                tracing::debug!("TLS handshake not finished in time");
                Err(HandshakeFailed::TimedOut)
            }
        }
    }
}

/// The state of both files, `None` when one cannot be read (then a reload reports why).
fn stamp(files: &TlsFiles) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let one = |p: &Path| {
        std::fs::metadata(p)
            .ok()
            .map(|m| (m.modified().ok(), m.len(), m.ino(), m.mode()))
    };
    Some([one(&files.cert)?, one(&files.key)?])
}

/// A rustls server configuration from the two files, and the leaf certificate's facts;
/// `refusing` ends the message of a key file others can read (what the relay does about it).
fn server_config(
    files: &TlsFiles,
    refusing: &str,
) -> Result<(ServerConfig, Option<CertInfo>), String> {
    require_private_or(&files.key, Kind::File, "TLS key file", refusing)?;
    let certs = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| pem_problem(&files.cert, "certificate", &e))?;
    if certs.is_empty() {
        return Err(format!(
            "TLS certificate file {} holds no certificate",
            files.cert.display()
        ));
    }
    let leaf = certs.first().and_then(CertInfo::of);
    let key =
        PrivateKeyDer::from_pem_file(&files.key).map_err(|e| pem_problem(&files.key, "key", &e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS set-up failed: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| {
            format!(
                "TLS certificate {} and key {} are not a usable pair: {e}",
                files.cert.display(),
                files.key.display()
            )
        })?;
    config.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
    Ok((config, leaf))
}

/// Why a PEM file could not be used, without any of its content.
fn pem_problem(path: &Path, what: &str, e: &pem::Error) -> String {
    let why = match e {
        pem::Error::Io(e) => e.to_string(),
        pem::Error::NoItemsFound => format!("no PEM {what} found"),
        _ => "not valid PEM".to_string(),
    };
    format!("cannot read the TLS {what} file {}: {why}", path.display())
}

/// What follows `listening on ADDR` at start-up: for a TLS listener
/// ` (https, certificate "SUBJECT", expires NOT_AFTER)`, else nothing (the address stays the
/// line's first word, for scripts that read it).
pub(crate) fn startup_note(tls: &Option<Arc<Tls>>) -> String {
    match tls.as_ref().map(|t| t.cert_info()) {
        None => String::new(),
        Some(None) => " (https)".to_owned(),
        Some(Some(c)) => format!(
            " (https, certificate \"{}\", expires {})",
            c.subject,
            c.not_after_text()
        ),
    }
}

/// Install the SIGHUP handler now (so a SIGHUP right after `listening on` cannot kill the relay)
/// and run the reloads until `stop`: on SIGHUP, and when the files change (checked every
/// [`WATCH_EVERY`]). Without TLS a SIGHUP is logged and ignored.
///
/// # Errors
/// The signal handler could not be installed.
pub(crate) fn spawn_reloader(
    tls: Option<Arc<Tls>>,
    mut stop: watch::Receiver<bool>,
) -> io::Result<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        let mut tick = tokio::time::interval(watch_every());
        tick.tick().await; // The first tick is immediate: the pair was just loaded.
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = hup.recv() => match &tls {
                    Some(tls) => log_reload(tls, "SIGHUP"),
                    None => tracing::info!("SIGHUP received: TLS is off, nothing to reload"),
                },
                _ = tick.tick(), if tls.is_some() => {
                    if let Some(tls) = tls.as_ref().filter(|t| t.remember(stamp(&t.files))) {
                        // `remember` recorded the new state: a refused pair is logged once.
                        log_reload(tls, "files changed");
                    }
                    if let Some(tls) = &tls {
                        tls.check_expiry(false); // Again once a day while close.
                    }
                }
            }
        }
    }))
}

/// Reload and say how it went, in one log line.
fn log_reload(tls: &Tls, why: &'static str) {
    match tls.reload() {
        Ok(()) => tracing::info!(
            why,
            cert = %tls.files.cert.display(),
            "TLS certificate reloaded: new connections use it"
        ),
        Err(e) => tracing::warn!(
            why,
            "TLS reload refused, the current certificate stays: {e}"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_tls_flags_or_neither() {
        let p = |s: &str| Some(PathBuf::from(s));
        let none = TlsArgs::default();
        assert_eq!(none.files(), Ok(None));
        let cert_only = TlsArgs {
            tls_cert: p("c"),
            ..TlsArgs::default()
        };
        assert!(cert_only.files().unwrap_err().contains("--tls-key"));
        let key_only = TlsArgs {
            tls_key: p("k"),
            ..TlsArgs::default()
        };
        assert!(key_only.files().unwrap_err().contains("--tls-cert"));
    }
}
