//! The enrolment authority (spec §8, docs/protocol.md §3 "Enrolment"): who may enrol a host key, and
//! under which proven account. The relay holds one; the default, `host-key-challenge`, allows
//! every key that answered its challenge; an operator may close enrolment to listed keys
//! ([`super::allowlist`]) or invited hosts ([`super::invite`]). A refusal or a failing authority
//! answers `403 DENIED` and nothing is stored.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;

use serde_json::Value;

use relay_wire::envelope::js_len;

/// What the authority is asked, after the challenge signature verified.
#[derive(Debug, Clone, Copy)]
pub struct AuthorityRequest<'a> {
    pub host_name: &'a str,
    /// The host key as sent (standard base64).
    pub host_pubkey: &'a str,
    /// The host's own, unproven owner claim.
    pub owner_fp: &'a str,
    /// The enrolment's optional `proof` field, exactly as received (any JSON).
    pub proof: Option<&'a Value>,
}

/// The authority's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The key may enrol, inside this proven account if any (quotas and name uniqueness use it).
    Allow { account: Option<String> },
    /// The key may enrol inside this proven account and organisation, for this client of the
    /// accounts service, unless the deny list names that client (an account token's
    /// `client_id`); the enrolment records all three.
    AllowClient {
        account: String,
        org: String,
        client_id: String,
    },
    /// A key with a live enrolment may re-enrol; a new key, without an account, only if its
    /// enrolment redeems this invite (`None`: it presented none) in its commit (single use).
    /// A missing, unknown, used or expired invite refuses a new key.
    Redeem {
        invite: Option<relay_store::InviteHash>,
    },
    /// The key may not enrol; the reason (if any) is shown to the host, cut to
    /// [`MAX_REASON_UNITS`].
    Deny { reason: Option<String> },
}

/// The authority could not decide (its key set is unreachable, ...). The text is for the log
/// only: the host is told [`UNAVAILABLE_REASON`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

/// An enrolment authority. `authorize` runs on the request task: it must answer quickly and
/// never block on the network (refresh key sets in the background and answer from a cache).
pub trait EnrolmentAuthority: Send + Sync {
    /// The name recorded on the enrolments it allows (`authorized_by`).
    fn name(&self) -> &str;
    /// Its strength: an enrolment recorded by a stronger authority is never overwritten by a
    /// weaker one (docs/protocol.md §3: re-enrolling never overwrites an account a stronger authority
    /// recorded).
    fn rank(&self) -> u8;
    /// May this key enrol?
    ///
    /// # Errors
    /// [`Unavailable`] when the authority cannot decide now.
    fn authorize(&self, req: &AuthorityRequest<'_>) -> Result<Decision, Unavailable>;
    /// Before [`Self::authorize`]: a bounded wait for something under way that may change its
    /// answer (the account-token authority's key-set fetch for a token's unknown `kid`). The
    /// default, and every request with nothing to wait for: `None`.
    fn settle(&self, _req: &AuthorityRequest<'_>) -> Option<Settle> {
        None
    }
}

/// What [`EnrolmentAuthority::settle`] answers: a bounded wait.
pub type Settle = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The reason shown when a new key's invite is unknown, redeemed already or expired.
pub(crate) const INVITE_REFUSED_REASON: &str = "the invite code is unknown, used or expired";
/// The reason shown when the deny list names the key or its token's client.
pub(crate) const DENY_LIST_REASON: &str =
    "this host or its account client is on the relay's deny list";
/// The reason shown when the authority fails (errors, or panics).
pub(crate) const UNAVAILABLE_REASON: &str = "the enrolment authority is unavailable";
/// The longest reason shown, in UTF-16 code units as the reference counts them.
pub(crate) const MAX_REASON_UNITS: usize = 200;

/// The self-hosted default: any key that answered the challenge may enrol, with no account; key
/// and sender quotas bound it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HostKeyChallenge;

impl EnrolmentAuthority for HostKeyChallenge {
    fn name(&self) -> &str {
        "host-key-challenge"
    }
    fn rank(&self) -> u8 {
        0
    }
    fn authorize(&self, _req: &AuthorityRequest<'_>) -> Result<Decision, Unavailable> {
        Ok(Decision::Allow { account: None })
    }
}

/// Wait as `authority` asks ([`EnrolmentAuthority::settle`]), then ask it ([`ask`]).
pub(crate) async fn settle_then_ask(
    authority: &dyn EnrolmentAuthority,
    req: &AuthorityRequest<'_>,
) -> Result<Decision, Unavailable> {
    let wait = catch_unwind(AssertUnwindSafe(|| authority.settle(req)))
        .ok()
        .flatten();
    if let Some(wait) = wait {
        wait.await;
    }
    ask(authority, req)
}

/// Ask `authority`, turning a panic into [`Unavailable`] like an error: a broken authority
/// refuses enrolments, it never takes the request (or the relay) down.
pub(crate) fn ask(
    authority: &dyn EnrolmentAuthority,
    req: &AuthorityRequest<'_>,
) -> Result<Decision, Unavailable> {
    catch_unwind(AssertUnwindSafe(|| authority.authorize(req)))
        .unwrap_or_else(|_| Err(Unavailable("the authority panicked".into())))
}

/// The `error` text of a refusal: `enrolment not authorized`, plus `: <reason>` when the reason
/// is not empty, the reason cut to [`MAX_REASON_UNITS`] UTF-16 code units (a character that
/// would be split is left out: a string here cannot hold half a surrogate pair).
pub(crate) fn denied_text(reason: Option<&str>) -> String {
    match reason {
        Some(r) if !r.is_empty() => format!("enrolment not authorized: {}", cut_units(r)),
        _ => "enrolment not authorized".to_owned(),
    }
}

fn cut_units(s: &str) -> &str {
    if js_len(s) <= MAX_REASON_UNITS {
        return s;
    }
    let mut units = 0;
    for (i, c) in s.char_indices() {
        units += c.len_utf16();
        if units > MAX_REASON_UNITS {
            return &s[..i];
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(proof: Option<&Value>) -> AuthorityRequest<'_> {
        AuthorityRequest {
            host_name: "h",
            host_pubkey: "k",
            owner_fp: "",
            proof,
        }
    }

    #[test]
    fn host_key_challenge_allows_every_key_without_account() {
        let p = serde_json::json!({"anything": 1});
        for proof in [None, Some(&p)] {
            assert_eq!(
                HostKeyChallenge.authorize(&req(proof)),
                Ok(Decision::Allow { account: None })
            );
        }
        assert_eq!(HostKeyChallenge.name(), "host-key-challenge");
    }

    #[test]
    fn denied_text_appends_a_non_empty_reason_cut_to_200_utf16_units() {
        assert_eq!(denied_text(None), "enrolment not authorized");
        assert_eq!(denied_text(Some("")), "enrolment not authorized");
        assert_eq!(denied_text(Some("no")), "enrolment not authorized: no");
        let long = "r".repeat(250);
        assert_eq!(
            denied_text(Some(&long)),
            format!("enrolment not authorized: {}", "r".repeat(200))
        );
        // 199 units then a surrogate pair: the pair would be split, so it is left out.
        let s = format!("{}😀x", "a".repeat(199));
        assert_eq!(
            denied_text(Some(&s)),
            format!("enrolment not authorized: {}", "a".repeat(199))
        );
        let s = format!("{}😀x", "a".repeat(198));
        assert_eq!(
            denied_text(Some(&s)),
            format!("enrolment not authorized: {}😀", "a".repeat(198))
        );
    }

    struct Panics;
    impl EnrolmentAuthority for Panics {
        fn name(&self) -> &str {
            "panics"
        }
        fn rank(&self) -> u8 {
            0
        }
        fn authorize(&self, _: &AuthorityRequest<'_>) -> Result<Decision, Unavailable> {
            panic!("boom")
        }
    }

    #[test]
    fn a_panicking_authority_is_unavailable() {
        assert!(ask(&Panics, &req(None)).is_err());
    }
}
