//! Store one enrolment invite (`relay-tool invite`): the tool makes the code and sends only its
//! hash (the relay never sees a code outside an enrol body); the relay stores it through its
//! own store for the admin socket, relay-tool on a stopped store. One code for both.

use relay_store::{log_text, Invite, InviteOutcome, RelayStore, MAX_INVITES, MAX_REASON_CHARS};
use serde_json::{json, Value};

use super::line::one_line;
use super::report::{hex, unhex32};

/// Store `invite` in `store`; answers `{"invite": id, "expires_ms"}`.
///
/// # Errors
/// [`MAX_INVITES`] unexpired invites are stored; a store failure. Nothing is stored then.
pub fn run(store: &dyn RelayStore, invite: &Invite) -> Result<Value, String> {
    match store
        .put_invite(invite.clone(), MAX_INVITES)
        .wait()
        .map_err(|e| e.to_string())?
    {
        InviteOutcome::Issued => Ok(json!({
            "invite": log_text::invite_id(&invite.hash),
            "expires_ms": invite.expires_ms,
        })),
        InviteOutcome::Full => Err(format!(
            "{MAX_INVITES} unexpired invites are stored already; wait for some to expire or be used"
        )),
    }
}

/// The request words after `invite`: `HASH CREATED_MS EXPIRES_MS [note TEXT...]`.
pub(crate) fn to_words(i: &Invite) -> String {
    let mut line = format!("{} {} {}", hex(&i.hash), i.created_ms, i.expires_ms);
    if !i.note.is_empty() {
        line.push_str(" note ");
        line.push_str(&one_line(&i.note));
    }
    line
}

/// Parse the words after `invite`.
///
/// # Errors
/// A usage line when the words are not as [`to_words`] writes them.
pub(crate) fn parse(words: &[&str]) -> Result<Invite, String> {
    let usage = || "usage: invite HASH CREATED_MS EXPIRES_MS [note TEXT...]".to_string();
    let [hash, created, expires, rest @ ..] = words else {
        return Err(usage());
    };
    let note = match rest.split_first() {
        None => String::new(),
        Some((&"note", text)) if !text.is_empty() => text.join(" "),
        _ => return Err(usage()),
    };
    Ok(Invite {
        hash: unhex32(hash).ok_or_else(usage)?,
        created_ms: created.parse().map_err(|_| usage())?,
        expires_ms: expires.parse().map_err(|_| usage())?,
        note: note.chars().take(MAX_REASON_CHARS).collect(),
    })
}
