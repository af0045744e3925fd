//! The `serve` lifecycle: the server's start-up wiring (store, key, admin socket, HTTP).
//! Startup order: owner-only umask, refuse a store directory others can
//! reach, open the store (lock), load or create the relay key (refused likewise), pin
//! it, stale-heartbeat check, heartbeat, bind (and bind `--metrics-listen`, printing
//! `metrics listening on <addr>`), install the SIGHUP handler (TLS reload, [`crate::http::tls`]),
//! print `listening on <addr>`, then serve; background tasks sweep and heartbeat. On SIGTERM/SIGINT: stop accepting, finish in-flight requests, stop the
//! background tasks and the metrics listener, close the store.

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use relay_store::{OpenOptions, SystemClock};

use crate::http::{router, App, TrustProxy};
use crate::store_open::{open_store, StoreSpec};
use relay_core::{key, startup, Limits};
use relay_os::private::{require_private, Kind};
use relay_wire::keys::fingerprint;

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: String,
    /// Private address for `GET /metrics` (`--metrics-listen`); none: metrics are not served.
    pub(crate) metrics_listen: Option<String>,
    pub store_dir: PathBuf,
    /// The store backend (`--store`; default: the directory store in `store_dir`). For a
    /// directory store `store_dir` is that directory.
    pub store: StoreSpec,
    pub(crate) trust_proxy: TrustProxy,
    pub limits: Limits,
    /// The content of `MBX_RELAY_KEY`, if set (never logged).
    pub(crate) key_env: Option<String>,
    /// Connection cap, timeouts and the public-route rate limit (`crate::http::guard`).
    pub guard: crate::http::guard::GuardConfig,
    /// Age (and the keyspace's count cap) beyond which relay-log entries are dropped.
    pub log_retention: relay_store::LogRetention,
    /// `--tls-cert` / `--tls-key` (both or neither; checked at start).
    pub tls: crate::http::tls::TlsArgs,
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

/// Run the relay until a shutdown signal.
///
/// # Errors
/// A message for the operator: store open/lock failure, key refused, bind failure, I/O.
pub async fn run_serve(config: ServeConfig) -> Result<(), String> {
    config.validate()?;
    let tls = config.tls.load()?;
    // Every file the relay and its storage engine create is owner-only, whatever the umask.
    relay_os::private::restrict_umask();
    let dir = config.store_dir.clone();
    if config.store.dir().is_none() && !dir.exists() {
        // A database store: `--store-dir` still holds the admin socket and relay.key.
        relay_os::durable_dir::create_dir_all_durable(&dir, 0o700)
            .map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    if dir.exists() {
        require_private(&dir, Kind::Dir, "store directory")?;
    }
    let store = {
        let spec = config.store.clone();
        let opts = OpenOptions {
            on_writer_idle: Some(crate::memory::collect_idle_thread),
            log_retention: config.log_retention,
            ..OpenOptions::default()
        };
        tokio::task::spawn_blocking(move || open_store(&spec, opts))
            .await
            .map_err(|e| format!("store open task failed: {e}"))?
            .map_err(|e| format!("cannot open store {}: {e}", config.store))?
    };
    let (relay_key, source) = key::load_or_create(&dir, config.key_env.as_deref())?;
    tracing::info!(relay_key = %fingerprint(&relay_key.public()), source = ?source, "relay key loaded");
    let relay = Arc::new(
        startup::start(
            store.clone(),
            relay_key,
            config.limits.clone(),
            Arc::new(SystemClock),
        )
        .await?
        .with_authority(relay_core::authority::for_serve()?),
    );

    let listener = tokio::net::TcpListener::bind(&config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot read the bound address: {e}"))?;

    let metrics_listener = match &config.metrics_listen {
        Some(a) => Some(
            tokio::net::TcpListener::bind(a)
                .await
                .map_err(|e| format!("cannot listen on {a} for metrics: {e}"))?,
        ),
        None => None,
    };

    // Extension point: the admin socket (relay-tool backup/dump while running) starts here, with
    // `store` and `dir` in scope.
    let cap = Some(config.limits.max_enrolments);
    let _admin = crate::admin::spawn_with(store.clone(), &dir, Some(relay.revoker()), cap)
        .map_err(|e| format!("cannot start the admin socket in {}: {e}", dir.display()))?;

    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let background = tokio::spawn(relay.clone().run_background(stop_rx.clone()));
    let reloader = crate::http::tls::spawn_reloader(tls.clone(), stop_rx.clone())
        .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
    let app = Arc::new(App {
        relay: relay.clone(),
        trust_proxy: config.trust_proxy,
        http_metrics: crate::http::metrics::HttpMetrics::default(),
        bodies: crate::http::body::BodyLimits::new(
            crate::http::body::BODY_BUDGET,
            config.guard.body.bytes_per_address,
            config.guard.body.bytes_per_key,
            config.guard.body.budget_wait,
        ),
        hop_gate: crate::http::hop_gate::HopGate::new(config.guard.body.auth_failures_per_minute),
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
        tokio::spawn(crate::http::metrics::serve_private(
            l,
            app.clone(),
            guard,
            stop_rx,
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
        writeln!(out, "listening on {addr}")
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))?;
    }
    tracing::info!(%addr, store = %dir.display(), "serving");
    let served = crate::http::guard::serve(
        listener,
        router(app),
        config.trust_proxy,
        config.guard.clone(),
        tls,
        shutdown,
    )
    .await;
    tracing::info!("shutting down: in-flight requests finished");
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
