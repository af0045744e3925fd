//! The one error type of relay operations: a protocol status class plus the JSON body docs/protocol.md
//! prescribes. The HTTP adapter maps [`Status`] to a status code in one place.

use serde_json::{json, Value};

/// The one answer text of a store failure (503): fixed, so no internal detail reaches clients.
pub const STORE_UNAVAILABLE: &str = "store unavailable, retry later";

/// The answer text of any failed hop check (docs/protocol.md §2).
const BAD_HOP: &str = "bad relay hop";
/// The 401 texts of a failed enrolment proof.
pub(crate) const NO_PENDING_CHALLENGE: &str = "no pending enrolment challenge";
pub(crate) const BAD_ENROLMENT_SIGNATURE: &str = "bad enrolment signature";

/// Which check a 401 failed, for the refusal metrics (from the texts above, so a changed text
/// cannot silently move a refusal to another class).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// A relay hop's headers or signature.
    Hop,
    /// An enrolment's challenge proof.
    Enrolment,
    /// Another signature (an envelope, a list, an ad).
    Signature,
}

/// The status classes the protocol answers with (no HTTP types here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// 400: the request is malformed.
    BadRequest,
    /// 401: a signature or proof did not verify.
    Unauthorized,
    /// 403: the caller may not do this (not enrolled, revoked, not allowed).
    Forbidden,
    /// 404: nothing by that name or key.
    NotFound,
    /// 409: it contradicts what the relay already holds.
    Conflict,
    /// 413: over a size limit.
    TooLarge,
    /// 429: a rate window or capacity is used up; try later.
    TooManyRequests,
    /// 503: the store cannot serve now (the caller may retry).
    Unavailable,
}

/// A refused request: its status class and the exact JSON body to answer.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayError {
    /// The status class the HTTP layer maps to a code.
    pub status: Status,
    /// The JSON body answered as is.
    pub body: Value,
}

impl RelayError {
    /// `{"error": msg}` with the given status.
    pub fn new(status: Status, msg: impl Into<String>) -> Self {
        RelayError {
            status,
            body: json!({ "error": msg.into() }),
        }
    }
    pub(crate) fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(Status::BadRequest, msg)
    }
    pub(crate) fn unauthorized(msg: impl Into<String>) -> Self {
        Self::new(Status::Unauthorized, msg)
    }
    /// 404 `{"error": msg}`.
    pub fn not_found(msg: impl Into<String>) -> Self {
        Self::new(Status::NotFound, msg)
    }
    /// 409 `{"error": msg}`.
    pub fn conflict(msg: impl Into<String>) -> Self {
        Self::new(Status::Conflict, msg)
    }
    /// 503 `{"error": msg}`.
    pub fn unavailable(msg: impl Into<String>) -> Self {
        Self::new(Status::Unavailable, msg)
    }
    /// The answer to any failed hop check (docs/protocol.md §2).
    pub fn bad_hop() -> Self {
        Self::unauthorized(BAD_HOP)
    }
    /// Which check this 401 failed; `None` for any other status.
    pub fn auth_failure(&self) -> Option<AuthFailure> {
        (self.status == Status::Unauthorized).then(|| match self.message() {
            BAD_HOP => AuthFailure::Hop,
            NO_PENDING_CHALLENGE | BAD_ENROLMENT_SIGNATURE => AuthFailure::Enrolment,
            _ => AuthFailure::Signature,
        })
    }
    /// The per-address enrolment rate window is exhausted (the reference relay's text).
    pub(crate) fn rate_limited() -> Self {
        Self::new(
            Status::TooManyRequests,
            "too many enrolment calls; retry in a minute",
        )
    }
    /// A store failure: the fixed [`STORE_UNAVAILABLE`] text (the cause goes to the log only).
    pub(crate) fn store_unavailable() -> Self {
        Self::unavailable(STORE_UNAVAILABLE)
    }
    /// The error message, for logs (never contains wire bytes or keys).
    pub fn message(&self) -> &str {
        self.body.get("error").and_then(Value::as_str).unwrap_or("")
    }
}

impl From<relay_store::StoreError> for RelayError {
    /// Store failures are never a success: 503 with a fixed text. The cause (paths, engine
    /// messages, errno) is logged, never answered: `/health` and every route reach this.
    fn from(e: relay_store::StoreError) -> Self {
        tracing::error!(error = %e, "store operation failed");
        Self::store_unavailable()
    }
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.status, self.message())
    }
}

impl std::error::Error for RelayError {}

/// Shorthand for relay results whose success is a JSON body.
pub type Reply = Result<Value, RelayError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_failure_answers_a_fixed_text_without_its_cause() {
        let cause = relay_store::StoreError::Io {
            context: "writing /secret/path/db/journal".into(),
            source: std::io::Error::other("No space left on device"),
        };
        let e = RelayError::from(cause);
        assert_eq!(e.status, Status::Unavailable);
        assert_eq!(e.body, json!({ "error": STORE_UNAVAILABLE }));
    }

    #[test]
    fn a_401_is_classed_by_the_check_it_failed_and_no_other_status_is() {
        assert_eq!(RelayError::bad_hop().auth_failure(), Some(AuthFailure::Hop));
        for text in [NO_PENDING_CHALLENGE, BAD_ENROLMENT_SIGNATURE] {
            let e = RelayError::unauthorized(text);
            assert_eq!(e.auth_failure(), Some(AuthFailure::Enrolment));
        }
        let other = RelayError::unauthorized("bad envelope signature");
        assert_eq!(other.auth_failure(), Some(AuthFailure::Signature));
        let not_401 = RelayError::new(Status::BadRequest, BAD_HOP);
        assert_eq!(not_401.auth_failure(), None);
    }
}
