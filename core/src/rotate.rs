//! Key rotation (docs/protocol.md §3 "Key rotation"): a self-authenticating record signed by the old
//! and the new key moves name, account, queue and allowlists to the new key in one commit.

use relay_store::RebindOutcome;
use serde_json::{json, Value};

use super::{expect_object, Relay, RelayError, Reply};
use relay_wire::keys::fingerprint;
use relay_wire::records::parse_rotation;

impl Relay {
    /// `POST /v2/relay/rotate {"rotation":{"rec","old_sig","new_sig"}}` → `{"moved": N}`.
    ///
    /// # Errors
    /// 400 bad rotation; 404 old key not enrolled; 409 new key revoked here; 503 store failure.
    pub async fn rotate(&self, body: &Value) -> Reply {
        expect_object(body)?;
        let rot = parse_rotation(body)
            .map_err(|e| RelayError::bad_request(format!("bad rotation: {e}")))?;
        let old = self
            .store
            .enrolment(&rot.old_pub)?
            .filter(|e| e.revoked_at_ms.is_none())
            .ok_or_else(|| RelayError::not_found("old key not enrolled"))?;
        if !old.host_name.eq_ignore_ascii_case(&rot.host) {
            return Err(RelayError::bad_request(
                "bad rotation: host is not the old key's name",
            ));
        }
        if self
            .store
            .enrolment(&rot.new_pub)?
            .is_some_and(|e| e.revoked_at_ms.is_some())
        {
            return Err(RelayError::conflict("new key is revoked"));
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
            RebindOutcome::OldNotEnrolled => Err(RelayError::not_found("old key not enrolled")),
            RebindOutcome::NewRevoked => Err(RelayError::conflict("new key is revoked")),
        }
    }
}
