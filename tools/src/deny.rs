//! `relay-tool deny`: add a deny-list entry (spec §8 "Revocation") by host key or by the
//! accounts service's `client_id`, through the running relay's admin socket, else on the store
//! opened here. A host entry revokes the host too: its hops are refused and its open streams and
//! waiting pulls end at once (on every relay process sharing the store within a second).

use std::sync::Arc;
use std::time::Duration;

use mbx_relay::admin::deny::{self, DenyAction, Target as DenyTarget};
use mbx_relay::admin::proto::Request;
use relay_core::{Limits, Revoker};
use relay_store::{Clock, SystemClock};

use crate::access::{self, Target};
use crate::fail::{Code, Failure};

/// Longest life a deny entry may be given.
const MAX_TTL: Duration = Duration::from_secs(365 * 86_400);

/// Add the entry; prints what was denied (or the JSON summary).
///
/// # Errors
/// Usage (no or both targets, a bad target, a ttl of 0 or over a year, a long note); the store's
/// refusal or failure; `InUse` while a relay holds the store and its socket does not answer.
pub(crate) fn run(
    t: &Target,
    host: Option<String>,
    client: Option<String>,
    ttl: Duration,
    note: &str,
    json: bool,
) -> Result<(), Failure> {
    let usage = |m: String| Failure::new(Code::Usage, m);
    let target = match (host, client) {
        (Some(h), None) => DenyTarget::Host(h),
        (None, Some(c)) => DenyTarget::Client(c),
        _ => return Err(usage("give one of --host KEY and --client ID".into())),
    };
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(usage(
            "--expires must be more than 0 and at most 365d".into(),
        ));
    }
    let action = DenyAction {
        target,
        ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        note: note.to_string(),
    };
    deny::check(&action).map_err(usage)?;
    let done = match t.ask_relay(&Request::Deny(action.clone()))? {
        Some(reply) => reply.finish()?,
        None => {
            let store = access::open_exclusive(t, "deny offline")?;
            let result = crate::revoke::relay_key(t, store.as_ref(), false).and_then(|key| {
                let revoker = Revoker::new(Arc::new(key), &Limits::default());
                // SAFETY: geteuid has no preconditions and cannot fail.
                let uid = unsafe { libc::geteuid() };
                deny::run(store.as_ref(), &revoker, &action, uid, SystemClock.now_ms())
                    .map_err(|why| Failure::new(Code::Store, why))
            });
            access::close(store)?;
            result?
        }
    };
    if json {
        println!("{done}");
    } else {
        let what = match done["deny"].as_str() {
            Some("host") => format!(
                "host {}{}",
                done["fingerprint"].as_str().unwrap_or("-"),
                if done["revoked"] == true {
                    " (its enrolment revoked)"
                } else {
                    ""
                }
            ),
            _ => format!(
                "client {} ({} live enrolments of it revoked)",
                done["client_id"].as_str().unwrap_or("-"),
                done["revoked"].as_u64().unwrap_or(0)
            ),
        };
        println!(
            "denied {what} until {} (recorded in the relay log)",
            relay_wire::time::iso_ms(done["expires_ms"].as_u64().unwrap_or(0))
        );
    }
    Ok(())
}
