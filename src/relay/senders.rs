//! Sender allowlists (PROTOCOL.md §3 "Sender allowlist"): a target's signed list of the sender
//! keys it accepts; once stored, pushes from other keys are refused.

use relay_keyspace::{Key32, SenderList, SenderListOutcome};
use serde_json::{json, Value};

use super::{Relay, RelayError, Reply};
use crate::wire::records::{parse_sender_list, RecordError};

impl Relay {
    /// `POST /v2/relay/senders {"list","sig"}` (the caller is authenticated by its hop).
    ///
    /// # Errors
    /// 400 malformed or future `iat`; 401 bad signature; 409 an equal or newer list is stored.
    pub async fn put_sender_list(&self, body: &Value) -> Reply {
        let (rec, sig) = parse_sender_list(body, self.now_ms()).map_err(|e| match e {
            RecordError::Malformed(why) => {
                RelayError::bad_request(format!("bad sender list: {why}"))
            }
            RecordError::FutureIat => RelayError::bad_request("sender list iat is in the future"),
            RecordError::BadSignature => RelayError::unauthorized("bad signature"),
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
            SenderListOutcome::NotNewer => Err(RelayError::conflict(
                "an equal or newer sender list is stored",
            )),
        }
    }

    /// Whether `target`'s allowlist (if any) admits `sender`.
    ///
    /// # Errors
    /// 503 store failure.
    pub fn sender_accepted(&self, target: &Key32, sender: &Key32) -> Result<bool, RelayError> {
        Ok(match self.store.sender_list(target)? {
            None => true,
            Some(list) => list.senders.iter().any(|s| s == sender),
        })
    }
}
