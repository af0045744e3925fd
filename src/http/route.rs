//! The route table: one row per endpoint of docs/protocol.md §3 (plus the live-delivery
//! extension's events stream and `/health`), saying everything the pipeline
//! ([`super::pipeline`]) needs to admit a request before its handler runs: method and path
//! (one text, also the `/metrics` label), who may call it and with what handler, its body cap,
//! how its body is parsed (which decides what the parse is charged), and the headers every
//! answer carries. Anything else — another path
//! or another method, `/metrics` included (it is served on `--metrics-listen` only) — is
//! `404 {"error":"not found"}`.
//!
//! Adding an endpoint is a row here plus its handler in [`super::endpoints`] (ARCHITECTURE.md,
//! "How to add an endpoint").

use axum::http::Method;

use super::body::{MAX_BODY, MAX_RECORD_BODY, MAX_SMALL_BODY};
use super::call::Call;
use super::conn::Answer;
use super::endpoints as e;
use super::parse_cost::Parse;
use relay_core::Caller;

/// A handler: the admitted call in, the answer out.
pub(crate) type Handler<W> = fn(Call<W>) -> Answer;

/// Who may call a route, and its handler for each kind of caller.
#[derive(Clone, Copy)]
pub(crate) enum Access {
    /// Anyone, no hop, the body never read (`/health`); counted in the address's public window.
    Open(Handler<()>),
    /// Anyone, no hop, a small body read; counted in the address's `--enrol-per-minute` window
    /// by the relay (challenge, enrol, rotate).
    Enrolment(Handler<()>),
    /// A hop-signed caller only: the hop's headers checked before any body memory is held, its
    /// signature over the body after.
    Signed(Handler<Caller>),
    /// Signed (the first handler) or not (the second, also for a hop that fails): info. Unsigned
    /// calls count in the public window.
    SignedOrOpen(Handler<Caller>, Handler<()>),
}

/// One endpoint.
pub(crate) struct Route {
    /// `METHOD /path`: what the route matches, and its `/metrics` label.
    pub(crate) label: &'static str,
    pub(crate) access: Access,
    /// Largest body accepted (413 past it, from the declared length or the bytes received).
    pub(crate) body_cap: usize,
    /// How the body is parsed: [`Parse::Value`] before the handler (a parse error answers
    /// 400), the pushes by their handlers; the account is charged for it before any parse.
    pub(crate) parse: Parse,
    /// Headers added to every answer of this route, refusals included.
    pub(crate) headers: &'static [(&'static str, &'static str)],
}

/// The header naming the longest `wait` a pull may ask for (mbx-relay extension).
pub(crate) const WAIT_MAX_HEADER: &str = "x-mbx-wait-max";
/// Its value: [`relay_core::MAX_WAIT_SECS`] as text.
const WAIT_MAX: &str = "60";
const _: () = assert!(relay_core::MAX_WAIT_SECS == 60, "WAIT_MAX is its text");

/// A row with the defaults most rows share: a full-size body, not parsed, no extra headers.
const fn row(label: &'static str, access: Access) -> Route {
    Route {
        label,
        access,
        body_cap: MAX_BODY,
        parse: Parse::Unparsed,
        headers: &[],
    }
}

/// A signed push row: a full-size body its handler parses as `parse` says.
const fn push(label: &'static str, parse: Parse, handler: Handler<Caller>) -> Route {
    Route {
        parse,
        ..row(label, Access::Signed(handler))
    }
}

/// A signed route whose JSON body (at most `body_cap` bytes) is parsed before its handler.
const fn json(label: &'static str, body_cap: usize, handler: Handler<Caller>) -> Route {
    Route {
        parse: Parse::Value,
        body_cap,
        ..row(label, Access::Signed(handler))
    }
}

/// An enrolment-class route: a small JSON body, no hop.
const fn enrolment(label: &'static str, handler: Handler<()>) -> Route {
    Route {
        body_cap: MAX_SMALL_BODY,
        parse: Parse::Value,
        ..row(label, Access::Enrolment(handler))
    }
}

/// Every route the relay answers.
pub(crate) static ROUTES: [Route; 17] = [
    Route {
        body_cap: MAX_SMALL_BODY,
        ..row("GET /health", Access::Open(e::health))
    },
    Route {
        body_cap: MAX_SMALL_BODY,
        ..row(
            "GET /v2/relay/info",
            Access::SignedOrOpen(e::info_signed, e::info_open),
        )
    },
    enrolment("POST /v1/relay/challenge", e::challenge),
    enrolment("POST /v1/relay/enrol", e::enrol),
    enrolment("POST /v2/relay/rotate", e::rotate),
    json("POST /v1/relay/enc-key", MAX_RECORD_BODY, e::put_enc_ad_v1),
    json("POST /v2/relay/enc-key", MAX_RECORD_BODY, e::put_enc_ad_v2),
    row("GET /v1/relay/enc-key", Access::Signed(e::get_enc_ad_v1)),
    row("GET /v2/relay/enc-key", Access::Signed(e::get_enc_ad_v2)),
    json("POST /v2/relay/senders", MAX_BODY, e::put_sender_list),
    push("POST /v2/relay/items", Parse::Push, e::push),
    Route {
        headers: &[(WAIT_MAX_HEADER, WAIT_MAX)],
        ..row("GET /v2/relay/items", Access::Signed(e::pull))
    },
    json("POST /v2/relay/ack", MAX_RECORD_BODY, e::ack),
    // The body's bytes, parsed by the relay: v1 envelopes are stored as sent (their key order).
    push("POST /v1/relay/messages", Parse::PushV1, e::push_v1),
    row("GET /v1/relay/messages", Access::Signed(e::pull_v1)),
    json("POST /v1/relay/ack", MAX_RECORD_BODY, e::ack_v1),
    row("GET /v2/relay/events", Access::Signed(e::events)),
];

impl Route {
    /// The route for a method and path, if any.
    pub(crate) fn find(method: &Method, path: &str) -> Option<&'static Route> {
        ROUTES
            .iter()
            .find(|r| r.label.split_once(' ') == Some((method.as_str(), path)))
    }

    /// Whether the relay counts this route's calls in the `--enrol-per-minute` window.
    pub(crate) fn enrolment_class(&self) -> bool {
        matches!(self.access, Access::Enrolment(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(method: Method, path: &str) -> Option<&'static str> {
        Route::find(&method, path).map(|r| r.label)
    }

    #[test]
    fn routes_by_method_and_path() {
        assert_eq!(
            label(Method::GET, "/v2/relay/items"),
            Some("GET /v2/relay/items")
        );
        assert_eq!(
            label(Method::POST, "/v2/relay/items"),
            Some("POST /v2/relay/items")
        );
        assert_eq!(label(Method::DELETE, "/v2/relay/items"), None);
        assert_eq!(label(Method::GET, "/v2/relay/items/"), None);
        assert_eq!(label(Method::GET, "/nope"), None);
        assert_eq!(
            label(Method::GET, "/metrics"),
            None,
            "private listener only"
        );
    }

    #[test]
    fn each_method_and_path_has_one_row() {
        let mut labels: Vec<_> = ROUTES.iter().map(|r| r.label).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), ROUTES.len());
        for r in &ROUTES {
            let (m, p) = r.label.split_once(' ').unwrap();
            assert!(m == "GET" || m == "POST", "{}", r.label);
            assert!(p.starts_with('/'), "{}", r.label);
        }
    }
}
