//! The HTTP adapter (hyper, with axum's body and response types): one handler that routes docs/protocol.md §3, caps bodies while streaming and maps
//! relay answers to status codes. The `mbx-relay serve` lifecycle that starts it is `crate::serve`.

mod answer;
pub mod body;
mod body_budget;
pub(crate) mod client_addr;
mod conn_limit;
mod events;
pub mod guard;
pub(crate) mod handler;
pub(crate) mod hop_gate;
pub(crate) mod metrics;
mod parked;
pub(crate) mod private;
pub(crate) mod retry_after;
pub(crate) mod route;
pub(crate) mod status;
pub(crate) mod tls;
pub(crate) mod tls_cert;
mod verify;

use std::sync::Arc;

pub use client_addr::TrustProxy;
use relay_core::Relay;

/// Shared state of the HTTP layer.
pub(crate) struct App {
    pub relay: Arc<Relay>,
    pub(crate) trust_proxy: TrustProxy,
    pub(crate) http_metrics: Arc<metrics::HttpMetrics>,
    /// Memory limits for request bodies being read and handled (shared and per address).
    pub bodies: Arc<body::BodyLimits>,
    /// What `/status` reports besides live figures.
    pub(crate) status: status::StatusFacts,
    /// Failed hop authentications per address, and where signatures are checked.
    pub(crate) hop_gate: hop_gate::HopGate,
}

/// The public listener's service: every request goes through [`handler::handle`].
pub(crate) fn service(app: Arc<App>) -> guard::Service {
    guard::Service::Relay(app)
}
