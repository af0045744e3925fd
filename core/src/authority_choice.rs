//! Which enrolment authority `mbx-relay serve` runs (`--enrol-authority`): the choice and the
//! construction of each authority, kept apart from the authority interface
//! ([`super::authority`]) that every authority implements, so the interface names none of them.

use std::path::Path;
use std::sync::Arc;

#[cfg(feature = "failpoints")]
use serde_json::Value;

use super::allowlist::AllowList;
#[cfg(feature = "failpoints")]
use super::authority::{AuthorityRequest, Decision, Unavailable};
use super::authority::{EnrolmentAuthority, HostKeyChallenge};
use super::authority_token::{TokenAuthority, TokenSettings};
use super::invite::Invites;

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
    /// [`TokenAuthority`]: only hosts presenting a host-bound account token (the hosted relay).
    AccountTokens,
}

impl std::str::FromStr for AuthorityKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "challenge" => Ok(AuthorityKind::Challenge),
            "allowlist" => Ok(AuthorityKind::AllowList),
            "invite" => Ok(AuthorityKind::Invite),
            "account-tokens" => Ok(AuthorityKind::AccountTokens),
            other => Err(format!(
                "{other:?} is not an enrolment authority: challenge, allowlist, invite or \
                 account-tokens"
            )),
        }
    }
}

/// The authority `serve` runs, and the allow-list its reloader keeps current or the token
/// authority whose key set its refresher keeps fresh (if it is one of those).
pub struct ForServe {
    /// Who may enrol: checked on every enrolment.
    pub authority: Arc<dyn EnrolmentAuthority>,
    /// The allow-list behind `authority`, when it is one: the reloader swaps its contents on change.
    pub allowlist: Option<Arc<AllowList>>,
    /// The token authority, whose key set the server's refresher keeps fresh.
    pub tokens: Option<Arc<TokenAuthority>>,
}

/// What `--enrol-authority` reads besides its name: the allow-list file, the token settings.
#[derive(Debug, Clone, Default)]
pub struct AuthorityFiles<'a> {
    /// `--enrol-allowlist`.
    pub allowlist: Option<&'a Path>,
    /// `--token-issuer`, `--token-audience` and the key-set timing.
    pub tokens: Option<TokenSettings>,
}

/// The authority `serve` runs: `kind` (the allow-list read from `allowlist`), or with the
/// `failpoints` feature the test authority named by `MBX_RELAY_TEST_AUTHORITY` (see
/// [`test_stub`]).
///
/// # Errors
/// An allow-list or token settings given without their `kind` or missing with it; an
/// allow-list that cannot be read; token key-set timing out of order; an unknown test
/// authority name.
pub fn for_serve(kind: AuthorityKind, with: AuthorityFiles<'_>) -> Result<ForServe, String> {
    let only = |authority: Arc<dyn EnrolmentAuthority>| ForServe {
        authority,
        allowlist: None,
        tokens: None,
    };
    #[cfg(feature = "failpoints")]
    if let Some(name) = std::env::var_os(test_stub::ENV) {
        return test_stub::by_name(&name.to_string_lossy()).map(only);
    }
    const STRAY_LIST: &str = "--enrol-allowlist is read only with --enrol-authority allowlist";
    const STRAY_TOKENS: &str =
        "--token-issuer and --token-audience are read only with --enrol-authority account-tokens";
    match (kind, with.allowlist, with.tokens) {
        (_, Some(_), _) if kind != AuthorityKind::AllowList => Err(STRAY_LIST.into()),
        (_, _, Some(_)) if kind != AuthorityKind::AccountTokens => Err(STRAY_TOKENS.into()),
        (AuthorityKind::AllowList, Some(path), _) => {
            let list = AllowList::load(path)?;
            Ok(ForServe {
                authority: list.clone(),
                allowlist: Some(list),
                tokens: None,
            })
        }
        (AuthorityKind::AllowList, None, _) => {
            Err("--enrol-authority allowlist needs --enrol-allowlist FILE".into())
        }
        (AuthorityKind::AccountTokens, _, Some(settings)) => {
            settings.timing.check()?;
            let tokens = TokenAuthority::new(settings);
            Ok(ForServe {
                authority: tokens.clone(),
                allowlist: None,
                tokens: Some(tokens),
            })
        }
        (AuthorityKind::AccountTokens, _, None) => Err(
            "--enrol-authority account-tokens needs --token-issuer URL and --token-audience URL"
                .into(),
        ),
        (AuthorityKind::Challenge, ..) => Ok(only(Arc::new(HostKeyChallenge))),
        (AuthorityKind::Invite, ..) => Ok(only(Arc::new(Invites))),
    }
}

/// A test authority driven by the enrolment's `proof` (feature `failpoints` only: release builds
/// carry no switch that changes who may enrol).
#[cfg(feature = "failpoints")]
pub(crate) mod test_stub {
    use super::*;

    /// Environment variable naming the test authority (`proof-stub`).
    pub(crate) const ENV: &str = "MBX_RELAY_TEST_AUTHORITY";

    /// The test authority of this name.
    ///
    /// # Errors
    /// An unknown name.
    pub(crate) fn by_name(name: &str) -> Result<Arc<dyn EnrolmentAuthority>, String> {
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
