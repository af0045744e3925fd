//! The public listener's request pipeline, the same for every route: find the route's row
//! ([`super::route`]), count unsigned calls in the address's public window, admit the request
//! ([`super::admit`]: header cap, hop check, body memory, read, signature), call the row's
//! handler ([`super::endpoints`]), and finish the answer (metrics, `cache-control: no-store`,
//! `retry-after`, the row's headers).
//!
//! **Per-address limit for unauthenticated routes**: requests to routes that need no signed hop
//! and are not already limited per address by the relay (unsigned info, health and unknown
//! paths; challenge, enrol and rotate have the relay's own `--enrol-per-minute` window) count
//! against the client address's one-minute window (`--public-per-minute`); over it, `429`. A
//! request whose signed hop fails counts the same way; a valid signed call is not counted here.
//! Addresses are keyed by [`relay_core::address_key`] (IPv6 by /64 prefix). The table is
//! hard-capped and evicts the oldest window when full, so new clients are still served (see
//! [`relay_core::RateTable`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::json;

use super::admit::{admit, Admitted, Rejected};
use super::answer::{answer_unread, json_response, retry_later, Refused};
use super::call::Call;
use super::client_addr::client_addr;
use super::conn::{Answer, Service, MAX_HEADER_BYTES};
use super::metrics::RequestRefusal;
use super::route::{Access, Route};
use super::{parked, retry_after, App};
use relay_core::{AddrKey, RateTable};

/// Most client addresses whose public-route windows are tracked at once.
pub(crate) const PUBLIC_RATE_CAP: usize = 100_000;

/// The public listener's service: the relay's state and the public window.
pub(crate) struct Public {
    pub(crate) app: Arc<App>,
    public_rate: RateTable<AddrKey>,
}

impl Public {
    /// The service for `app`, allowing `per_minute` unsigned calls per address.
    pub(crate) fn new(app: Arc<App>, per_minute: u32) -> Arc<Self> {
        Arc::new(Public {
            app,
            public_rate: RateTable::new(per_minute, PUBLIC_RATE_CAP),
        })
    }

    fn public_window_hit(&self) {
        self.app.http_metrics.refused(RequestRefusal::PublicWindow);
    }
}

impl Service for Public {
    fn call(self: Arc<Self>, peer: SocketAddr, req: Request) -> Answer {
        Box::pin(async move { self.handle(peer, req).await })
    }
}

impl Public {
    /// One request: the public window, then the pipeline; a request whose hop failed is counted
    /// after.
    async fn handle(&self, peer: SocketAddr, req: Request) -> Response {
        let route = Route::find(req.method(), req.uri().path());
        // Enrolment-class routes are counted per address by the relay itself; a signed info call
        // (hosts make one every sync pass) is counted only if its hop fails (below).
        let counted = match route.map(|r| r.access) {
            None | Some(Access::Open(_)) => true,
            Some(Access::SignedOrOpen(..)) => !req.headers().contains_key("x-mbx-sig"),
            Some(Access::Enrolment(_) | Access::Signed(_)) => false,
        };
        if counted {
            let addr = client_addr(self.app.trust_proxy, peer, req.headers());
            if let Err(wait) = self.public_rate.try_hit_addr(&addr, relay_core::now_ms()) {
                self.public_window_hit();
                return answer_unread(too_many_requests(wait), req.into_body());
            }
        }
        let (resp, failed_hop) = answer(&self.app, route, peer, req).await;
        if let Some(addr) = failed_hop.filter(|_| !counted) {
            if let Err(wait) = self.public_rate.try_hit_addr(&addr, relay_core::now_ms()) {
                // The refused hop's body may still be draining: its `connection: close` stays.
                self.public_window_hit();
                let mut r = too_many_requests(wait);
                if let Some(close) = resp.headers().get(header::CONNECTION) {
                    r.headers_mut().insert(header::CONNECTION, close.clone());
                }
                return r;
            }
        }
        resp
    }
}

/// The public window's 429, `wait` being the time until the window frees (answered before the
/// pipeline, so it adds `cache-control` itself).
fn too_many_requests(wait: Duration) -> Response {
    let mut r = retry_later(
        StatusCode::TOO_MANY_REQUESTS,
        "too many requests from this address, retry later",
        wait,
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Route, admit, handle and finish one request; with the client address when its signed hop
/// failed.
async fn answer(
    app: &Arc<App>,
    route: Option<&'static Route>,
    peer: SocketAddr,
    req: Request,
) -> (Response, Option<String>) {
    let started = Instant::now();
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    let (resp, failed_hop) = if header_bytes > MAX_HEADER_BYTES {
        let r = json_response(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            &json!({ "error": "request headers too large" }),
        );
        (answer_unread(r, req.into_body()), None)
    } else {
        match route {
            None => {
                let r = json_response(StatusCode::NOT_FOUND, &json!({ "error": "not found" }));
                (answer_unread(r, req.into_body()), None)
            }
            Some(route) => match admit(app, route, peer, req).await {
                Ok(admitted) => (call(app, route, admitted).await, None),
                Err(Rejected {
                    response,
                    failed_hop,
                }) => (response, failed_hop),
            },
        }
    };
    let mut resp = resp;
    if let Some(later) = parked::take(&mut resp) {
        // A waiting pull: finished when its answer is known.
        let app = app.clone();
        let resp = parked::response(async move { finish(&app, route, later.await, started) });
        return (resp, failed_hop);
    }
    (finish(app, route, resp, started), failed_hop)
}

/// Call the row's handler for an admitted request.
fn call(app: &Arc<App>, route: &Route, a: Admitted) -> Answer {
    let Admitted {
        caller,
        parts,
        body,
        json,
        held,
    } = a;
    let app = app.clone();
    match (route.access, caller) {
        (Access::Signed(h) | Access::SignedOrOpen(h, _), Some(who)) => h(Call {
            app,
            who,
            parts,
            body,
            json,
            _held: held,
        }),
        (Access::Open(h) | Access::Enrolment(h) | Access::SignedOrOpen(_, h), _) => h(Call {
            app,
            who: (),
            parts,
            body,
            json,
            _held: held,
        }),
        // Admission never lets a signed route through without its caller.
        (Access::Signed(_), None) => Box::pin(async {
            json_response(StatusCode::NOT_FOUND, &json!({ "error": "not found" }))
        }),
    }
}

/// Count an answer (and its refusal, if it is one) and add the headers every answer carries.
fn finish(app: &App, route: Option<&Route>, mut resp: Response, started: Instant) -> Response {
    app.http_metrics.count(
        route.map_or("unknown", |r| r.label),
        resp.status().as_u16(),
        started.elapsed(),
    );
    if let Some(Refused(why)) = resp.extensions().get::<Refused>() {
        app.http_metrics.refused(*why);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    retry_after::ensure(&mut resp);
    for (name, value) in route.map_or(&[][..], |r| r.headers) {
        resp.headers_mut().insert(
            HeaderName::from_static(name),
            HeaderValue::from_static(value),
        );
    }
    resp
}
