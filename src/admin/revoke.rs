//! Revoke and/or purge one key (`relay-tool revoke` / `purge`): resolve KEY|FINGERPRINT, run the
//! store's one-batch `revoke_key` with the relay's notice signer, answer a JSON summary. The
//! relay runs it for its admin socket (so its own reads see the change at once); relay-tool
//! runs the same code on a stopped store.

use relay_store::{Key32, RelayStore, RevokeOutcome, MAX_PURGE_ITEMS};
use serde_json::{json, Value};

use relay_core::Revoker;
use relay_wire::keys::{b64, fingerprint, unb64};

/// Fewest hex digits a fingerprint prefix must have (fewer would match half the relay).
pub(crate) const MIN_PREFIX_DIGITS: usize = 4;
/// Candidates named when a prefix matches several keys.
const MAX_CANDIDATES: usize = 10;

/// One admin action on one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The host key (base64) or a fingerprint (prefix) as the admin typed it.
    pub target: String,
    /// Revoke the key.
    pub revoke: bool,
    /// Delete its queued items (their senders get expiry notices).
    pub purge: bool,
    /// Why, for the relay log.
    pub reason: String,
}

/// Run `action` against `store` for the admin with `uid`.
///
/// # Errors
/// A one-line reason: a target that is not a key or fingerprint, an unknown key, a prefix
/// matching several keys (they are listed), a queue over [`MAX_PURGE_ITEMS`], a store failure.
/// Nothing changes on any error.
pub fn run(
    store: &dyn RelayStore,
    revoker: &Revoker,
    action: &Action,
    uid: u32,
) -> Result<Value, String> {
    let key = resolve(store, &action.target)?;
    let name = store
        .enrolment(&key)
        .map_err(|e| e.to_string())?
        .map(|e| e.host_name)
        .unwrap_or_default();
    let req = revoker.request(key, action.revoke, action.purge, uid, &action.reason);
    let outcome = store
        .revoke_key(req, revoker.notices())
        .wait()
        .map_err(|e| e.to_string())?;
    match outcome {
        RevokeOutcome::Done(r) => {
            // Committed: the key's live delivery on this relay ends now (other processes on a
            // shared store: within `relay::revoke_watch::REVOKE_REFRESH`).
            revoker.end_waiters(&key, action.revoke);
            Ok(json!({
            "action": if action.revoke { "revoke" } else { "purge" },
            "purge": action.purge,
            "key": b64(&key),
            "fingerprint": fingerprint(&key),
            "host_name": name,
            "revoked": r.revoked,
            "already_revoked": r.already_revoked,
            "lists_changed": r.lists_changed,
            "purged_items": r.purged_items,
            "purged_bytes": r.purged_bytes,
            "notices": r.notices,
            }))
        }
        RevokeOutcome::UnknownKey => Err(format!("no enrolment has key {}", fingerprint(&key))),
        RevokeOutcome::QueueTooLarge { items } => Err(format!(
            "the queue of {} holds {items} items, over the {MAX_PURGE_ITEMS} one purge deletes in one batch; nothing changed",
            fingerprint(&key)
        )),
    }
}

/// A whole base64 host key, if `target` is one.
fn whole_key(target: &str) -> Option<Key32> {
    unb64(target).and_then(|b| Key32::try_from(b.as_slice()).ok())
}

/// `target` has the shape of a KEY argument: a whole base64 host key or a fingerprint prefix of
/// [`MIN_PREFIX_DIGITS`] to 16 hex digits (relay-tool refuses anything else as a usage error,
/// before it asks the relay or opens the store).
///
/// # Errors
/// Names the value and the shapes it may take.
pub fn check_target(target: &str) -> Result<(), String> {
    if whole_key(target).is_some() {
        return Ok(());
    }
    let digits = target.chars().filter(|c| *c != '-').count();
    if !target.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        || !(MIN_PREFIX_DIGITS..=16).contains(&digits)
    {
        let shown: String = target.chars().take(64).collect();
        return Err(format!(
            "{shown:?} is neither a host key (base64) nor a fingerprint of {MIN_PREFIX_DIGITS} to 16 hex digits"
        ));
    }
    Ok(())
}

/// The key a target names: a whole base64 host key, or a fingerprint prefix that exactly one
/// enrolment (live or revoked) has.
///
/// # Errors
/// Not a key or fingerprint; no enrolment with that fingerprint; several (listed).
pub fn resolve(store: &dyn RelayStore, target: &str) -> Result<Key32, String> {
    if let Some(key) = whole_key(target) {
        return Ok(key);
    }
    check_target(target)?;
    let shown: String = target.chars().take(64).collect();
    let found = store
        .enrolments_by_fingerprint(target, MAX_CANDIDATES + 1)
        .map_err(|e| e.to_string())?;
    match found.as_slice() {
        [] => Err(format!("no enrolled key has fingerprint {shown}")),
        [one] => Ok(one.host_pubkey),
        many => {
            let mut listed: Vec<String> = many
                .iter()
                .take(MAX_CANDIDATES)
                .map(|e| {
                    let state = if e.revoked_at_ms.is_some() {
                        "revoked"
                    } else {
                        "live"
                    };
                    format!("{} ({}, {state})", fingerprint(&e.host_pubkey), e.host_name)
                })
                .collect();
            if many.len() > MAX_CANDIDATES {
                listed.push("...".to_string());
            }
            Err(format!(
                "fingerprint {shown} matches several keys: {}; give more digits or the whole key",
                listed.join(", ")
            ))
        }
    }
}
