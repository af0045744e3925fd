//! Enrolment (docs/protocol.md §3 "Enrolment"): the host-key challenge, then the signed enrol call,
//! which the relay's [`EnrolmentAuthority`](super::authority::EnrolmentAuthority) must allow.
//! Texts, statuses and codes are the reference relay's.

use relay_store::{ChallengeIssue, DenySubject, EnrolOutcome, EnrolRequest, InviteClaim};
use serde_json::{json, Map, Value};

use super::authority::{
    denied_text, settle_then_ask, AuthorityRequest, Decision, DENY_LIST_REASON,
    INVITE_REFUSED_REASON, UNAVAILABLE_REASON,
};
use super::challenge::new_challenge;
use super::code::ErrorCode;
use super::config::CHALLENGE_LIFETIME;
use super::error::{BAD_ENROLMENT_SIGNATURE, NO_PENDING_CHALLENGE};
use super::invite::NO_INVITE_REASON;
use super::{Relay, RelayError, Reply, Status};
use relay_wire::keys::{fingerprint, parse_pubkey, verify_canonical};
use relay_wire::names::{is_host_name, is_owner_fp};
use relay_wire::records::enrol_statement;

/// Every refusal of the two enrolment calls, with its status, text and code in one place.
enum Refusal<'a> {
    /// Challenge: `host` or `pubkey` missing or empty.
    HostAndPubkeyRequired,
    BadHostName,
    BadHostKey,
    TooManyChallenges,
    /// Enrol: a field missing or empty (`owner_fp` may be empty, not missing).
    Incomplete,
    BadFields,
    NoPendingChallenge,
    BadSignature,
    Denied(Option<&'a str>),
    Revoked,
    NameTaken(&'a str),
    Full,
}

impl From<Refusal<'_>> for RelayError {
    fn from(r: Refusal<'_>) -> Self {
        use Refusal::*;
        match r {
            HostAndPubkeyRequired => RelayError::bad_request("host and pubkey required"),
            BadHostName => RelayError::bad_request("bad host name"),
            BadHostKey => RelayError::bad_request("bad host key"),
            TooManyChallenges => {
                RelayError::unavailable("too many open enrolment challenges; retry later")
            }
            Incomplete => RelayError::bad_request("incomplete enrolment"),
            BadFields => RelayError::coded(
                Status::BadRequest,
                ErrorCode::BadRequest,
                "bad enrolment fields",
            ),
            NoPendingChallenge => RelayError::unauthorized(NO_PENDING_CHALLENGE),
            BadSignature => RelayError::unauthorized(BAD_ENROLMENT_SIGNATURE),
            Denied(reason) => {
                RelayError::coded(Status::Forbidden, ErrorCode::Denied, denied_text(reason))
            }
            Revoked => RelayError::coded(
                Status::Forbidden,
                ErrorCode::Revoked,
                "this host key was revoked on this relay",
            ),
            NameTaken(host) => RelayError::coded(
                Status::Conflict,
                ErrorCode::NameTaken,
                format!("host name {host} is already enrolled in this account with another key"),
            ),
            Full => RelayError::coded(
                Status::Unavailable,
                ErrorCode::Full,
                "relay enrolment capacity reached",
            ),
        }
    }
}

/// A field present with a value JavaScript counts as true (not null, false, 0 or ""): the
/// reference's presence test for enrolment fields.
fn truthy(obj: Option<&Map<String, Value>>, name: &str) -> bool {
    match obj.and_then(|o| o.get(name)) {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// A string field, if it is one.
fn string<'a>(obj: Option<&'a Map<String, Value>>, name: &str) -> Option<&'a str> {
    obj.and_then(|o| o.get(name)).and_then(Value::as_str)
}

impl Relay {
    /// `POST /v1/relay/challenge {"host","pubkey"}` → `{"challenge"}`.
    ///
    /// # Errors
    /// 400 `host and pubkey required`, `bad host name`, `bad host key`; 503 when too many
    /// challenges are open.
    pub async fn challenge(&self, body: &Value) -> Reply {
        let obj = body.as_object();
        if !truthy(obj, "host") || !truthy(obj, "pubkey") {
            return Err(Refusal::HostAndPubkeyRequired.into());
        }
        if !string(obj, "host").is_some_and(is_host_name) {
            return Err(Refusal::BadHostName.into());
        }
        let pk = string(obj, "pubkey")
            .and_then(parse_pubkey)
            .ok_or(Refusal::BadHostKey)?;
        let challenge = new_challenge();
        let lifetime_ms = u64::try_from(CHALLENGE_LIFETIME.as_millis()).unwrap_or(u64::MAX);
        let max = u64::try_from(self.limits.max_challenges).unwrap_or(u64::MAX);
        let issued = self
            .challenges
            .issue(pk, challenge.clone(), self.now_ms(), lifetime_ms, max);
        match issued.await? {
            ChallengeIssue::Issued => Ok(json!({ "challenge": challenge })),
            ChallengeIssue::Full => Err(Refusal::TooManyChallenges.into()),
        }
    }

    /// `POST /v1/relay/enrol {"host","pubkey","owner_fp","sig","proof"?}` → `{"ok":true}`.
    /// Checks in the reference's order: presence, fields, open challenge, signature; the
    /// challenge is then consumed (a signed statement is good for one attempt: `proof` is not
    /// signed, so an open challenge must not let a copied statement try other proofs); then
    /// the authority, then the store: in the enrolment's commit the deny list (the key, and the
    /// token's client), revocation, account name, capacity.
    ///
    /// # Errors
    /// 400 incomplete or `BAD_REQUEST`; 401 no pending challenge or bad signature; 403 `DENIED`
    /// or `REVOKED`; 409 `NAME_TAKEN`; 503 `FULL` or store failure.
    pub async fn enrol(&self, body: &Value) -> Reply {
        let obj = body.as_object();
        let present = obj.is_some_and(|o| o.contains_key("owner_fp"));
        if !truthy(obj, "host") || !truthy(obj, "pubkey") || !present || !truthy(obj, "sig") {
            return Err(Refusal::Incomplete.into());
        }
        let host = string(obj, "host").filter(|h| is_host_name(h));
        let pubkey = string(obj, "pubkey");
        let pk = pubkey.and_then(parse_pubkey);
        let owner_fp = string(obj, "owner_fp").filter(|f| is_owner_fp(f));
        let (Some(host), Some(pubkey), Some(pk), Some(owner_fp)) = (host, pubkey, pk, owner_fp)
        else {
            return Err(Refusal::BadFields.into());
        };
        let challenge = self
            .challenges
            .pending(&pk, self.now_ms())
            .await?
            .ok_or(Refusal::NoPendingChallenge)?;
        let signed = string(obj, "sig").is_some_and(|sig| {
            verify_canonical(
                &pk,
                &enrol_statement(&challenge, host, pubkey, owner_fp),
                sig,
            )
        });
        if !signed {
            return Err(Refusal::BadSignature.into());
        }
        self.challenges.consume(&pk, &challenge).await?;
        let proof = obj.and_then(|o| o.get("proof"));
        let request = AuthorityRequest {
            host_name: host,
            host_pubkey: pubkey,
            owner_fp,
            proof,
        };
        let mut denied_if = vec![DenySubject::Host(pk)];
        let (mut org, mut client) = (None, None);
        let (account, invite) = match settle_then_ask(self.authority.as_ref(), &request).await {
            Ok(Decision::Allow { account }) => (account, InviteClaim::NotNeeded),
            Ok(Decision::AllowClient {
                account,
                org: o,
                client_id,
            }) => {
                denied_if.push(DenySubject::Client(client_id.clone()));
                (org, client) = (Some(o), Some(client_id));
                (Some(account), InviteClaim::NotNeeded)
            }
            Ok(Decision::Redeem { invite: Some(h) }) => (None, InviteClaim::Presented(h)),
            Ok(Decision::Redeem { invite: None }) => (None, InviteClaim::Missing),
            Ok(Decision::Deny { reason }) => {
                tracing::info!(key = %fingerprint(&pk), "enrolment refused by the authority");
                return Err(Refusal::Denied(reason.as_deref()).into());
            }
            Err(e) => {
                tracing::warn!(key = %fingerprint(&pk), cause = %e.0, "enrolment authority failed");
                return Err(Refusal::Denied(Some(UNAVAILABLE_REASON)).into());
            }
        };
        let outcome = self
            .write(self.store.enrol(EnrolRequest {
                host_pubkey: pk,
                host_name: host.to_owned(),
                owner_fp: owner_fp.to_owned(),
                account,
                org,
                client_id: client,
                denied_if,
                authorized_by: self.authority.name().to_owned(),
                authority_rank: self.authority.rank(),
                max_live: self.limits.max_enrolments,
                invite,
            }))
            .await?;
        match outcome {
            EnrolOutcome::Enrolled | EnrolOutcome::AlreadyEnrolled => {
                if outcome == EnrolOutcome::Enrolled {
                    tracing::info!(host = %host, key = %fingerprint(&pk), "host enrolled");
                    self.watch_enrolments();
                }
                Ok(json!({ "ok": true }))
            }
            EnrolOutcome::Revoked => Err(Refusal::Revoked.into()),
            EnrolOutcome::NameTaken => Err(Refusal::NameTaken(host).into()),
            EnrolOutcome::Capacity => Err(Refusal::Full.into()),
            EnrolOutcome::Denied => {
                tracing::info!(key = %fingerprint(&pk), "enrolment refused: on the deny list");
                Err(Refusal::Denied(Some(DENY_LIST_REASON)).into())
            }
            EnrolOutcome::InviteRefused => {
                tracing::info!(key = %fingerprint(&pk), "enrolment refused: no redeemable invite");
                let reason = match invite {
                    InviteClaim::Missing => NO_INVITE_REASON,
                    _ => INVITE_REFUSED_REASON,
                };
                Err(Refusal::Denied(Some(reason)).into())
            }
        }
    }
}
