//! The one request handler: route, check the hop's headers, cap and read the body (its memory
//! reserved as it arrives), check the hop's signature, call the relay rule, and answer JSON with
//! `cache-control: no-store`. Status mapping lives in [`status_code`].

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, Request};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::answer::{
    answer_unread, answer_unread_draining, json_response, json_text_response, retry_later,
};
use super::body::{
    read_capped, BodyError, Refused as BodyRefused, BUSY_DRAIN, MAX_BODY, MAX_SMALL_BODY,
};
use super::client_addr::client_addr;
use super::guard::{HopRefused, Streaming};
use super::hop_gate::Refusal;
use super::metrics::RequestRefusal;
use super::parked;
use super::retry_after;
use super::route::Route;
use super::App;
use relay_core::code::ErrorCode;
use relay_core::enc_ad::EncLookup;
use relay_core::pull::{PullQuery, PullStart};
use relay_core::{parse_json, AuthFailure, HopHeaders, RelayError, Reply, Status};
use relay_wire::hop::signed_path;

/// The status code of a relay status class.
pub(crate) fn status_code(s: Status) -> StatusCode {
    match s {
        Status::BadRequest => StatusCode::BAD_REQUEST,
        Status::Unauthorized => StatusCode::UNAUTHORIZED,
        Status::Forbidden => StatusCode::FORBIDDEN,
        Status::NotFound => StatusCode::NOT_FOUND,
        Status::Conflict => StatusCode::CONFLICT,
        Status::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        Status::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
        Status::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

fn reply_response(r: Reply) -> Response {
    match r {
        Ok(v) => json_response(StatusCode::OK, &v),
        Err(e) => {
            let r = json_response(status_code(e.status), &e.body);
            match refusal_of(&e) {
                Some(why) => marked(r, why),
                None => r,
            }
        }
    }
}

/// A response marked with why it refused the request, for `mbx_relay_refusals_total`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused(pub RequestRefusal);

/// `r` marked [`Refused`] for `why` (replacing an earlier mark).
pub(crate) fn marked(mut r: Response, why: RequestRefusal) -> Response {
    r.extensions_mut().insert(Refused(why));
    r
}

/// The refusal class of a relay error: 401s by the check they failed, 413 and 429 by status.
fn refusal_of(e: &RelayError) -> Option<RequestRefusal> {
    Some(match e.status {
        Status::Unauthorized => match e.auth_failure() {
            Some(AuthFailure::Hop) => RequestRefusal::BadHop,
            Some(AuthFailure::Enrolment) => RequestRefusal::BadEnrolment,
            _ => RequestRefusal::BadSignature,
        },
        Status::TooLarge => RequestRefusal::TooLarge,
        Status::TooManyRequests => RequestRefusal::TooManyOther,
        _ => return None,
    })
}

/// [`reply_response`] for a relay answer that arrives as finished JSON text.
fn text_reply_response(r: Result<Vec<u8>, RelayError>) -> Response {
    match r {
        Ok(text) => json_text_response(StatusCode::OK, text),
        Err(e) => reply_response(Err(e)),
    }
}

/// Largest total size of request header names and values; hosts send a handful of short ones.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Entry point for every request.
pub(crate) async fn handle(app: &Arc<App>, peer: SocketAddr, req: Request) -> Response {
    let started = std::time::Instant::now();
    let route = Route::of(req.method(), req.uri().path());
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len())
        .sum();
    let mut resp = if header_bytes > MAX_HEADER_BYTES {
        answer_unread(
            json_response(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                &json!({ "error": "request headers too large" }),
            ),
            req.into_body(),
        )
    } else {
        match route {
            None => answer_unread(
                json_response(StatusCode::NOT_FOUND, &json!({ "error": "not found" })),
                req.into_body(),
            ),
            Some(r) => dispatch(app, r, peer, req).await,
        }
    };
    if let Some(later) = parked::take(&mut resp) {
        // A waiting pull: finished when its answer is known.
        let app = app.clone();
        return parked::response(async move { finish(&app, route, later.await, started) });
    }
    finish(app, route, resp, started)
}

/// Count an answer (and its refusal, if it is one) and add the headers every answer carries.
fn finish(
    app: &App,
    route: Option<Route>,
    mut resp: Response,
    started: std::time::Instant,
) -> Response {
    app.http_metrics.count(
        route.map_or("unknown", Route::label),
        resp.status().as_u16(),
        started.elapsed(),
    );
    if let Some(Refused(why)) = resp.extensions().get::<Refused>() {
        app.http_metrics.refused(*why);
    }
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    retry_after::ensure(&mut resp);
    if route == Some(Route::PullV2) {
        // Every pull answer says this relay holds `wait` pulls (mbx-relay extension).
        resp.headers_mut()
            .insert(WAIT_MAX_HEADER, HeaderValue::from_static(WAIT_MAX));
    }
    resp
}

/// The header naming the longest `wait` a pull may ask for (mbx-relay extension).
pub const WAIT_MAX_HEADER: &str = "x-mbx-wait-max";
/// Its value: [`relay_core::wake::MAX_WAIT_SECS`] as text.
const WAIT_MAX: &str = "60";
const _: () = assert!(
    relay_core::wake::MAX_WAIT_SECS == 60,
    "WAIT_MAX is its text"
);

fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// `413 {"error":"request body too large"}`.
fn too_large() -> Response {
    json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({ "error": "request body too large" }),
    )
}

/// A 429 with `retry-after`.
fn too_many(text: &str, wait: Duration) -> Response {
    retry_later(StatusCode::TOO_MANY_REQUESTS, text, wait)
}

/// The answer to a body that could not be read; one refused before its end is drained (see
/// [`answer_unread`]).
fn body_refused(e: BodyError, body: Body) -> Response {
    let r = match e {
        BodyError::TooLarge => marked(too_large(), RequestRefusal::BodyTooLarge),
        BodyError::Refused(BodyRefused::AddressBusy) => marked(
            too_many(
                "too many request bytes in flight from this address, retry later",
                retry_after::OVERLOAD,
            ),
            RequestRefusal::BodyPerAddress,
        ),
        BodyError::Refused(BodyRefused::KeyBusy) => marked(
            too_many(
                "too many request bytes in flight for this key, retry later",
                retry_after::OVERLOAD,
            ),
            RequestRefusal::BodyPerKey,
        ),
        BodyError::Refused(BodyRefused::Busy) => {
            let r = retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "server busy, retry later",
                retry_after::OVERLOAD,
            );
            let r = marked(r, RequestRefusal::BodyBudget);
            return answer_unread_draining(r, body, BUSY_DRAIN);
        }
        BodyError::Aborted => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": "request body could not be read" }),
            )
        }
    };
    answer_unread(r, body)
}

/// The answer to a hop the gate refused, marked for the guard's public window; an info call
/// whose hop fails is answered as an unsigned one.
fn hop_refused(app: &App, route: Route, addr: String, refusal: Refusal) -> Response {
    let mut r = match refusal {
        Refusal::Store(e) => return reply_response(Err(e)),
        Refusal::TooManyFailures(wait) => marked(
            too_many(
                "too many failed authentications from this address, retry later",
                wait,
            ),
            RequestRefusal::AuthFailureWindow,
        ),
        Refusal::BadHop if route == Route::Info => reply_response(app.relay.info(None)),
        Refusal::BadHop => reply_response(Err(RelayError::bad_hop())),
    };
    r.extensions_mut().insert(HopRefused(addr));
    r
}

/// An enrolment's answer. At the enrolment cap (`FULL`) a slot frees only when the sweep
/// deletes an idle enrolment (every `--sweep-interval`) or an operator revokes or purges one:
/// `Retry-After` says the sweep interval, not the short backoff.
fn enrol_response(r: Reply, limits: &relay_core::Limits) -> Response {
    let full = r.as_ref().err().and_then(RelayError::code) == Some(ErrorCode::Full.wire());
    let mut resp = reply_response(r);
    if full {
        retry_after::set(&mut resp, limits.sweep_interval);
    }
    resp
}

async fn dispatch(app: &App, route: Route, peer: SocketAddr, req: Request) -> Response {
    let (parts, mut body) = req.into_parts();
    let relay = &app.relay;
    // Info and health take no body; only a signed info call reads one (its hop signs it).
    let cap = if route.public() {
        MAX_SMALL_BODY
    } else {
        MAX_BODY
    };
    let declared = declared_length(&parts.headers);
    if declared.is_some_and(|n| n > cap as u64) {
        return body_refused(BodyError::TooLarge, body);
    }
    let path = parts.uri.path();
    let signed = signed_path(path, parts.uri.query());
    let h = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let hop = HopHeaders {
        host: h("x-mbx-host"),
        key: h("x-mbx-key"),
        ts: h("x-mbx-ts"),
        sig: h("x-mbx-sig"),
        method: parts.method.as_str(),
        path: &signed,
        body: &[], // not read yet: the headers are checked first
    };
    let query = || {
        Query::<HashMap<String, String>>::try_from_uri(&parts.uri)
            .map(|q| q.0)
            .unwrap_or_default()
    };
    match route {
        Route::Health => return health(app).await,
        Route::Info if !hop.present() => return reply_response(relay.info(None)),
        _ => {}
    }
    let addr = client_addr(app.trust_proxy, peer, &parts.headers);
    if route.enrolment_class() {
        if let Err(limited) = relay.check_address_rate(&addr) {
            let mut r = marked(
                reply_response(Err(limited.error)),
                RequestRefusal::EnrolWindow,
            );
            retry_after::set(&mut r, limited.wait);
            return answer_unread(r, body);
        }
    }
    // A hop is checked as far as its headers allow before any body memory is reserved: a
    // caller without a live key and a fresh ts costs a header parse and one store read.
    let check = if route.enrolment_class() {
        None
    } else {
        match app.hop_gate.check_head(relay, &addr, &hop).await {
            Ok(c) => Some(c),
            Err(refusal) => return answer_unread(hop_refused(app, route, addr, refusal), body),
        }
    };
    let key = check.as_ref().and_then(|c| c.share_key());
    let mut reservation = app.bodies.reservation(&addr, key);
    let bytes = match read_capped(&mut body, cap, declared, &mut reservation).await {
        Ok(b) => b,
        Err(e) => {
            // A hop whose body held memory and never arrived whole (cut off, too slow, over
            // the cap) proved nothing: counted like a failed signature.
            let unproven = check.is_some()
                && reservation.held() > 0
                && matches!(e, BodyError::Aborted | BodyError::TooLarge);
            drop(reservation);
            let mut r = body_refused(e, body);
            if unproven {
                app.hop_gate.count_failure(&addr);
                r.extensions_mut().insert(HopRefused(addr));
            }
            return r;
        }
    };
    let (caller, bytes) = match check {
        None => (None, bytes),
        Some(check) => match app.hop_gate.verify(&addr, check, bytes).await {
            (Ok(c), bytes) => (Some(c), bytes),
            (Err(refusal), _) => return hop_refused(app, route, addr, refusal),
        },
    };
    let Some(caller) = caller else {
        return reply_response(match route {
            Route::Challenge => match parse_json(&bytes) {
                Ok(v) => relay.challenge(&v).await,
                Err(e) => Err(e),
            },
            Route::Enrol => match parse_json(&bytes) {
                Ok(v) => return enrol_response(relay.enrol(&v).await, relay.limits()),
                Err(e) => Err(e),
            },
            Route::Rotate => match parse_json(&bytes) {
                Ok(v) => relay.rotate(&v).await,
                Err(e) => Err(e),
            },
            _ => Err(RelayError::not_found("not found")),
        });
    };
    relay.note_seen(&caller.key); // a hop-authenticated request: an in-memory note (issue 13)
    if route == Route::Info {
        return reply_response(relay.info(Some(&caller)));
    }
    if route == Route::Events {
        let streaming = parts.extensions.get::<Streaming>();
        return super::events::response(app.relay.clone(), caller.key, streaming);
    }
    if route == Route::PushV2 {
        // The body is read as a borrowed tree and the results arrive as finished JSON text
        // (no value tree: the push hot path).
        return text_reply_response(relay.push_json(&caller, &bytes).await);
    }
    let needs_json = matches!(
        route,
        Route::EncKeyPut
            | Route::EncKeyPutV2
            | Route::Senders
            | Route::AckV2
            | Route::PushV1
            | Route::AckV1
    );
    let v = if needs_json {
        match parse_json(&bytes) {
            Ok(v) => v,
            Err(e) => return reply_response(Err(e)),
        }
    } else {
        Value::Null
    };
    if route == Route::PullV2 {
        // The page arrives as finished JSON text (no value tree: the drain hot path).
        let q = query();
        // A pull may wait up to a minute: hold nothing of the request meanwhile (its head,
        // body and body reservation are a waiter's largest cost).
        drop((parts, body, reservation, bytes));
        let pq = PullQuery {
            after: q.get("after").map(String::as_str),
            limit: q.get("limit").map(String::as_str),
            epoch: q.get("epoch").map(String::as_str),
            wait: q.get("wait").map(String::as_str),
        };
        return match relay.pull_start(&caller, pq).await {
            Ok(PullStart::Answer(text)) => text_reply_response(Ok(text)),
            Ok(PullStart::Wait(w)) => {
                // Parked as a small future: the request's own futures end here.
                let relay = relay.clone();
                parked::response(async move { text_reply_response(relay.pull_wait(w).await) })
            }
            Err(e) => text_reply_response(Err(e)),
        };
    }
    reply_response(match route {
        Route::EncKeyPut => relay.put_enc_ad(&caller, &v).await,
        Route::EncKeyPutV2 => relay.put_enc_ad_v2(&caller, &v).await,
        Route::EncKeyGetV2 => {
            let q = query();
            relay.get_enc_ad(&caller, q.get("pubkey").map(|k| EncLookup::Key(k)))
        }
        Route::EncKeyGetV1 => {
            let q = query();
            let lookup = q
                .get("pubkey")
                .map(|k| EncLookup::Key(k))
                .or_else(|| q.get("host").map(|n| EncLookup::Name(n)));
            relay.get_enc_ad(&caller, lookup)
        }
        Route::Senders => relay.put_sender_list(&caller, &v).await,
        Route::AckV2 => relay.ack(&caller, &v).await,
        Route::PushV1 => relay.push_v1(&caller, &v).await,
        Route::PullV1 => {
            let q = query();
            relay
                .pull_v1(&caller, q.get("after").map(String::as_str))
                .await
        }
        Route::AckV1 => relay.ack_v1(&caller, &v).await,
        _ => Err(RelayError::not_found("not found")),
    })
}

/// Where a recent durable write proves the store writable, reuse it; else write the heartbeat.
const HEALTH_FRESH_MS: u64 = 5_000;
/// Longest `/health` waits for its heartbeat write: a store that hangs (a database with no
/// writable node) answers 503 well within `mbx-relay health`'s 5 s probe timeout.
const HEALTH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /health`: 200 only while the store is open and writable.
async fn health(app: &App) -> Response {
    let relay = &app.relay;
    let (last_ok, failed) = relay.metrics.write_health();
    let now = relay_store::Clock::now_ms(&relay_store::SystemClock);
    if !failed && now.saturating_sub(last_ok) <= HEALTH_FRESH_MS {
        return json_response(StatusCode::OK, &json!({ "ok": true }));
    }
    match tokio::time::timeout(HEALTH_DEADLINE, relay.heartbeat()).await {
        Ok(Ok(())) => json_response(StatusCode::OK, &json!({ "ok": true })),
        Ok(Err(e)) => json_response(StatusCode::SERVICE_UNAVAILABLE, &e.body),
        Err(_) => {
            tracing::warn!(
                ?HEALTH_DEADLINE,
                "health: the store did not confirm a write in time"
            );
            json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "error": relay_core::error::STORE_UNAVAILABLE }),
            )
        }
    }
}
