//! What a handler gets: the admitted call ([`Call`]), its caller (or none), head, bytes, parsed
//! JSON and the memory it holds. Its own module so the route table, the admission step, the
//! endpoints and the pipeline all name it without naming each other.

use std::sync::Arc;

use axum::http::request::Parts;
use serde_json::Value;

use super::account::Held;
use super::App;

/// An admitted request as its handler gets it: `who` is the verified [`relay_core::Caller`] of a
/// signed route, `()` of an open one.
pub(crate) struct Call<W> {
    pub(crate) app: Arc<App>,
    pub(crate) who: W,
    /// The request head (its query, its extensions).
    pub(crate) parts: Parts,
    /// The body as received (empty for routes that read none).
    pub(crate) body: Vec<u8>,
    /// The body parsed, for [`super::parse_cost::Parse::Value`] rows (else `null`).
    pub(crate) json: Value,
    /// The memory the request holds, counted until the call ends (a handler that waits long
    /// drops it first).
    pub(crate) _held: Held,
}

impl<W> Call<W> {
    /// The query string's parameters (empty when it does not parse).
    pub(crate) fn query(&self) -> std::collections::HashMap<String, String> {
        axum::extract::Query::<std::collections::HashMap<String, String>>::try_from_uri(
            &self.parts.uri,
        )
        .map(|q| q.0)
        .unwrap_or_default()
    }
}
