//! `relay-tool invite`: issue a single-use enrolment invite for a relay run with
//! `--enrol-authority invite`. The code is made here and printed once; the store keeps only its
//! SHA-256 (through the running relay's admin socket, else on the store opened here: a stopped
//! directory store, or a PostgreSQL store beside its relays).

use std::time::Duration;

use mbx_relay::admin::invite;
use mbx_relay::admin::proto::Request;
use relay_store::{Clock, SystemClock, MAX_REASON_CHARS};

use crate::access::{self, Target};
use crate::fail::{Code, Failure};

/// Longest life an invite may be given (an unused code should not outlive the operator's memory
/// of whom it was for).
const MAX_TTL: Duration = Duration::from_secs(90 * 86_400);

/// Issue one invite valid for `ttl`; prints the code (or `{"code","invite","expires_ms"}`).
///
/// # Errors
/// Usage (a `ttl` of 0 or over 90 days, a note over [`MAX_REASON_CHARS`]); the store's refusal
/// (too many unexpired invites) or failure; `InUse` while a relay holds the store and its socket
/// does not answer.
pub(crate) fn run(t: &Target, ttl: Duration, note: &str, json: bool) -> Result<(), Failure> {
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(Failure::new(
            Code::Usage,
            "--expires must be more than 0 and at most 90d",
        ));
    }
    if note.chars().count() > MAX_REASON_CHARS {
        return Err(Failure::new(
            Code::Usage,
            format!("--note is longer than {MAX_REASON_CHARS} characters"),
        ));
    }
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let (code, inv) = relay_core::issue_invite(SystemClock.now_ms(), ttl_ms, note);
    let done = match t.ask_relay(&Request::Invite(inv.clone()))? {
        Some(reply) => reply.finish()?,
        None => {
            let store = access::open_exclusive(t, "invite offline")?;
            let stored =
                invite::run(store.as_ref(), &inv).map_err(|why| Failure::new(Code::Store, why));
            access::close(store)?;
            stored?
        }
    };
    if json {
        println!(
            "{}",
            serde_json::json!({ "code": code, "invite": done["invite"], "expires_ms": inv.expires_ms })
        );
    } else {
        println!("{code}");
        eprintln!(
            "invite {} valid until {} (single use; give the code to the host's owner: \
             mbx-relay host relay set URL --invite CODE)",
            done["invite"].as_str().unwrap_or("-"),
            relay_wire::time::iso_ms(inv.expires_ms)
        );
    }
    Ok(())
}
