//! The one admission step every request passes before its handler: the body cap against the
//! declared length, the enrolment window, the hop's headers (a caller without a live key and a
//! fresh ts costs a header parse and one store read, before any body memory is held), the body
//! read under its memory reservation ([`super::body`]), the hop's signature over it
//! ([`super::hop_gate`]), then the key's share charged (only now that the key proved itself),
//! the parse cost charged before any parse ([`super::parse_cost`]: what the route's way of
//! reading its body holds), and the JSON parse for rows that want one (large bodies off the
//! async workers, [`super::off_worker`]). Every byte held is in one memory account
//! ([`super::account`]). What it admits is the verified caller (or none, for open routes), the
//! bytes and the memory they hold; what it refuses is answered here, with the client address
//! when a signed hop failed (the pipeline counts it in the public window).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::{json, Value};

use super::answer::{
    answer_unread, answer_unread_draining, json_response, marked, memory_refused, reply_response,
    retry_later,
};
use super::body::{read_capped, BodyError, Held, Refused as BodyRefused, BUSY_DRAIN};
use super::call::Call;
use super::client_addr::client_addr;
use super::hop_gate::Refusal;
use super::metrics::RequestRefusal;
use super::off_worker::OffWorker;
use super::parse_cost::{parse_cost, Parse};
use super::route::{Access, Route};
use super::{retry_after, App};
use relay_core::{parse_json, Caller, HopHeaders, RelayError};
use relay_wire::hop::signed_path;

/// A request let through to its handler.
pub(crate) struct Admitted {
    /// The verified caller of a signed call; `None` for open and enrolment routes.
    pub(crate) caller: Option<Caller>,
    pub(crate) parts: Parts,
    pub(crate) body: Vec<u8>,
    /// The body parsed, for [`Parse::Value`] rows.
    pub(crate) json: Value,
    pub(crate) held: Held,
}

/// A request answered at admission.
pub(crate) struct Rejected {
    pub(crate) response: Response,
    /// The client address, when the request's signed hop failed.
    pub(crate) failed_hop: Option<String>,
}

impl From<Response> for Rejected {
    fn from(response: Response) -> Self {
        Rejected {
            response,
            failed_hop: None,
        }
    }
}

/// Admit `req` for `route` (see the module doc).
///
/// # Errors
/// The answer to a request refused before its handler.
pub(crate) async fn admit(
    app: &Arc<App>,
    route: &Route,
    peer: SocketAddr,
    req: Request,
) -> Result<Admitted, Rejected> {
    let (parts, mut body) = req.into_parts();
    let relay = &app.relay;
    let cap = route.body_cap;
    let declared = declared_length(&parts.headers);
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(body_refused(BodyError::TooLarge, body).into());
    }
    let signed = signed_path(parts.uri.path(), parts.uri.query());
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
    let addr = client_addr(app.trust_proxy, peer, &parts.headers);
    let unsigned = match route.access {
        // The body is never read: nothing is held.
        Access::Open(_) => true,
        Access::SignedOrOpen(..) => !hop.present(),
        Access::Enrolment(_) | Access::Signed(_) => false,
    };
    if unsigned {
        return Ok(Admitted {
            caller: None,
            held: app.memory.reservation(&addr),
            parts,
            body: Vec::new(),
            json: Value::Null,
        });
    }
    if route.enrolment_class() {
        if let Err(limited) = relay.check_address_rate(&addr) {
            let mut r = marked(
                reply_response(Err(limited.error)),
                RequestRefusal::EnrolWindow,
            );
            retry_after::set(&mut r, limited.wait);
            return Err(answer_unread(r, body).into());
        }
    }
    // A hop is checked as far as its headers allow before any body memory is reserved.
    let check = if route.enrolment_class() {
        None
    } else {
        match app.hop_gate.check_head(relay, &addr, &hop).await {
            Ok(c) => Some(c),
            Err(refusal) => {
                let refused = hop_refused(app, route, parts, &addr, refusal).await;
                return Err(Rejected {
                    response: answer_unread(refused.response, body),
                    failed_hop: refused.failed_hop,
                });
            }
        }
    };
    // Counted against the address only: the key is charged once it proved itself (below).
    let mut held = app.memory.reservation(&addr);
    let bytes = match read_capped(&mut body, cap, declared, &mut held).await {
        Ok(b) => b,
        Err(e) => {
            // A hop whose body held memory and never arrived whole (cut off, too slow, over
            // the cap) proved nothing: counted like a failed signature.
            let unproven = check.is_some()
                && held.held() > 0
                && matches!(e, BodyError::Aborted | BodyError::TooLarge);
            drop(held);
            let response = body_refused(e, body);
            if unproven {
                app.hop_gate.count_failure(&addr);
                return Err(Rejected {
                    response,
                    failed_hop: Some(addr),
                });
            }
            return Err(response.into());
        }
    };
    let (caller, bytes) = match check {
        None => (None, bytes),
        Some(check) => match app
            .hop_gate
            .verify(&app.off_worker, &addr, check, bytes)
            .await
        {
            (Ok(c), bytes) => {
                relay.note_seen(&c.key); // a hop-authenticated request: an in-memory note
                (Some(c), bytes)
            }
            (Err(refusal), _) => return Err(hop_refused(app, route, parts, &addr, refusal).await),
        },
    };
    if let Some(c) = &caller {
        if let Err(r) = held.prove(c.key) {
            return Err(body_refused(r.into(), body).into());
        }
    }
    // What parsing the body will hold, charged before any parse (here, or by the handler of a
    // push, which reads its own tree).
    let cost = parse_cost(route.parse, &bytes, relay.limits().max_item_bytes);
    if cost > 0 {
        if let Err(r) = held.grow_to(held.held().saturating_add(cost)).await {
            return Err(body_refused(r.into(), body).into());
        }
    }
    let json = if route.parse == Parse::Value {
        match parse(&app.off_worker, bytes).await {
            (Ok(v), b) => (v, b),
            (Err(e), _) => return Err(reply_response(Err(e)).into()),
        }
    } else {
        (Value::Null, bytes)
    };
    let (json, bytes) = json;
    Ok(Admitted {
        caller,
        parts,
        body: bytes,
        json,
        held,
    })
}

/// `bytes` parsed as JSON (on `pool`, off the async workers, when large); the bytes come back.
async fn parse(pool: &OffWorker, bytes: Vec<u8>) -> (Result<Value, RelayError>, Vec<u8>) {
    pool.over(bytes, parse_json).await
}

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

/// The answer to a body that could not be read; one refused before its end is drained (see
/// [`answer_unread`]).
fn body_refused(e: BodyError, body: Body) -> Response {
    let r = match e {
        BodyError::TooLarge => marked(too_large(), RequestRefusal::BodyTooLarge),
        BodyError::Refused(BodyRefused::Busy) => {
            let r = memory_refused(BodyRefused::Busy);
            return answer_unread_draining(r, body, BUSY_DRAIN);
        }
        BodyError::Refused(r) => memory_refused(r),
        BodyError::Aborted => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({ "error": "request body could not be read" }),
            )
        }
    };
    answer_unread(r, body)
}

/// The answer to a hop the gate refused, with the address for the public window (a store
/// failure is not the client's: not counted). A route open to unsigned callers answers a hop
/// that fails as an unsigned call.
async fn hop_refused(
    app: &Arc<App>,
    route: &Route,
    parts: Parts,
    addr: &str,
    refusal: Refusal,
) -> Rejected {
    let response = match refusal {
        Refusal::Store(e) => return reply_response(Err(e)).into(),
        Refusal::TooManyFailures(wait) => marked(
            retry_later(
                StatusCode::TOO_MANY_REQUESTS,
                "too many failed authentications from this address, retry later",
                wait,
            ),
            RequestRefusal::AuthFailureWindow,
        ),
        Refusal::BadHop => match route.access {
            Access::SignedOrOpen(_, open) => {
                open(Call {
                    app: app.clone(),
                    who: (),
                    _held: app.memory.reservation(addr),
                    parts,
                    body: Vec::new(),
                    json: Value::Null,
                })
                .await
            }
            _ => reply_response(Err(RelayError::bad_hop())),
        },
    };
    Rejected {
        response,
        failed_hop: Some(addr.to_owned()),
    }
}
