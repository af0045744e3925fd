//! `/metrics` in Prometheus text format: requests by route and status (counted here), the relay's
//! item and store-write counters, live enrolments against the cap, and queued items and bytes
//! from the store (cached briefly, since computing them reads the usage table). Served only on
//! the private `--metrics-listen` address, under the same guard as the public listener.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::guard::GuardConfig;
use super::{App, TrustProxy};
use relay_core::metrics::escape_label;
use relay_core::Relay;

/// Connections the metrics listener serves at once (a scraper or two; more wait for 503).
const METRICS_CONNECTIONS: usize = 8;

/// How long a queue-usage reading is reused.
const QUEUE_CACHE: Duration = Duration::from_secs(10);

/// Requests counted by (route label, status); bounded by routes × statuses.
#[derive(Default)]
pub(crate) struct HttpMetrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    queued: Mutex<Option<(Instant, u64, u64)>>,
}

impl HttpMetrics {
    /// Count one answered request.
    pub fn count(&self, route: &'static str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry((route, status)).or_insert(0) += 1;
    }

    /// Render every metric.
    pub async fn render(&self, relay: &Relay) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP mbx_relay_requests_total HTTP requests by route and status.\n# TYPE mbx_relay_requests_total counter"
        );
        {
            let m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            for ((route, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "mbx_relay_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                    escape_label(route)
                );
            }
        }
        relay.metrics.render(&mut out);
        if let Some(live) = relay.watch_enrolments() {
            let _ = writeln!(
                out,
                "# HELP mbx_relay_enrolments_live Live (not revoked) enrolments.\n# TYPE mbx_relay_enrolments_live gauge\nmbx_relay_enrolments_live {live}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP mbx_relay_enrolments_max The live-enrolment cap (--max-enrolments); at it new hosts are refused.\n# TYPE mbx_relay_enrolments_max gauge\nmbx_relay_enrolments_max {}",
            relay.max_enrolments()
        );
        let _ = writeln!(
            out,
            "# HELP mbx_relay_waiters Waiting pulls and event streams (docs/protocol.md section 8).\n# TYPE mbx_relay_waiters gauge\nmbx_relay_waiters {}",
            relay.wake().waiters()
        );
        relay_core::metrics::render_commit_stats(&mut out, &relay.store().commit_stats());
        if let Some((items, bytes)) = self.queued(relay).await {
            let _ = writeln!(
                out,
                "# HELP mbx_relay_queued_items Items queued for all targets.\n# TYPE mbx_relay_queued_items gauge\nmbx_relay_queued_items {items}"
            );
            let _ = writeln!(
                out,
                "# HELP mbx_relay_queued_bytes Wire bytes queued for all targets.\n# TYPE mbx_relay_queued_bytes gauge\nmbx_relay_queued_bytes {bytes}"
            );
        }
        out
    }

    async fn queued(&self, relay: &Relay) -> Option<(u64, u64)> {
        if let Some((at, i, b)) = *self.queued.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < QUEUE_CACHE {
                return Some((i, b));
            }
        }
        let store = relay.store().clone();
        let stats = tokio::task::spawn_blocking(move || store.stats())
            .await
            .ok()?
            .ok()?;
        let v = (stats.queued.items, stats.queued.bytes);
        *self.queued.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), v.0, v.1));
        Some(v)
    }
}

/// Serve `GET /metrics` on the private listener until `stop` turns true, under the public
/// listener's guard settings with a small connection cap.
///
/// # Errors
/// As [`super::guard::serve`].
pub(crate) async fn serve_private(
    listener: TcpListener,
    app: Arc<App>,
    guard: GuardConfig,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let config = GuardConfig {
        max_connections: METRICS_CONNECTIONS.min(guard.max_connections),
        ..guard
    };
    let router = axum::Router::new().fallback(answer).with_state(app);
    let stopped = async move {
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                break;
            }
        }
    };
    super::guard::serve(listener, router, TrustProxy::Off, config, None, stopped).await
}

/// `GET /metrics`; anything else `404 {"error":"not found"}`.
async fn answer(State(app): State<Arc<App>>, req: Request) -> Response {
    let mut r = if req.method() == Method::GET && req.uri().path() == "/metrics" {
        let text = app.http_metrics.render(&app.relay).await;
        let mut r = (StatusCode::OK, text).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        r
    } else {
        let mut r = (StatusCode::NOT_FOUND, r#"{"error":"not found"}"#).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    };
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
