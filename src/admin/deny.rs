//! Add a deny-list entry (`relay-tool deny`, spec §8 "Revocation"; the accounts service's
//! authenticated way in is the owner-only admin socket): by host key (or fingerprint) or by
//! `client_id`, kept until its expiry (at least the longest token lifetime). A host entry also
//! revokes the key's enrolment in the same admin action ([`super::revoke`]): its hops are refused
//! and its event streams and waiting pulls end at once on this relay and within
//! `REVOKE_REFRESH` on every other process sharing the store. A client entry refuses the
//! account tokens naming that `client_id` (`relay_core::enrol`) and revokes, as a host entry
//! does, every live enrolment recorded with it. The relay runs this for its
//! admin socket; relay-tool on a stopped store. One code for both.

use relay_store::{DenyEntry, DenyOutcome, DenySubject, RelayStore};
use relay_store::{MAX_CLIENT_ID_CHARS, MAX_DENY_ENTRIES, MAX_REASON_CHARS};
use serde_json::{json, Value};

use relay_core::Revoker;
use relay_wire::keys::{b64, fingerprint};

use super::line::one_line;
use super::revoke::{self, Action};

/// What a deny entry names, as the admin typed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A host key (base64) or fingerprint (prefix), as `relay-tool revoke` takes it.
    Host(String),
    /// A `client_id` of the accounts service.
    Client(String),
}

/// One deny request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DenyAction {
    /// Whom to deny.
    pub target: Target,
    /// How long the entry lasts from now (kept at least the longest token lifetime).
    pub ttl_ms: u64,
    /// Why, for the relay log.
    pub note: String,
}

/// Check a deny request's shape before anything is asked or opened.
///
/// # Errors
/// A usage line.
pub fn check(action: &DenyAction) -> Result<(), String> {
    match &action.target {
        Target::Host(t) => revoke::check_target(t)?,
        Target::Client(c) => {
            if c.is_empty()
                || c.chars().count() > MAX_CLIENT_ID_CHARS
                || c.chars().any(|ch| ch.is_whitespace() || ch.is_control())
            {
                return Err(format!(
                    "a client id is 1 to {MAX_CLIENT_ID_CHARS} characters without spaces"
                ));
            }
        }
    }
    if action.note.chars().count() > MAX_REASON_CHARS {
        return Err(format!(
            "--note is longer than {MAX_REASON_CHARS} characters"
        ));
    }
    Ok(())
}

/// Add the entry to `store` at `now_ms` for the admin with `uid`, revoking a denied host's
/// enrolment; answers a JSON summary.
///
/// # Errors
/// A bad target; [`MAX_DENY_ENTRIES`] unexpired entries stored; a store failure.
pub fn run(
    store: &dyn RelayStore,
    revoker: &Revoker,
    action: &DenyAction,
    uid: u32,
    now_ms: u64,
) -> Result<Value, String> {
    check(action)?;
    let subject = match &action.target {
        Target::Host(t) => DenySubject::Host(revoke::resolve(store, t)?),
        Target::Client(c) => DenySubject::Client(c.clone()),
    };
    let entry = DenyEntry {
        subject: subject.clone(),
        added_ms: now_ms,
        expires_ms: now_ms.saturating_add(action.ttl_ms),
        note: action.note.clone(),
    };
    let outcome = store
        .put_deny(entry.clone(), MAX_DENY_ENTRIES)
        .wait()
        .map_err(|e| e.to_string())?;
    if outcome == DenyOutcome::Full {
        return Err(format!(
            "{MAX_DENY_ENTRIES} unexpired deny entries are stored already; nothing changed"
        ));
    }
    let expires_ms = relay_store::rules::deny::kept_until(&entry);
    Ok(match subject {
        DenySubject::Host(key) => {
            let enrolled = store.enrolment(&key).map_err(|e| e.to_string())?;
            let revoked = match enrolled {
                Some(e) if e.revoked_at_ms.is_none() => {
                    let revoke = Action {
                        target: b64(&key),
                        revoke: true,
                        purge: false,
                        reason: format!("deny list: {}", action.note),
                    };
                    revoke::run(store, revoker, &revoke, uid)?;
                    true
                }
                _ => false,
            };
            json!({ "deny": "host", "key": b64(&key), "fingerprint": fingerprint(&key),
                    "expires_ms": expires_ms, "revoked": revoked })
        }
        DenySubject::Client(c) => {
            let revoked = revoke_client(store, revoker, &c, action, uid)?;
            json!({ "deny": "client", "client_id": c, "expires_ms": expires_ms,
                    "revoked": revoked })
        }
    })
}

/// Hosts revoked per round of [`revoke_client`].
const CLIENT_PAGE: usize = 100;

/// Revoke every live enrolment recorded with `client` (the entry is stored first, so no new
/// one appears while this runs); answers how many were revoked. Run again (the same deny) after
/// a crash halfway: the entry refuses their enrolments meanwhile, and the hosts left are
/// revoked then.
fn revoke_client(
    store: &dyn RelayStore,
    revoker: &Revoker,
    client: &str,
    action: &DenyAction,
    uid: u32,
) -> Result<u64, String> {
    let mut revoked = 0u64;
    loop {
        let live = store
            .live_enrolments_by_client(client, CLIENT_PAGE)
            .map_err(|e| e.to_string())?;
        if live.is_empty() {
            return Ok(revoked);
        }
        // Every round revokes what it read (or fails): the live set shrinks, the loop ends.
        for e in &live {
            let revoke = Action {
                target: b64(&e.host_pubkey),
                revoke: true,
                purge: false,
                reason: format!("deny list (client {client}): {}", action.note),
            };
            let done = revoke::run(store, revoker, &revoke, uid)?;
            if done["revoked"] == true {
                revoked += 1;
            } else if done["already_revoked"] != true {
                return Err(format!(
                    "revoking {} of client {client} left it live",
                    fingerprint(&e.host_pubkey)
                ));
            }
        }
    }
}

/// The request words after `deny`: `host TARGET|client ID TTL_MS [note TEXT...]`.
pub(crate) fn to_words(a: &DenyAction) -> String {
    let (kind, value) = match &a.target {
        Target::Host(t) => ("host", t),
        Target::Client(c) => ("client", c),
    };
    let mut line = format!("{kind} {value} {}", a.ttl_ms);
    if !a.note.is_empty() {
        line.push_str(" note ");
        line.push_str(&one_line(&a.note));
    }
    line
}

/// Parse the words after `deny`.
///
/// # Errors
/// A usage line when the words are not as [`to_words`] writes them.
pub(crate) fn parse(words: &[&str]) -> Result<DenyAction, String> {
    let usage = || "usage: deny host TARGET|client ID TTL_MS [note TEXT...]".to_string();
    let [kind, value, ttl, rest @ ..] = words else {
        return Err(usage());
    };
    let target = match *kind {
        "host" => Target::Host((*value).to_string()),
        "client" => Target::Client((*value).to_string()),
        _ => return Err(usage()),
    };
    let note = match rest.split_first() {
        None => String::new(),
        Some((&"note", text)) if !text.is_empty() => text.join(" "),
        _ => return Err(usage()),
    };
    let action = DenyAction {
        target,
        ttl_ms: ttl.parse().map_err(|_| usage())?,
        note: note.chars().take(MAX_REASON_CHARS).collect(),
    };
    check(&action)?;
    Ok(action)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deny_request_reads_back_as_written_and_bad_ones_are_refused() {
        for a in [
            DenyAction {
                target: Target::Host("abcd-ef01".into()),
                ttl_ms: 900_000,
                note: "cloud credential revoked".into(),
            },
            DenyAction {
                target: Target::Client("client-7".into()),
                ttl_ms: 1,
                note: String::new(),
            },
        ] {
            let line = to_words(&a);
            let words: Vec<&str> = line.split(' ').collect();
            assert_eq!(parse(&words), Ok(a));
        }
        for bad in [
            &["host", "xyz", "5"][..],
            &["client", "c", "soon"],
            &["user", "u", "5"],
            &["client", "c"],
            &["client", "c", "5", "why"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
