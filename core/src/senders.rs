//! Sender allowlists (docs/protocol.md §3 "Sender allowlist"): a target's signed list of the sender
//! keys it accepts; once stored, pushes from other keys are refused.

use relay_store::{SenderList, SenderListOutcome};
use serde_json::{json, Value};

use super::{Caller, Relay, RelayError, Reply};
use relay_wire::records::{parse_sender_list, RecordError};

/// docs/protocol.md §3 texts, as the reference sends them.
const BAD_LIST: &str = "bad sender list";
const FUTURE_IAT: &str = "sender list iat is in the future";
const NOT_SIGNED: &str = "sender list is not signed by the target";
const NOT_NEWER: &str = "a newer sender list is already stored";

impl Relay {
    /// `POST /v2/relay/senders {"list","sig"}`: the caller (authenticated by its hop) stores
    /// its own allowlist; a list naming any other `host_pubkey` is refused, signed or not.
    ///
    /// # Errors
    /// 400 malformed, another key's, over 64 KiB canonical, or future `iat`; 401 bad signature;
    /// 409 an equal or newer list is stored.
    pub async fn put_sender_list(&self, caller: &Caller, body: &Value) -> Reply {
        let (rec, sig) = parse_sender_list(body, self.now_ms(), &caller.key).map_err(|e| {
            tracing::debug!(why = %e, "sender list refused");
            match e {
                RecordError::Malformed(_) => RelayError::bad_request(BAD_LIST),
                RecordError::FutureIat => RelayError::bad_request(FUTURE_IAT),
                RecordError::BadSignature => RelayError::unauthorized(NOT_SIGNED),
            }
        })?;
        let list = SenderList {
            target: rec.host_pubkey,
            senders: rec.senders,
            iat_ms: rec.iat_ms,
            record: rec.canonical.into_bytes(),
            sig,
        };
        match self.write(self.store.put_sender_list(list)).await? {
            SenderListOutcome::Stored => Ok(json!({ "ok": true })),
            SenderListOutcome::NotNewer => Err(RelayError::conflict(NOT_NEWER)),
        }
    }
}
