//! What `/status` (`super::status`) reports that is fixed when the relay starts, held by the
//! HTTP layer's shared state (`super::App`) and filled in by `crate::serve`.

use super::conn::GuardConfig;
use super::tls::Tls;

/// What `/status` reports that is fixed at start.
pub(crate) struct StatusFacts {
    /// `directory` or `postgres`.
    pub backend: &'static str,
    /// The store's location, without secrets (a directory, or `postgres://host:port/db`).
    pub location: String,
    pub guard: GuardConfig,
    pub tls: Option<std::sync::Arc<Tls>>,
}
