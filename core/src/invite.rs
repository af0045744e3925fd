//! Closed enrolment by invitation (`--enrol-authority invite`, docs/protocol.md §3): an operator
//! issues single-use codes (`relay-tool invite`); a new host presents one in the enrol body's
//! `proof` as `{"invite": "<code>"}`. The relay stores only the SHA-256 of a code, and the
//! enrolment's own commit redeems it ([`Decision::Redeem`]), so a refused or failed enrolment
//! never uses an invite up and two hosts never share one.

use serde_json::Value;

use relay_store::{Invite, InviteHash, MAX_REASON_CHARS};
use relay_wire::accept::sha256;

use super::authority::{AuthorityRequest, Decision, EnrolmentAuthority, Unavailable};

/// What every code starts with (so a host's operator can tell it from other secrets).
pub(crate) const CODE_PREFIX: &str = "mbxi-";
/// Random bytes in a code (128 bits: not guessable in any number of enrolment attempts).
const CODE_BYTES: usize = 16;
/// The longest `proof.invite` hashed; a longer one is no code of ours.
const MAX_CODE_CHARS: usize = 128;

/// The reason shown to a new host that presented no invite.
pub(crate) const NO_INVITE_REASON: &str =
    "this relay admits invited hosts only: put the operator's invite code in proof.invite";

/// A fresh code: [`CODE_PREFIX`] and 32 lower-case hex digits.
pub(crate) fn new_code() -> String {
    let bytes: [u8; CODE_BYTES] = rand::random();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{CODE_PREFIX}{hex}")
}

/// The hash the store keeps for `code` (surrounding white space ignored).
pub(crate) fn hash_code(code: &str) -> InviteHash {
    sha256(code.trim().as_bytes())
}

/// A new invite valid for `ttl_ms` from `now_ms`, with its code (shown once to the operator,
/// never stored). `note` is cut to [`MAX_REASON_CHARS`].
pub fn issue(now_ms: u64, ttl_ms: u64, note: &str) -> (String, Invite) {
    let code = new_code();
    let invite = Invite {
        hash: hash_code(&code),
        created_ms: now_ms,
        expires_ms: now_ms.saturating_add(ttl_ms),
        note: note.chars().take(MAX_REASON_CHARS).collect(),
    };
    (code, invite)
}

/// The invite authority: a new host presenting a code may enrol if the code's invite is
/// redeemed in its commit; without one it is refused (a host already enrolled re-enrols
/// without one). Hosts it admits carry no account.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Invites;

impl EnrolmentAuthority for Invites {
    fn name(&self) -> &str {
        "invite"
    }
    fn rank(&self) -> u8 {
        1
    }
    fn authorize(&self, req: &AuthorityRequest<'_>) -> Result<Decision, Unavailable> {
        let code = req
            .proof
            .and_then(|p| p.get("invite"))
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|c| !c.is_empty() && c.chars().count() <= MAX_CODE_CHARS);
        // Without a code the store still decides: a host already enrolled re-enrols (after a
        // restore, an epoch change) without the code it used up.
        Ok(Decision::Redeem {
            invite: code.map(hash_code),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ask(proof: Option<&Value>) -> Decision {
        let req = AuthorityRequest {
            host_name: "h",
            host_pubkey: "k",
            owner_fp: "",
            proof,
        };
        Invites.authorize(&req).unwrap()
    }

    #[test]
    fn a_code_is_redeemed_by_its_hash_and_never_kept_itself() {
        let (code, invite) = issue(1_000, 60_000, "for bob");
        assert!(code.starts_with(CODE_PREFIX) && code.len() == CODE_PREFIX.len() + 32);
        assert_eq!(invite.hash, hash_code(&code));
        assert_eq!(invite.expires_ms, 61_000);
        let proof = json!({ "invite": format!(" {code}\n") });
        assert_eq!(
            ask(Some(&proof)),
            Decision::Redeem {
                invite: Some(invite.hash)
            }
        );
        assert_ne!(issue(0, 1, "").0, code, "codes are random");
    }

    #[test]
    fn a_host_without_a_readable_code_presents_no_invite() {
        let none = Decision::Redeem { invite: None };
        for proof in [
            None,
            Some(json!(null)),
            Some(json!({"invite": ""})),
            Some(json!({"invite": 7})),
            Some(json!({"invite": "x".repeat(MAX_CODE_CHARS + 1)})),
        ] {
            assert_eq!(ask(proof.as_ref()), none, "{proof:?}");
        }
    }
}
