//! The HTTP adapter (hyper, with axum's body and response types), in three layers: the
//! connection layer ([`conn`]: accept loop, connection caps, timeouts, paced bodies) serves a
//! [`conn::Service`]; the public service is the pipeline ([`pipeline`]: route table, admission,
//! endpoint, answer), the private one `/metrics` and `/status` ([`private`]). The `mbx-relay
//! serve` lifecycle that starts them is `crate::serve`.

pub(crate) mod account;
mod admit;
mod answer;
pub mod body;
mod call;
pub(crate) mod client_addr;
pub mod conn;
mod endpoints;
mod events;
mod held_body;
pub(crate) mod hop_gate;
pub(crate) mod metrics;
pub(crate) mod off_worker;
mod parked;
mod parse_cost;
pub(crate) mod pipeline;
pub(crate) mod private;
pub(crate) mod retry_after;
pub(crate) mod route;
pub(crate) mod status;
pub(crate) mod status_facts;
pub(crate) mod tls;
pub(crate) mod tls_cert;

use std::sync::Arc;

pub use client_addr::TrustProxy;
use relay_core::Relay;

/// Shared state of the HTTP layer.
pub(crate) struct App {
    pub relay: Arc<Relay>,
    pub(crate) trust_proxy: TrustProxy,
    pub(crate) http_metrics: Arc<metrics::HttpMetrics>,
    /// The one account of the memory requests hold (bodies, parse trees, response pages),
    /// shared, per address before a hop is proven, per key after ([`account`]).
    pub memory: Arc<account::MemoryAccount>,
    /// What `/status` reports besides live figures.
    pub(crate) status: status_facts::StatusFacts,
    /// Failed hop authentications per address.
    pub(crate) hop_gate: hop_gate::HopGate,
    /// Where large bodies' signatures are checked and their JSON parsed.
    pub(crate) off_worker: off_worker::OffWorker,
}
