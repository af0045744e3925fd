//! JSON answers built the same way wherever the HTTP layer answers (the handler, and the
//! guard's refusals given before the handler).

use std::time::Duration;

use axum::body::{Body, HttpBody as _};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::body::{drain, Drain, FULL_DRAIN};

/// `body` as a JSON response.
pub(super) fn json_response(status: StatusCode, body: &Value) -> Response {
    json_text_response(status, body.to_string().into_bytes())
}

/// A response whose body is already JSON text.
pub(super) fn json_text_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = (status, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `{"error": text}` with `retry-after` (see [`super::retry_after`]): the answer of every limit
/// a client may wait out.
pub(super) fn retry_later(status: StatusCode, text: &str, wait: Duration) -> Response {
    let mut r = json_response(status, &json!({ "error": text }));
    super::retry_after::set(&mut r, wait);
    r
}

/// `r`, given before `body` was read to its end: the rest of the body is drained in the
/// background and the connection closed after the answer (docs/protocol.md §3), so a client still
/// writing reads the answer rather than a reset. A body already at its end changes nothing.
pub(super) fn answer_unread(r: Response, body: Body) -> Response {
    answer_unread_draining(r, body, FULL_DRAIN)
}

/// [`answer_unread`] draining within `bounds`.
pub(super) fn answer_unread_draining(mut r: Response, body: Body, bounds: Drain) -> Response {
    if body.is_end_stream() {
        return r;
    }
    drain(body, bounds);
    r.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    r
}
