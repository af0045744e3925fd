//! The private listener (`--metrics-listen`): `GET /metrics` (Prometheus text,
//! [`super::metrics`]) and `GET /status` (JSON, [`super::status`]); anything else is
//! `404 {"error":"not found"}`. Served under the public listener's guard settings with a small
//! connection cap.

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;

use std::net::SocketAddr;

use super::conn::{Answer, GuardConfig, Service};
use super::App;

/// Connections the private listener serves at once (a scraper or two; more wait for 503).
const PRIVATE_CONNECTIONS: usize = 8;

/// Serve the private listener until `stop` turns true.
///
/// # Errors
/// As [`super::conn::serve`].
pub(crate) async fn serve_private(
    listener: TcpListener,
    app: Arc<App>,
    guard: GuardConfig,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<()> {
    // Its own caps, whatever the public ones are: a scraper polling fast must not meet the
    // public per-address cap (a small `--max-connections` would leave it one slot, and the last
    // scrape's connection may not have ended on this side when the next one arrives), and one
    // address holding unfinished heads must not take every slot from the scraper (half each).
    let config = GuardConfig {
        max_connections: PRIVATE_CONNECTIONS,
        max_connections_per_address: PRIVATE_CONNECTIONS / 2,
        ..guard
    };
    let stopped = async move {
        while !*stop.borrow_and_update() {
            if stop.changed().await.is_err() {
                break;
            }
        }
    };
    super::conn::serve(
        listener,
        Arc::new(Private(app)),
        config,
        None,
        None,
        stopped,
    )
    .await
}

/// The private listener's service.
struct Private(Arc<App>);

impl Service for Private {
    fn call(self: Arc<Self>, _peer: SocketAddr, req: Request) -> Answer {
        Box::pin(async move { answer(&self.0, req).await })
    }
}

/// `GET /metrics`, `GET /status`; anything else `404 {"error":"not found"}`.
async fn answer(app: &App, req: Request) -> Response {
    let get = req.method() == Method::GET;
    let (status, content_type, body) = match req.uri().path() {
        "/metrics" if get => (
            StatusCode::OK,
            super::metrics::CONTENT_TYPE,
            app.http_metrics.render().await,
        ),
        "/status" if get => (
            StatusCode::OK,
            "application/json",
            super::status::document(app).await.to_string(),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "application/json",
            r#"{"error":"not found"}"#.to_owned(),
        ),
    };
    let mut r = (status, body).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
