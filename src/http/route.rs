//! The route table of docs/protocol.md §3, the live-delivery extension's events stream, plus
//! `/health`. Anything else — another path or another
//! method, `/metrics` included (it is served on `--metrics-listen` only) — is
//! `404 {"error":"not found"}`.

use axum::http::Method;

/// Every route the relay answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Route {
    Info,
    Challenge,
    Enrol,
    EncKeyPut,
    EncKeyPutV2,
    EncKeyGetV1,
    EncKeyGetV2,
    Senders,
    Rotate,
    PushV2,
    PullV2,
    AckV2,
    PushV1,
    PullV1,
    AckV1,
    /// `GET /v2/relay/events` (mbx-relay extension: live delivery).
    Events,
    Health,
}

impl Route {
    /// The route for a method and path, if any.
    pub fn of(method: &Method, path: &str) -> Option<Route> {
        let get = method == Method::GET;
        let post = method == Method::POST;
        Some(match (path, get, post) {
            ("/v2/relay/info", true, _) => Route::Info,
            ("/v1/relay/challenge", _, true) => Route::Challenge,
            ("/v1/relay/enrol", _, true) => Route::Enrol,
            ("/v1/relay/enc-key", _, true) => Route::EncKeyPut,
            ("/v1/relay/enc-key", true, _) => Route::EncKeyGetV1,
            ("/v2/relay/enc-key", true, _) => Route::EncKeyGetV2,
            ("/v2/relay/enc-key", _, true) => Route::EncKeyPutV2,
            ("/v2/relay/senders", _, true) => Route::Senders,
            ("/v2/relay/rotate", _, true) => Route::Rotate,
            ("/v2/relay/items", _, true) => Route::PushV2,
            ("/v2/relay/items", true, _) => Route::PullV2,
            ("/v2/relay/ack", _, true) => Route::AckV2,
            ("/v1/relay/messages", _, true) => Route::PushV1,
            ("/v1/relay/messages", true, _) => Route::PullV1,
            ("/v1/relay/ack", _, true) => Route::AckV1,
            ("/v2/relay/events", true, _) => Route::Events,
            ("/health", true, _) => Route::Health,
            _ => return None,
        })
    }

    /// The label used in `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Route::Info => "GET /v2/relay/info",
            Route::Challenge => "POST /v1/relay/challenge",
            Route::Enrol => "POST /v1/relay/enrol",
            Route::EncKeyPut => "POST /v1/relay/enc-key",
            Route::EncKeyPutV2 => "POST /v2/relay/enc-key",
            Route::EncKeyGetV1 => "GET /v1/relay/enc-key",
            Route::EncKeyGetV2 => "GET /v2/relay/enc-key",
            Route::Senders => "POST /v2/relay/senders",
            Route::Rotate => "POST /v2/relay/rotate",
            Route::PushV2 => "POST /v2/relay/items",
            Route::PullV2 => "GET /v2/relay/items",
            Route::AckV2 => "POST /v2/relay/ack",
            Route::PushV1 => "POST /v1/relay/messages",
            Route::PullV1 => "GET /v1/relay/messages",
            Route::AckV1 => "POST /v1/relay/ack",
            Route::Events => "GET /v2/relay/events",
            Route::Health => "GET /health",
        }
    }

    /// Challenge, enrol and rotate take small bodies and count against the per-address window.
    pub(crate) fn enrolment_class(self) -> bool {
        matches!(self, Route::Challenge | Route::Enrol | Route::Rotate)
    }

    /// Routes that need no signed hop.
    pub fn public(self) -> bool {
        self.enrolment_class() || matches!(self, Route::Info | Route::Health)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_method_and_path() {
        assert_eq!(
            Route::of(&Method::GET, "/v2/relay/items"),
            Some(Route::PullV2)
        );
        assert_eq!(
            Route::of(&Method::POST, "/v2/relay/items"),
            Some(Route::PushV2)
        );
        assert_eq!(Route::of(&Method::DELETE, "/v2/relay/items"), None);
        assert_eq!(Route::of(&Method::GET, "/v2/relay/items/"), None);
        assert_eq!(Route::of(&Method::GET, "/nope"), None);
        assert_eq!(
            Route::of(&Method::GET, "/metrics"),
            None,
            "private listener only"
        );
    }
}
