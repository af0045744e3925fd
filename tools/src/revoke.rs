//! `relay-tool revoke` and `relay-tool purge`: through the running relay's admin socket (the
//! relay writes through its own store, so its very next read sees the change), or on the store
//! opened here with the relay key from `MBX_RELAY_KEY` or `<store-dir>/relay.key` signing the
//! expiry notices. A directory store must be stopped for that (refused while a relay holds it
//! without answering on its socket); a PostgreSQL store is changed in one transaction beside
//! its relays, which read enrolments from the database on every hop.

use std::sync::Arc;

use mbx_relay::admin::proto::Request;
use mbx_relay::admin::revoke::{self, Action};
use relay_core::Limits;
use relay_core::Revoker;
use relay_core::{load_existing_key, KEY_ENV};
use relay_store::{RelayStore, MAX_REASON_CHARS};
use relay_wire::keys::{fingerprint, SigningKey};
use serde_json::Value;

use crate::access::{self, Target};
use crate::fail::{Code, Failure};

/// Run the command; prints one line (or the JSON object) saying what was done.
///
/// # Errors
/// Usage (KEY neither a key nor a fingerprint of 4 to 16 hex digits, a reason over
/// [`MAX_REASON_CHARS`]); the relay's refusal or the offline one (unknown
/// key, prefix matching several keys, queue over the purge bound) as `Store`; `InUse` while a
/// relay holds the store and its socket does not answer.
pub(crate) fn run(t: &Target, action: &Action, json: bool) -> Result<(), Failure> {
    revoke::check_target(&action.target).map_err(|why| Failure::new(Code::Usage, why))?;
    if action.reason.chars().count() > MAX_REASON_CHARS {
        return Err(Failure::new(
            Code::Usage,
            format!("--reason is longer than {MAX_REASON_CHARS} characters"),
        ));
    }
    let (done, via) = match t.ask_relay(&Request::Revoke(action.clone()))? {
        Some(reply) => (reply.finish()?, "through the running relay"),
        None if t.shared() => (offline(t, action)?, "in the database"),
        None => (offline(t, action)?, "offline"),
    };
    if json {
        println!("{done}");
    } else {
        println!("{} ({via}; recorded in the relay log)", describe(&done));
    }
    Ok(())
}

/// Revoke or purge on a stopped store, as the relay would.
fn offline(t: &Target, action: &Action) -> Result<Value, Failure> {
    let what = if action.revoke {
        "revoke offline"
    } else {
        "purge offline"
    };
    let store = access::open_exclusive(t, what).map_err(|f| {
        if f.code == Code::InUse {
            Failure::new(
                Code::InUse,
                format!("{} (its admin socket does not answer)", f.msg),
            )
        } else {
            f
        }
    })?;
    let result = relay_key(t, store.as_ref(), action.purge).and_then(|key| {
        let revoker = Revoker::new(Arc::new(key), &Limits::default());
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        revoke::run(store.as_ref(), &revoker, action, uid)
            .map_err(|why| Failure::new(Code::Store, why))
    });
    access::close(store)?;
    result
}

/// The relay's own key (`MBX_RELAY_KEY`, else `relay.key` in the relay's directory), checked
/// against the store's pinned one. A revocation without a purge queues no notice and so signs
/// nothing: without a key it uses a throwaway one.
pub(crate) fn relay_key(
    t: &Target,
    store: &dyn RelayStore,
    needed: bool,
) -> Result<SigningKey, Failure> {
    let env = std::env::var(KEY_ENV).ok();
    let found = match &t.relay_dir {
        Some(dir) => load_existing_key(dir, env.as_deref()).map(|k| k.map(|(key, _)| key)),
        // No relay directory (a PostgreSQL store named by its url alone): the variable only.
        None => env
            .as_deref()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(|v| {
                SigningKey::from_key_file(v)
                    .map_err(|e| format!("{KEY_ENV} is not a valid relay key ({e})"))
            })
            .transpose(),
    }
    .map_err(|why| Failure::new(Code::Store, why))?;
    let Some(key) = found else {
        if needed {
            let file = match &t.relay_dir {
                Some(dir) => format!("put relay.key in {}", dir.display()),
                None => "give --store-dir of a relay holding relay.key".to_string(),
            };
            return Err(Failure::new(
                Code::Store,
                format!(
                    "purging queues expiry notices signed by the relay key: set {KEY_ENV} or {file}"
                ),
            ));
        }
        return Ok(SigningKey::generate());
    };
    if let Some(pinned) = store.meta()?.relay_pubkey {
        if pinned != key.public() {
            return Err(Failure::new(
                Code::Store,
                format!(
                    "the relay key {} is not this store's ({}); notices signed by it would not verify",
                    fingerprint(&key.public()),
                    fingerprint(&pinned)
                ),
            ));
        }
    }
    Ok(key)
}

/// `revoked ab12-... (alice): 1 allowlists changed, 3 items (1234 bytes) purged, 3 expiry
/// notices queued`.
fn describe(v: &Value) -> String {
    let n = |k: &str| v[k].as_u64().unwrap_or(0);
    let fp = v["fingerprint"].as_str().unwrap_or("-");
    let name = v["host_name"].as_str().unwrap_or("-");
    let mut parts = Vec::new();
    let head = if v["action"] == "revoke" {
        if v["already_revoked"] == true {
            parts.push("it was revoked already".to_string());
        } else {
            parts.push(format!("{} allowlists changed", n("lists_changed")));
        }
        "revoked"
    } else {
        "purged"
    };
    if v["purge"] == true {
        parts.push(format!(
            "{} items ({} bytes) purged, {} expiry notices queued",
            n("purged_items"),
            n("purged_bytes"),
            n("notices")
        ));
    }
    format!("{head} {fp} ({name}): {}", parts.join(", "))
}
