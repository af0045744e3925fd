//! JSON answers built the same way wherever the HTTP layer answers (the endpoints, admission's
//! refusals, the public window), and the status code of each relay answer.

use std::time::Duration;

use axum::body::{Body, HttpBody as _};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::account::Refused as MemoryRefused;
use super::body::{drain, Drain, FULL_DRAIN};
use super::metrics::RequestRefusal;
use relay_core::{AuthFailure, RelayError, Reply, Status};

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

/// A relay answer as a response; a refusal is marked with why (see [`Refused`]).
pub(crate) fn reply_response(r: Reply) -> Response {
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

/// [`reply_response`] for a relay answer that arrives as finished JSON text.
pub(crate) fn text_reply_response(r: Result<Vec<u8>, RelayError>) -> Response {
    match r {
        Ok(text) => json_text_response(StatusCode::OK, text),
        Err(e) => reply_response(Err(e)),
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

/// `body` as a JSON response.
pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    json_text_response(status, body.to_string().into_bytes())
}

/// A response whose body is already JSON text.
pub(crate) fn json_text_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `{"error": text}` with `retry-after` (see [`super::retry_after`]): the answer of every limit
/// a client may wait out.
pub(crate) fn retry_later(status: StatusCode, text: &str, wait: Duration) -> Response {
    let mut r = json_response(status, &json!({ "error": text }));
    super::retry_after::set(&mut r, wait);
    r
}

/// `r`, given before `body` was read to its end: the rest of the body is drained in the
/// background and the connection closed after the answer (docs/protocol.md §3), so a client still
/// writing reads the answer rather than a reset. A body already at its end changes nothing.
pub(crate) fn answer_unread(r: Response, body: Body) -> Response {
    answer_unread_draining(r, body, FULL_DRAIN)
}

/// [`answer_unread`] draining within `bounds`.
pub(crate) fn answer_unread_draining(mut r: Response, body: Body, bounds: Drain) -> Response {
    if body.is_end_stream() {
        return r;
    }
    drain(body, bounds);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}

/// The answer when the memory account has no room for a request: 429 for its address's or
/// key's share, 503 for the shared budget; marked with why.
pub(crate) fn memory_refused(r: MemoryRefused) -> Response {
    let (status, text, why) = match r {
        MemoryRefused::AddressBusy => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many request bytes in flight from this address, retry later",
            RequestRefusal::BodyPerAddress,
        ),
        MemoryRefused::KeyBusy => (
            StatusCode::TOO_MANY_REQUESTS,
            "too many request bytes in flight for this key, retry later",
            RequestRefusal::BodyPerKey,
        ),
        MemoryRefused::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            "server busy, retry later",
            RequestRefusal::BodyBudget,
        ),
    };
    marked(retry_later(status, text, super::retry_after::OVERLOAD), why)
}
