//! The `serve` lifecycle: the server's start-up wiring (store, key, admin socket, HTTP).
//! Startup order, so that a start that fails creates nothing: check every setting, bind
//! `--listen` and `--metrics-listen`, load the TLS pair, refuse a store directory others can
//! reach, load the relay key if there is one (refused likewise); only then owner-only umask,
//! open the store (lock, migrations: `STATUS=` lines to systemd meanwhile), refuse a key the
//! store does not pin or no key for a store that pins one ([`store_key`]: a failed start never
//! writes a key), create the relay key if there was none, pin it, stale-heartbeat check, heartbeat, install the SIGHUP handler
//! (TLS reload, [`crate::http::tls`]), print `metrics listening on <addr>` and
//! `listening on <addr>`, tell systemd `READY=1`, then serve; background tasks sweep, heartbeat
//! and feed the systemd watchdog. On SIGTERM/SIGINT: stop accepting, finish in-flight
//! requests, stop the background tasks and the metrics listener, close the store.
pub mod args;
mod store_key;
mod store_link;
pub mod token_args;

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use relay_store::{OpenOptions, SystemClock};

use crate::http::pipeline::Public;
use crate::http::tls::Tls;
use crate::http::{App, TrustProxy};
use crate::store_open::{open_store, open_store_with, StoreSpec};
use relay_core::{load_existing_key, load_or_create_key, start_relay, Limits};
use relay_os::private::{require_private, Kind};
use relay_wire::keys::fingerprint;
use store_key::FoundKey;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Public address to listen on (`--listen`).
    pub listen: String,
    /// Private address for `GET /metrics` (`--metrics-listen`); none: metrics are not served.
    pub(crate) metrics_listen: Option<String>,
    /// The store directory (`--store-dir`).
    pub store_dir: PathBuf,
    /// The store backend (`--store`; default: the directory store in `store_dir`). For a
    /// directory store `store_dir` is that directory.
    pub store: StoreSpec,
    pub(crate) trust_proxy: TrustProxy,
    /// The relay's limits.
    pub limits: Limits,
    /// The content of `MBX_RELAY_KEY`, if set (never logged).
    pub(crate) key_env: Option<String>,
    /// Connection cap, timeouts and the public-route rate limit (`crate::http::guard`).
    pub guard: crate::http::conn::GuardConfig,
    /// Age (and the keyspace's count cap) beyond which relay-log entries are dropped.
    pub log_retention: relay_store::LogRetention,
    /// `--tls-cert` / `--tls-key` (both or neither; checked at start).
    pub tls: crate::http::tls::TlsArgs,
    /// Who may enrol (`--enrol-authority`) and the allow-list file it reads, if any.
    pub(crate) enrol_authority: relay_core::AuthorityKind,
    pub(crate) enrol_allowlist: Option<PathBuf>,
    /// The account-token authority's flags (read with `--enrol-authority account-tokens`).
    pub(crate) tokens: token_args::TokenArgs,
}

impl ServeConfig {
    /// Refuse settings that disable a protection or contradict each other (before anything is
    /// opened: `mbx-relay serve` exits 2 on this, like on a malformed flag).
    ///
    /// # Errors
    /// A message naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        self.limits.validate()?;
        self.guard.validate()?;
        self.tls.validate()?;
        let most = crate::http::body::MAX_ITEM_BYTES_IN_BODY;
        if self.limits.max_item_bytes > most {
            return Err(format!(
                "--max-item-bytes must be at most {most}: a larger item's base64 form does not \
                 fit the {} byte request body cap",
                crate::http::body::MAX_BODY
            ));
        }
        Ok(())
    }
}

/// Longest a shutdown waits for the background work's last writes (last-seen days).
const BACKGROUND_STOP: std::time::Duration = std::time::Duration::from_secs(5);

/// Why `serve` did not start or stopped, and so its exit code (one scheme with relay-tool:
/// 2 for a setting, 1 for a failure while starting or running, 4 for a store in use).
#[derive(Debug)]
pub enum ServeError {
    /// A flag, variable, file or key is wrong: exit 2, and nothing was created.
    Config(String),
    /// The relay could not run (a port in use, the store, I/O): exit 1.
    Runtime(String),
    /// Another process (a running relay, relay-tool) holds the store's lock: exit 4.
    InUse(String),
}

impl ServeError {
    /// A store open failure: a held lock is [`ServeError::InUse`], anything else a failure.
    fn store_open(label: &str, e: &relay_store::StoreError) -> Self {
        let msg = format!("cannot open store {label}: {e}");
        match e {
            relay_store::StoreError::Locked { .. } => ServeError::InUse(msg),
            _ => ServeError::Runtime(msg),
        }
    }
}

impl ServeError {
    /// The process exit code ([`crate::exit`]).
    pub fn exit_code(&self) -> u8 {
        match self {
            ServeError::Config(_) => crate::exit::USAGE,
            ServeError::Runtime(_) => crate::exit::FAILURE,
            ServeError::InUse(_) => crate::exit::IN_USE,
        }
    }
}

impl std::fmt::Display for ServeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServeError::Config(m) | ServeError::Runtime(m) | ServeError::InUse(m) => f.write_str(m),
        }
    }
}

impl From<String> for ServeError {
    fn from(m: String) -> Self {
        ServeError::Runtime(m)
    }
}

/// The enrolment authority chosen, and for the token authority the source of its key set.
struct Authority {
    chosen: relay_core::ForServe,
    source: Option<token_args::HttpsJwks>,
}

/// What start-up checked before creating anything: the listeners bound, TLS loaded, the key
/// found (or to be generated once the store is open).
struct Checked {
    listener: tokio::net::TcpListener,
    metrics_listener: Option<tokio::net::TcpListener>,
    tls: Option<Arc<Tls>>,
    key: Option<FoundKey>,
    authority: Authority,
}

/// The addresses `flag`'s value names (a name that does not resolve, or a bad port, is a
/// setting error).
async fn resolve(flag: &str, value: &str) -> Result<Vec<std::net::SocketAddr>, ServeError> {
    let bad = |why: String| ServeError::Config(format!("{flag} {value}: {why}"));
    let addrs: Vec<_> = tokio::net::lookup_host(value)
        .await
        .map_err(|e| bad(e.to_string()))?
        .collect();
    if addrs.is_empty() {
        return Err(bad("names no address".into()));
    }
    Ok(addrs)
}

async fn bind(flag: &str, value: &str) -> Result<tokio::net::TcpListener, ServeError> {
    let addrs = resolve(flag, value).await?;
    tokio::net::TcpListener::bind(&addrs[..])
        .await
        .map_err(|e| ServeError::Runtime(format!("cannot listen on {value} ({flag}): {e}")))
}

/// The settings start-up reads from files (TLS pair, store directory mode, relay key): all
/// refused before anything is created.
fn check_files(config: &ServeConfig) -> Result<(Option<Arc<Tls>>, Option<FoundKey>), ServeError> {
    let tls = config.tls.load().map_err(ServeError::Config)?;
    let dir = &config.store_dir;
    if dir.exists() {
        if !dir.is_dir() {
            return Err(ServeError::Config(format!(
                "--store-dir {}: not a directory (give the store's directory, or a new path)",
                dir.display()
            )));
        }
        require_private(dir, Kind::Dir, "store directory").map_err(ServeError::Config)?;
    }
    let key = load_existing_key(dir, config.key_env.as_deref()).map_err(ServeError::Config)?;
    Ok((tls, key))
}

/// Everything but the store, in the order that creates nothing: settings, listeners, files.
async fn check_and_bind(config: &ServeConfig) -> Result<Checked, ServeError> {
    config.validate().map_err(ServeError::Config)?;
    let listener = bind("--listen", &config.listen).await?;
    let metrics_listener = match &config.metrics_listen {
        Some(a) => Some(bind("--metrics-listen", a).await?),
        None => None,
    };
    let (tls, key) = check_files(config)?;
    let authority = enrolment_authority(config)?;
    Ok(Checked {
        listener,
        metrics_listener,
        tls,
        key,
        authority,
    })
}

/// `mbx-relay serve --check`: every setting, file and the key as a start checks them, the
/// addresses resolved (not bound: the relay being checked may hold them), and the store
/// reached; nothing is created or served. Answers the lines to print.
///
/// # Errors
/// The first problem ([`ServeError::Config`] for settings; a store that cannot be reached is
/// [`ServeError::Runtime`]).
pub async fn check(config: &ServeConfig) -> Result<Vec<String>, ServeError> {
    config.validate().map_err(ServeError::Config)?;
    let mut lines = vec!["settings: ok".to_string()];
    for (flag, value) in std::iter::once(("--listen", &config.listen)).chain(
        config
            .metrics_listen
            .iter()
            .map(|m| ("--metrics-listen", m)),
    ) {
        let addrs = resolve(flag, value).await?;
        lines.push(format!("{flag} {value}: resolves to {}", addrs[0]));
    }
    let (tls, key) = check_files(config)?;
    if tls.is_some() {
        lines.push("tls: certificate and key load".into());
    }
    let key_line = match &key {
        Some((k, source)) => format!(
            "relay key: {} (from {})",
            fingerprint(&k.public()),
            store_key::source_name(*source, &config.store_dir)
        ),
        None => "relay key: none yet (generated at the first start)".into(),
    };
    let (store_line, pinned) = check_store(config).await?;
    lines.push(match pinned {
        Pinned::Known(pk) => {
            match store_key::decide(pk.as_ref(), key, &config.store_dir)
                .map_err(ServeError::Config)?
            {
                Some(_) if pk.is_some() => format!("{key_line}, the store's own"),
                Some(_) | None => key_line,
            }
        }
        Pinned::InUse => format!("{key_line} (not compared: the store is in use)"),
        Pinned::NotYet => key_line,
    });
    let authority = enrolment_authority(config)?;
    lines.push(match &authority.chosen.allowlist {
        Some(list) => format!("enrolment authority: allowlist ({} keys)", list.len()),
        None => format!("enrolment authority: {}", authority.chosen.authority.name()),
    });
    lines.push(store_line);
    Ok(lines)
}

/// The enrolment authority the settings name (its allow-list read now: a bad one is a setting
/// error).
fn enrolment_authority(config: &ServeConfig) -> Result<Authority, ServeError> {
    let tokens = config.tokens.config().map_err(ServeError::Config)?;
    let with = relay_core::AuthorityFiles {
        allowlist: config.enrol_allowlist.as_deref(),
        tokens: tokens.as_ref().map(|t| t.settings.clone()),
    };
    let chosen = relay_core::for_serve(config.enrol_authority, with).map_err(ServeError::Config)?;
    let source = match (&chosen.tokens, &tokens) {
        (Some(_), Some(t)) => Some(token_args::HttpsJwks::new(t).map_err(ServeError::Config)?),
        _ => None,
    };
    Ok(Authority { chosen, source })
}

/// What `--check` learnt of the relay key a store pins.
enum Pinned {
    /// The store was opened: its pin (none on a store never started).
    Known(Option<relay_store::Key32>),
    /// A running relay (or relay-tool) holds the store: its pin is not read.
    InUse,
    /// No store yet (created at the first start).
    NotYet,
}

/// Open the store `spec` names, read the key it pins and close it. A directory store is never
/// created here; a database is opened as `--check` always opened it (set up when empty, as the
/// relay's first start would), so a new, empty database still checks.
async fn pinned_key(spec: &StoreSpec) -> Result<Pinned, ServeError> {
    let spec = spec.clone();
    let label = spec.to_string();
    let opened = tokio::task::spawn_blocking(move || {
        let opts = OpenOptions {
            create: matches!(spec, StoreSpec::Postgres(_)),
            ..OpenOptions::default()
        };
        let store = open_store(&spec, opts)?;
        let meta = store.meta();
        store.close()?;
        meta.map(|m| m.relay_pubkey)
    })
    .await
    .map_err(|e| format!("store open task failed: {e}"))?;
    match opened {
        Ok(pk) => Ok(Pinned::Known(pk)),
        Err(relay_store::StoreError::Locked { .. }) => Ok(Pinned::InUse),
        Err(relay_store::StoreError::Missing(_)) => Ok(Pinned::NotYet),
        Err(e) => Err(ServeError::store_open(&label, &e)),
    }
}

/// The store is reachable: a directory store's directory (or, not yet there, the nearest
/// existing parent it would be created in); an existing store is opened (not created) and
/// closed, for the relay key it pins.
async fn check_store(config: &ServeConfig) -> Result<(String, Pinned), ServeError> {
    match &config.store {
        StoreSpec::Dir(dir) => {
            if dir.exists() {
                std::fs::read_dir(dir).map_err(|e| {
                    format!("cannot read the store directory {}: {e}", dir.display())
                })?;
                let pinned = pinned_key(&config.store).await?;
                let note = match pinned {
                    Pinned::InUse => "exists, in use by a running relay",
                    Pinned::Known(_) | Pinned::NotYet => "exists",
                };
                return Ok((format!("store: {} ({note})", dir.display()), pinned));
            }
            let parent = dir
                .ancestors()
                .skip(1)
                .map(|p| {
                    if p.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        p
                    }
                })
                .find(|p| p.exists())
                .unwrap_or(Path::new("."));
            if !writable_dir(parent) {
                return Err(ServeError::Runtime(format!(
                    "the store directory {} cannot be created: {} is not a writable directory",
                    dir.display(),
                    parent.display()
                )));
            }
            Ok((
                format!("store: {} (created at the first start)", dir.display()),
                Pinned::NotYet,
            ))
        }
        StoreSpec::Postgres(_) => {
            let pinned = pinned_key(&config.store).await?;
            Ok((format!("store: {} (reachable)", config.store), pinned))
        }
    }
}

/// Run the relay until a shutdown signal. Nothing is created (store directory, relay key)
/// before every setting is checked and both listeners are bound; `READY=1` goes to systemd
/// once the relay listens.
///
/// # Errors
/// [`ServeError::Config`]: a setting, file or key refused (nothing created);
/// [`ServeError::Runtime`]: a port in use, store open/lock failure, I/O.
pub async fn run_serve(config: ServeConfig) -> Result<(), ServeError> {
    let Checked {
        listener,
        metrics_listener,
        tls,
        key: found_key,
        authority,
    } = check_and_bind(&config).await?;
    // Every file the relay and its storage engine create is owner-only, whatever the umask.
    relay_os::private::restrict_umask();
    let dir = config.store_dir.clone();
    let store = {
        let spec = config.store.clone();
        let opts = OpenOptions {
            log_retention: config.log_retention,
            ..OpenOptions::default()
        };
        let engine = relay_keyspace::EngineOptions {
            on_writer_idle: Some(crate::memory::collect_idle_thread),
        };
        crate::notify::notify("STATUS=opening the store");
        let ticker = tokio::spawn(opening_status());
        let opened =
            tokio::task::spawn_blocking(move || open_store_with(&spec, opts, engine)).await;
        ticker.abort();
        opened
            .map_err(|e| format!("store open task failed: {e}"))?
            .map_err(|e| ServeError::store_open(&config.store.to_string(), &e))?
    };
    // The store's pin decides before any key is written; a refusal closes the store first.
    let plan = match store.meta() {
        Ok(meta) => store_key::decide(meta.relay_pubkey.as_ref(), found_key, &dir)
            .map_err(ServeError::Config),
        Err(e) => Err(ServeError::Runtime(format!("cannot read store meta: {e}"))),
    };
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => {
            let closing = store.clone();
            let _ = tokio::task::spawn_blocking(move || closing.close()).await;
            return Err(e);
        }
    };
    if !dir.exists() {
        // A database store: `--store-dir` still holds the admin socket and relay.key.
        relay_os::durable_dir::create_dir_all_durable(&dir, 0o700)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let (relay_key, source) = match plan {
        Some(found) => found,
        None => load_or_create_key(&dir, config.key_env.as_deref())?,
    };
    tracing::info!(relay_key = %fingerprint(&relay_key.public()), source = ?source, "relay key loaded");
    let relay = Arc::new(
        start_relay(
            store.clone(),
            relay_key,
            config.limits.clone(),
            Arc::new(SystemClock),
        )
        .await?
        .with_authority(authority.chosen.authority.clone()),
    );

    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;
    relay.set_address(addr.to_string());

    // Extension point: the admin socket (relay-tool backup/dump while running) starts here, with
    // `store` and `dir` in scope.
    let cap = Some(config.limits.max_enrolments);
    let _admin = crate::admin::spawn_with(store.clone(), &dir, Some(relay.revoker()), cap)
        .map_err(|e| format!("cannot start the admin socket in {}: {e}", dir.display()))?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let background = tokio::spawn(relay.clone().run_background(stop_rx.clone()));
    let reloader = crate::http::tls::spawn_reloader(tls.clone(), stop_rx.clone())
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    if let Some(list) = authority.chosen.allowlist {
        list.spawn_reloader(stop_rx.clone())
            .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    }
    if let (Some(tokens), Some(source)) = (&authority.chosen.tokens, authority.source) {
        tokio::spawn(tokens.jwks().run(Arc::new(source), stop_rx.clone()));
    }
    let memory = Arc::new(crate::http::body::MemoryAccount::new(
        crate::http::body::BODY_BUDGET,
        config.guard.body.bytes_per_address,
        config.guard.body.bytes_per_key,
        config.guard.body.budget_wait,
    ));
    let app = Arc::new(App {
        relay: relay.clone(),
        trust_proxy: config.trust_proxy,
        http_metrics: Arc::new(crate::http::metrics::HttpMetrics::new(
            &relay,
            &memory,
            tls.clone(),
            Box::new(store_link::StoreLink),
            config.store.dir().map(std::path::Path::to_path_buf),
        )),
        memory,
        hop_gate: crate::http::hop_gate::HopGate::new(config.guard.body.auth_failures_per_minute),
        off_worker: crate::http::off_worker::OffWorker::default(),
        status: crate::http::status_facts::StatusFacts {
            backend: config.store.backend_name(),
            location: config.store.to_string(),
            guard: config.guard.clone(),
            tls: tls.clone(),
        },
    });
    let metrics_at = match &metrics_listener {
        Some(l) => Some(
            l.local_addr()
                .map_err(|e| format!("cannot read the metrics address: {e}"))?,
        ),
        None => None,
    };
    let metrics = metrics_listener.map(|l| {
        let guard = config.guard.clone();
        tokio::spawn(crate::http::private::serve_private(
            l,
            app.clone(),
            guard,
            stop_rx.clone(),
        ))
    });
    let signal = shutdown_signal()?;
    // Waiting pulls and event streams answer at once on shutdown (never hold it up to 60 s).
    relay.wake().set_cap(config.guard.max_connections);
    let waiters = relay.clone();
    let shutdown = async move {
        signal.await;
        waiters.wake().close();
    };
    {
        let mut out = std::io::stdout().lock();
        if let Some(at) = metrics_at {
            tracing::info!(%at, "serving /metrics");
            writeln!(out, "metrics listening on {at}").map_err(|e| format!("stdout: {e}"))?;
        }
        writeln!(
            out,
            "listening on {addr}{}",
            crate::http::tls::startup_note(&tls)
        )
        .and_then(|()| out.flush())
        .map_err(|e| format!("stdout: {e}"))?;
    }
    tracing::info!(%addr, store = %dir.display(), scheme = if tls.is_some() { "https" } else { "http" }, curve_arithmetic = relay_wire::strict_stream::curve_arithmetic(), "serving");
    let observed = Some(app.http_metrics.clone());
    crate::notify::notify(&format!("READY=1\nSTATUS=serving on {addr}"));
    let watchdog = crate::notify::spawn_watchdog(stop_rx.clone());
    let served = crate::http::conn::serve(
        listener,
        Public::new(app, config.guard.public_per_minute),
        config.guard.clone(),
        tls,
        observed,
        shutdown,
    )
    .await;
    tracing::info!("shutting down: in-flight requests finished");
    crate::notify::notify("STOPPING=1");
    let _ = stop_tx.send(true);
    // Bounded: with the database gone its last writes fail within the store's own deadline,
    // and a stop must never wait on them longer than this.
    if tokio::time::timeout(BACKGROUND_STOP, background)
        .await
        .is_err()
    {
        tracing::warn!(
            ?BACKGROUND_STOP,
            "background work did not stop in time; closing the store"
        );
    }
    let _ = reloader.await;
    if let Some(w) = watchdog {
        let _ = w.await;
    }
    if let Some(m) = metrics {
        let _ = m.await;
    }
    drop(relay);
    let closed = tokio::task::spawn_blocking(move || store.close())
        .await
        .map_err(|e| format!("store close task failed: {e}"))?;
    served.map_err(|e| format!("server error: {e}"))?;
    closed.map_err(|e| format!("closing the store failed: {e}"))?;
    tracing::info!("store closed");
    Ok(())
}

/// Resolves on SIGTERM or SIGINT. The handlers are installed by this call, not when the future
/// is first polled, so a signal sent right after `listening on` is printed stops the relay
/// cleanly instead of killing it.
///
/// # Errors
/// The signal handlers could not be installed.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let installed =
        |kind| signal(kind).map_err(|e| format!("cannot install a signal handler: {e}"));
    let mut term = installed(SignalKind::terminate())?;
    let mut int = installed(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => tracing::info!("SIGINT received"),
            _ = term.recv() => tracing::info!("SIGTERM received"),
        }
    })
}

/// While the store opens (a schema migration may take minutes): a `STATUS=` line every few
/// seconds, the start timeout extended, and the watchdog fed, so systemd neither kills a long
/// migration nor leaves the operator guessing.
async fn opening_status() {
    let began = std::time::Instant::now();
    let every = crate::notify::watchdog_interval().map_or(STATUS_EVERY, |w| w.min(STATUS_EVERY));
    loop {
        tokio::time::sleep(every).await;
        crate::notify::notify(&format!(
            "STATUS=opening the store ({} s; a schema migration may be running)\n\
             EXTEND_TIMEOUT_USEC={}\nWATCHDOG=1",
            began.elapsed().as_secs(),
            (STATUS_EVERY * 6).as_micros()
        ));
    }
}

/// How often [`opening_status`] reports.
const STATUS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// `path` is a directory this process may create entries in (`access(2)`, W_OK and X_OK).
fn writable_dir(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    path.is_dir() && unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } == 0
}
