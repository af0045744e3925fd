//! `mbx-relay host doctor` (the spec's G13 doctor, §1, §8): one line per check, `ok` or `FAIL`
//! with the command that fixes it, exit code 1 when any check fails. Checks: relay configured and
//! reachable, pinned relay key against the served one, no rotation left half done, enrolment (by
//! this host's key, read from the relay's signed `you`), enc-key ad present and fresh, allowlist
//! published for the pinned peers, clock skew against the relay's `Date` header; first, that
//! other local users can reach nothing in the host directory. It reaches the relay through the
//! stored endpoint (URL and `--ca`), exactly as `sync` does.

use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

use super::client::RelayClient;
use super::enc_ad::{RelayView, RENEW_BEFORE_MS};
use super::identity::Identity;
use super::rotate;
use super::store::HostStore;
use super::sync::SyncOptions;
use super::trust::hint_ca;
use super::{now_ms, HostError};
use relay_wire::hop::HOP_SKEW_MS;
use relay_wire::keys::{fingerprint, parse_pubkey};
use relay_wire::time::{iso_ms, parse_date_loose};

/// Clock skew above this fails the check (the relay refuses hops beyond [`HOP_SKEW_MS`]; the
/// `Date` header has one-second resolution).
pub(crate) const MAX_SKEW_MS: i64 = 30_000;

/// One check's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Check {
    pub name: &'static str,
    pub ok: bool,
    pub detail: String,
    /// What to run or do when it failed.
    pub fix: Option<String>,
}

fn ok(name: &'static str, detail: impl Into<String>) -> Check {
    Check {
        name,
        ok: true,
        detail: detail.into(),
        fix: None,
    }
}

fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        name,
        ok: false,
        detail: detail.into(),
        fix: Some(fix.into()),
    }
}

/// `host doctor`: print every check and exit 0 only when all pass.
pub(crate) fn run(dir: &Path, as_json: bool) -> ExitCode {
    let checks = match checks(dir) {
        Ok(c) => c,
        Err(e) => vec![fail("host store", e.to_string(), "see the message above")],
    };
    let all_ok = checks.iter().all(|c| c.ok);
    if as_json {
        let list: Vec<Value> = checks
            .iter()
            .map(|c| json!({"check": c.name, "ok": c.ok, "detail": c.detail, "fix": c.fix}))
            .collect();
        println!("{}", json!({"ok": all_ok, "checks": list}));
    } else {
        for c in &checks {
            println!("{}", line(c));
        }
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `ok   <check>: <detail>` or `FAIL <check>: <detail>; fix: <fix>`.
pub(crate) fn line(c: &Check) -> String {
    match (&c.fix, c.ok) {
        (Some(fix), false) => format!("FAIL {}: {}; fix: {fix}", c.name, c.detail),
        _ => format!("ok   {}: {}", c.name, c.detail),
    }
}

/// Run every check (later checks that need the relay are skipped once it cannot be used).
///
/// # Errors
/// The host store or key files cannot be read.
pub(crate) fn checks(dir: &Path) -> Result<Vec<Check>, HostError> {
    super::hostdir::require_host(dir)?;
    let mut out = vec![permissions_check(dir)];
    if !out[0].ok {
        // The store refuses to open until it is fixed.
        return Ok(out);
    }
    let id = Identity::load(dir)?;
    let store = HostStore::open(dir)?;
    let name = store.name()?.unwrap_or_default();
    let cmd = |rest: &str| format!("run `{}`", store.command(rest));
    if let Some(i) = rotate::pending(&store)? {
        out.push(fail(
            "key rotation",
            format!("a rotation to {} was interrupted", fp(&i.new_pub)),
            format!("{} (or `host sync`) to finish it", cmd("rotate")),
        ));
    }
    let Some(relay) = store.relay()? else {
        out.push(fail(
            "relay configured",
            "no relay set",
            cmd("relay set URL [--key FINGERPRINT] [--ca FILE]"),
        ));
        return Ok(out);
    };
    let opts = SyncOptions::from_env();
    let client = RelayClient::new(&store.endpoint_of(&relay)?, &name, &id.host, opts.timeout)?;
    let info = match client.get("/v2/relay/info", None, true) {
        Ok(a) if a.status == 200 => a.body,
        Ok(a) => {
            out.push(fail(
                "relay reachable",
                format!("{} answered {}", relay.url, a.error()),
                format!(
                    "check the URL and that the relay runs (`{}` to change it)",
                    store.command("relay set URL")
                ),
            ));
            return Ok(out);
        }
        Err(e) => {
            out.push(fail(
                "relay reachable",
                format!("{}: {}", relay.url, hint_ca(e)),
                "check the URL, the network and that the relay runs",
            ));
            return Ok(out);
        }
    };
    out.push(ok(
        "relay reachable",
        format!(
            "{} (epoch {})",
            relay.url,
            info["epoch"].as_str().unwrap_or("?")
        ),
    ));
    let served = info["relay_pubkey"].as_str().unwrap_or("");
    if served != relay.relay_pubkey || relay.offered_key.is_some() {
        out.push(fail(
            "relay key",
            format!("pinned {}, served {}", fp(&relay.relay_pubkey), fp(served)),
            format!(
                "ask the operator; if the new key is confirmed: `{}`",
                store.command(&format!("relay set {} --key {}", relay.url, fp(served)))
            ),
        ));
        return Ok(out);
    }
    out.push(ok("relay key", format!("{} as pinned", fp(served))));
    let me = id.host.public_b64();
    let you = info.get("you");
    if you.and_then(|y| y["pubkey"].as_str()) != Some(me.as_str()) {
        out.push(fail(
            "enrolment",
            format!("this host's key {} is not enrolled on the relay", fp(&me)),
            format!(
                "{} (it enrols); a refusal there names the cause",
                cmd("sync")
            ),
        ));
    } else {
        out.push(ok(
            "enrolment",
            format!(
                "enrolled as {}",
                you.and_then(|y| y["host"].as_str()).unwrap_or("?")
            ),
        ));
        out.push(enc_ad_check(&info, &id.enc.public_b64(), opts, &store));
    }
    out.push(allowlist_check(&store)?);
    out.push(clock_check(&client));
    Ok(out)
}

/// Nothing in the host directory is reachable by other local users (the store refuses to open
/// a loose directory or key file; this also finds loose files deeper in).
fn permissions_check(dir: &Path) -> Check {
    const NAME: &str = "store permissions";
    if let Err(e) = super::hostdir::require(dir) {
        return fail(
            NAME,
            e.to_string(),
            "see the message; nothing else is checked until then",
        );
    }
    let (seen, count, shown) = super::hostdir::loose_entries(dir, 3);
    if count == 0 {
        return ok(
            NAME,
            format!("{seen} entries in {}, all owner-only", dir.display()),
        );
    }
    fail(
        NAME,
        format!(
            "{count} of {seen} entries reachable by other users: {}",
            shown.join("; ")
        ),
        format!("run `chmod -R go= {}`", dir.display()),
    )
}

/// The relay holds our current enc key, v2 ad not expiring within a day (and the v1 pair when
/// this host publishes it).
fn enc_ad_check(info: &Value, enc_pub: &str, opts: SyncOptions, store: &HostStore) -> Check {
    const NAME: &str = "enc-key ad";
    let fix = &format!("run `{}` (it republishes the ad)", store.command("sync"));
    let RelayView::Known {
        enc_pub: v2,
        exp,
        v1,
    } = RelayView::from_info(info)
    else {
        return ok(NAME, "the relay does not report published ads; not checked");
    };
    if opts.enc_ads.v1() && v1.as_deref() != Some(enc_pub) {
        return fail(NAME, "the relay holds no v1 enc key of this host's", fix);
    }
    if !opts.enc_ads.v2() {
        return ok(NAME, "v1 enc key published");
    }
    if v2.as_deref() != Some(enc_pub) {
        let what = if v2.is_some() {
            "the relay's v2 ad names another enc key"
        } else {
            "the relay holds no v2 ad of this host's: peers cannot seal for it"
        };
        return fail(NAME, what, fix);
    }
    let exp_ms = exp.as_deref().and_then(parse_date_loose).unwrap_or(0);
    if exp_ms < (now_ms() + RENEW_BEFORE_MS) as i64 {
        return fail(
            NAME,
            format!("the v2 ad expires {}", exp.as_deref().unwrap_or("(no exp)")),
            fix,
        );
    }
    ok(
        NAME,
        format!("v2 ad current until {}", exp.unwrap_or_default()),
    )
}

/// Pinned peers exist and the allowlist naming them was published after the last peer change.
fn allowlist_check(store: &HostStore) -> Result<Check, HostError> {
    const NAME: &str = "allowlist";
    let peers = store.peers()?;
    if peers.is_empty() {
        return Ok(fail(
            NAME,
            "no peer pinned: nobody may push to this host once an allowlist is published",
            format!("pin each peer: `{}`", store.command("peer add NAME PUBKEY")),
        ));
    }
    // The publication record names the pinned keys it was published with (enrol.rs).
    let published = store.published()?.unwrap_or_default();
    let missing: Vec<&str> = peers
        .iter()
        .filter(|p| !published.contains(&p.pubkey))
        .map(|p| p.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Ok(fail(
            NAME,
            format!(
                "not published for {} since the last peer change",
                missing.join(", ")
            ),
            format!("run `{}`", store.command("sync")),
        ));
    }
    let names: Vec<&str> = peers.iter().map(|p| p.name.as_str()).collect();
    Ok(ok(NAME, format!("published for {}", names.join(", "))))
}

/// This host's clock against the relay's `Date` header.
fn clock_check(client: &RelayClient<'_>) -> Check {
    const NAME: &str = "clock";
    let before = now_ms();
    let date = match client.server_date() {
        Ok(Some(d)) => d,
        Ok(None) => return ok(NAME, "the relay sends no Date header; not checked"),
        Err(e) => return fail(NAME, format!("no answer: {e}"), "check the network"),
    };
    skew_check((before + now_ms()) / 2, &date)
}

/// The clock check for this host's time `local` (ms) against the relay's `Date` header.
pub(crate) fn skew_check(local: u64, date: &str) -> Check {
    const NAME: &str = "clock";
    let Some(relay_ms) = parse_date_loose(date) else {
        return ok(
            NAME,
            format!("unreadable Date header {date:?}; not checked"),
        );
    };
    // The header is truncated to the second: compare against the middle of that second.
    let skew = local as i64 - (relay_ms + 500);
    if skew.abs() > MAX_SKEW_MS {
        return fail(
            NAME,
            format!(
                "this host is {}{} s off the relay ({} here, {date} there)",
                if skew > 0 { "+" } else { "-" },
                skew.abs() / 1_000,
                iso_ms(local)
            ),
            format!(
                "set the system clock (NTP); the relay refuses signed calls more than {} s off",
                HOP_SKEW_MS / 1_000
            ),
        );
    }
    ok(
        NAME,
        format!("within {} s of the relay", MAX_SKEW_MS / 1_000),
    )
}

fn fp(k: &str) -> String {
    parse_pubkey(k)
        .map(|k| fingerprint(&k))
        .unwrap_or_else(|| "(none)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_795_960_800_000; // 2026-11-29T14:00:00.000Z, a Sunday

    #[test]
    fn a_clock_more_than_30_s_off_the_relays_date_header_fails_with_a_fix() {
        let date = "Sun, 29 Nov 2026 14:00:00 GMT";
        assert!(skew_check(NOW + 20_000, date).ok);
        assert!(skew_check(NOW - 20_000, date).ok);
        let ahead = skew_check(NOW + 95_000, date);
        assert!(!ahead.ok);
        assert_eq!(
            line(&ahead),
            "FAIL clock: this host is +94 s off the relay (2026-11-29T14:01:35.000Z here, \
             Sun, 29 Nov 2026 14:00:00 GMT there); fix: set the system clock (NTP); the relay \
             refuses signed calls more than 300 s off"
        );
        assert!(!skew_check(NOW - 3_600_000, date).ok, "behind fails too");
        assert!(
            skew_check(NOW, "garbage").ok,
            "an unreadable header is not a failure"
        );
    }
}
