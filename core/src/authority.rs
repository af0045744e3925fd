//! The enrolment authority (spec §8, docs/protocol.md §3 "Enrolment"): who may enrol a host key, and
//! under which proven account. The relay holds one; the default, `host-key-challenge`, allows
//! every key that answered its challenge; an operator may close enrolment to listed keys
//! ([`super::allowlist`]) or invited hosts ([`super::invite`]). A refusal or a failing authority
//! answers `403 DENIED` and nothing is stored.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use relay_wire::envelope::js_len;

use super::allowlist::AllowList;
use super::invite::Invites;

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
}

/// The reason shown when a new key's invite is unknown, redeemed already or expired.
pub(crate) const INVITE_REFUSED_REASON: &str = "the invite code is unknown, used or expired";
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

/// Ask `authority`, turning a panic into [`Unavailable`] like an error: a broken authority
/// refuses enrolments, it never takes the request (or the relay) down.
pub fn ask(
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

/// Which authority `serve` runs (`--enrol-authority`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorityKind {
    /// [`HostKeyChallenge`]: anyone who answers the challenge (the default).
    #[default]
    Challenge,
    /// [`AllowList`]: only the keys in `--enrol-allowlist`.
    AllowList,
    /// [`super::invite::Invites`]: only hosts presenting an unused invite code.
    Invite,
}

impl std::str::FromStr for AuthorityKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "challenge" => Ok(AuthorityKind::Challenge),
            "allowlist" => Ok(AuthorityKind::AllowList),
            "invite" => Ok(AuthorityKind::Invite),
            other => Err(format!(
                "{other:?} is not an enrolment authority: challenge, allowlist or invite"
            )),
        }
    }
}

/// The authority `serve` runs, and the allow-list its reloader keeps current (if it is one).
pub struct ForServe {
    pub authority: Arc<dyn EnrolmentAuthority>,
    pub allowlist: Option<Arc<AllowList>>,
}

/// The authority `serve` runs: `kind` (the allow-list read from `allowlist`), or with the
/// `failpoints` feature the test authority named by `MBX_RELAY_TEST_AUTHORITY` (see
/// [`test_stub`]).
///
/// # Errors
/// `allowlist` given without `kind` allowlist or missing with it; an allow-list that cannot be
/// read; an unknown test authority name.
pub fn for_serve(kind: AuthorityKind, allowlist: Option<&Path>) -> Result<ForServe, String> {
    let only = |authority: Arc<dyn EnrolmentAuthority>| ForServe {
        authority,
        allowlist: None,
    };
    #[cfg(feature = "failpoints")]
    if let Some(name) = std::env::var_os(test_stub::ENV) {
        return test_stub::by_name(&name.to_string_lossy()).map(only);
    }
    match (kind, allowlist) {
        (AuthorityKind::AllowList, Some(path)) => {
            let list = AllowList::load(path)?;
            Ok(ForServe {
                authority: list.clone(),
                allowlist: Some(list),
            })
        }
        (AuthorityKind::AllowList, None) => {
            Err("--enrol-authority allowlist needs --enrol-allowlist FILE".into())
        }
        (_, Some(_)) => {
            Err("--enrol-allowlist is read only with --enrol-authority allowlist".into())
        }
        (AuthorityKind::Challenge, None) => Ok(only(Arc::new(HostKeyChallenge))),
        (AuthorityKind::Invite, None) => Ok(only(Arc::new(Invites))),
    }
}

/// A test authority driven by the enrolment's `proof` (feature `failpoints` only: release builds
/// carry no switch that changes who may enrol).
#[cfg(feature = "failpoints")]
pub mod test_stub {
    use super::*;

    /// Environment variable naming the test authority (`proof-stub`).
    pub(crate) const ENV: &str = "MBX_RELAY_TEST_AUTHORITY";

    /// The test authority of this name.
    ///
    /// # Errors
    /// An unknown name.
    pub fn by_name(name: &str) -> Result<Arc<dyn EnrolmentAuthority>, String> {
        match name {
            "proof-stub" => Ok(Arc::new(ProofStub)),
            other => Err(format!("{ENV}: unknown test authority {other:?}")),
        }
    }

    /// Decides by `proof`: none → allow without account; `{"account": A}` → allow inside A;
    /// `{"deny": R}` → refuse with reason R (a string, or null for none); `{"fail": true}` →
    /// unavailable; `{"panic": true}` → panics (proves a panicking authority is unavailable).
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct ProofStub;

    impl EnrolmentAuthority for ProofStub {
        fn name(&self) -> &str {
            "test-proof-stub"
        }
        fn rank(&self) -> u8 {
            1
        }
        fn authorize(&self, req: &AuthorityRequest<'_>) -> Result<Decision, Unavailable> {
            let Some(p) = req.proof.filter(|p| !p.is_null()) else {
                return Ok(Decision::Allow { account: None });
            };
            if let Some(r) = p.get("deny") {
                return Ok(Decision::Deny {
                    reason: r.as_str().map(str::to_owned),
                });
            }
            if p.get("fail").is_some() {
                return Err(Unavailable("the test authority was told to fail".into()));
            }
            if p.get("panic").is_some() {
                panic!("the test authority was told to panic");
            }
            match p.get("account").and_then(Value::as_str) {
                Some(a) => Ok(Decision::Allow {
                    account: Some(a.to_owned()),
                }),
                None => Ok(Decision::Deny {
                    reason: Some("unreadable proof".into()),
                }),
            }
        }
    }
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
