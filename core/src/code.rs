//! The machine-readable `code` field some error answers carry (docs/protocol.md §3 "Enrolment" and
//! "Ack"): a closed set, with its wire text in one place.

use serde_json::{json, Value};

use super::{RelayError, Status};

/// Every `code` the relay sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Enrolment fields that are present but malformed.
    BadRequest,
    /// The host key was revoked here (rotation); re-enrolling never clears it.
    Revoked,
    /// The name is already used by another live key inside the same proven account.
    NameTaken,
    /// Live enrolments are at their cap.
    Full,
    /// The enrolment authority refused, or could not answer.
    Denied,
    /// An ack whose `through` is not an integer between 0 and the head.
    BadAck,
    /// An ack for another epoch than the current one (0.5.7+ hosts decide by it).
    Epoch,
}

impl ErrorCode {
    /// The code as sent on the wire.
    pub const fn wire(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::Revoked => "REVOKED",
            ErrorCode::NameTaken => "NAME_TAKEN",
            ErrorCode::Full => "FULL",
            ErrorCode::Denied => "DENIED",
            ErrorCode::BadAck => "BAD_ACK",
            ErrorCode::Epoch => "EPOCH",
        }
    }
}

impl RelayError {
    /// `{"error": msg, "code": CODE}` with the given status.
    pub(crate) fn coded(status: Status, code: ErrorCode, msg: impl Into<String>) -> Self {
        RelayError {
            status,
            body: json!({ "error": msg.into(), "code": code.wire() }),
        }
    }

    /// The `code` of this answer, if it carries one.
    pub fn code(&self) -> Option<&str> {
        self.body.get("code").and_then(Value::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_their_wire_text() {
        let all = [
            (ErrorCode::BadRequest, "BAD_REQUEST"),
            (ErrorCode::Revoked, "REVOKED"),
            (ErrorCode::NameTaken, "NAME_TAKEN"),
            (ErrorCode::Full, "FULL"),
            (ErrorCode::Denied, "DENIED"),
            (ErrorCode::BadAck, "BAD_ACK"),
            (ErrorCode::Epoch, "EPOCH"),
        ];
        for (c, w) in all {
            assert_eq!(c.wire(), w);
            let e = RelayError::coded(Status::Forbidden, c, "x");
            assert_eq!(e.body, json!({"error": "x", "code": w}));
            assert_eq!(e.code(), Some(w));
        }
    }
}
