//! Key rotation (docs/protocol.md §3 "Key rotation"): a self-authenticating record signed by the old
//! and the new key moves name, account, queue and allowlists to the new key in one commit.

use relay_store::RebindOutcome;
use serde_json::{json, Value};

use super::{Relay, RelayError, Reply};
use relay_wire::keys::fingerprint;
use relay_wire::records::{check_rotation, rotation_old_pub};

/// The reference relay's refusal texts (older hosts match on them); the 400 texts are
/// `relay_wire::records::RotationRefusal::text`.
const NOT_ENROLLED: &str = "the rotated key is not enrolled here";
const NEW_KEY_REVOKED: &str = "the new key was revoked here";

impl Relay {
    /// `POST /v2/relay/rotate {"rotation":{"rec","old_sig","new_sig"}}` → `{"moved": N}`. The
    /// reference relay's order: the old key (`rec.old_pub`) must be enrolled and live, then the
    /// record is checked against it ([`check_rotation`]), then the new key must not be revoked.
    ///
    /// # Errors
    /// 404 no `rotation`, or its old key unknown or revoked; 400 a refused record (its text);
    /// 409 the new key was revoked here; 503 store failure.
    pub async fn rotate(&self, body: &Value) -> Reply {
        if body.is_null() {
            return Err(RelayError::bad_request("body must be a JSON object"));
        }
        let rotation = body.get("rotation");
        let live_old = match rotation_old_pub(rotation) {
            Some(k) => self.store.enrolment(&k)?,
            None => None,
        }
        .filter(|e| e.revoked_at_ms.is_none());
        let (Some(rotation), Some(old)) = (rotation, live_old) else {
            return Err(RelayError::not_found(NOT_ENROLLED));
        };
        let rot = check_rotation(rotation, &old.host_pubkey, &old.host_name)
            .map_err(|why| RelayError::bad_request(why.text()))?;
        if self
            .store
            .enrolment(&rot.new_pub)?
            .is_some_and(|e| e.revoked_at_ms.is_some())
        {
            return Err(RelayError::conflict(NEW_KEY_REVOKED));
        }
        match self
            .write(self.store.rebind(rot.old_pub, rot.new_pub))
            .await?
        {
            RebindOutcome::Moved { moved } => {
                tracing::info!(
                    host = %old.host_name,
                    old = %fingerprint(&rot.old_pub),
                    new = %fingerprint(&rot.new_pub),
                    moved,
                    "host key rotated"
                );
                // The old key is revoked: its live delivery ends now.
                self.end_waiters(&rot.old_pub, true);
                // Rotating onto a key enrolled already frees one live enrolment.
                self.watch_enrolments();
                Ok(json!({ "moved": moved }))
            }
            RebindOutcome::OldNotEnrolled => Err(RelayError::not_found(NOT_ENROLLED)),
            RebindOutcome::NewRevoked => Err(RelayError::conflict(NEW_KEY_REVOKED)),
        }
    }
}
