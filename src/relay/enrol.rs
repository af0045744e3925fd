//! Host-key challenge enrolment (PROTOCOL.md §3 "Enrolment"), the default enrolment authority.

use relay_keyspace::{EnrolOutcome, EnrolRequest};
use serde_json::{json, Value};

use super::challenge::IssueError;
use super::{expect_object, str_field, Relay, RelayError, Reply, Status};
use crate::wire::keys::{fingerprint, parse_pubkey, verify_canonical};
use crate::wire::names::{is_host_name, is_owner_fp};
use crate::wire::records::enrol_statement;

/// The authority name and rank recorded for host-key enrolments (the weakest).
pub const HOST_KEY_AUTHORITY: &str = "host-key";
pub const HOST_KEY_RANK: u8 = 0;

impl Relay {
    /// `POST /v1/relay/challenge {"host","pubkey"}` → `{"challenge"}`.
    ///
    /// # Errors
    /// 400 bad fields; 503 when too many challenges are open.
    pub fn challenge(&self, body: &Value) -> Reply {
        let obj = expect_object(body)?;
        let host = str_field(obj, "host")?;
        if !is_host_name(host) {
            return Err(RelayError::bad_request("bad host"));
        }
        let pk = str_field(obj, "pubkey")
            .ok()
            .and_then(parse_pubkey)
            .ok_or_else(|| RelayError::bad_request("bad pubkey"))?;
        match self.challenges.issue(pk, self.now_ms()) {
            Ok(challenge) => Ok(json!({ "challenge": challenge })),
            Err(IssueError::Full) => Err(RelayError::unavailable(
                "too many open challenges, retry later",
            )),
        }
    }

    /// `POST /v1/relay/enrol {"host","pubkey","owner_fp","sig"}` → `{"ok":true}`.
    ///
    /// # Errors
    /// 400 bad fields; 401 no pending challenge or bad signature; 403 revoked; 409 name taken in
    /// the account; 503 capacity or store failure.
    pub async fn enrol(&self, body: &Value) -> Reply {
        let obj = expect_object(body)?;
        let host = str_field(obj, "host")?;
        if !is_host_name(host) {
            return Err(RelayError::bad_request("bad host"));
        }
        let pubkey = str_field(obj, "pubkey")?;
        let pk = parse_pubkey(pubkey).ok_or_else(|| RelayError::bad_request("bad pubkey"))?;
        let owner_fp = str_field(obj, "owner_fp")?;
        if !is_owner_fp(owner_fp) {
            return Err(RelayError::bad_request("bad owner_fp"));
        }
        let sig = str_field(obj, "sig")?;
        let challenge = self
            .challenges
            .pending(&pk, self.now_ms())
            .ok_or_else(|| RelayError::unauthorized("no pending challenge"))?;
        if !verify_canonical(
            &pk,
            &enrol_statement(&challenge, host, pubkey, owner_fp),
            sig,
        ) {
            return Err(RelayError::unauthorized("bad signature"));
        }
        let outcome = self
            .write(self.store.enrol(EnrolRequest {
                host_pubkey: pk,
                host_name: host.to_owned(),
                owner_fp: owner_fp.to_owned(),
                account: None,
                authorized_by: HOST_KEY_AUTHORITY.to_owned(),
                authority_rank: HOST_KEY_RANK,
                max_live: self.limits.max_enrolments,
            }))
            .await?;
        match outcome {
            EnrolOutcome::Enrolled | EnrolOutcome::AlreadyEnrolled => {
                self.challenges.consume(&pk, &challenge);
                if outcome == EnrolOutcome::Enrolled {
                    tracing::info!(host = %host, key = %fingerprint(&pk), "host enrolled");
                }
                Ok(json!({ "ok": true }))
            }
            EnrolOutcome::Revoked => Err(RelayError::new(Status::Forbidden, "host key is revoked")),
            EnrolOutcome::NameTaken => Err(RelayError::conflict(
                "host name already used in this account",
            )),
            EnrolOutcome::Capacity => Err(RelayError::unavailable("enrolment capacity reached")),
        }
    }
}
