//! `mbx-relay host doctor` (the spec's G13 doctor, §1, §8): one line per check, `ok` or `FAIL`
//! with the command that fixes it, exit code 1 when any check fails. Checks: relay configured and
//! reachable, pinned relay key against the served one, no rotation left half done, enrolment (by
//! this host's key, read from the relay's signed `you`), enc-key ad present and fresh, allowlist
//! published for the pinned peers, clock skew against the relay's `Date` header; first, that
//! other local users can reach nothing in the host directory. It reaches the relay through the
//! stored endpoint (URL and `--ca`), exactly as `sync` does. While `host run` holds the store,
//! doctor runs beside it: the daemon hands over what doctor reads from the store
//! ([`StoreFacts`], through its socket) and doctor does the rest itself, changing nothing.

use std::path::Path;
use std::process::ExitCode;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::client::{Endpoint, RelayClient};
use super::enc_ad::{RelayView, RENEW_BEFORE_MS};
use super::hostdir::command;
use super::identity::Identity;
use super::rotate;
use super::store::{HostStore, Peer, RelayConfig};
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

/// What the checks read from the host store: read here when no daemon runs, else by the daemon
/// that holds the store and handed over its socket ([`super::local::doctor_facts`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoreFacts {
    name: String,
    /// The new key of an interrupted rotation.
    rotating_to: Option<String>,
    relay: Option<RelayConfig>,
    /// How to reach it (its URL and `relay set --ca`), as `sync` does.
    endpoint: Option<Endpoint>,
    peers: Vec<Peer>,
    /// The publication record (it names the pinned keys published with, enrol.rs).
    published: Option<String>,
}

impl StoreFacts {
    /// Read them from `store`.
    ///
    /// # Errors
    /// A damaged store record.
    pub(crate) fn read(store: &HostStore) -> Result<StoreFacts, HostError> {
        let relay = store.relay()?;
        let endpoint = relay.as_ref().map(|r| store.endpoint_of(r)).transpose()?;
        Ok(StoreFacts {
            name: store.name()?.unwrap_or_default(),
            rotating_to: rotate::pending(store)?.map(|i| i.new_pub),
            relay,
            endpoint,
            peers: store.peers()?,
            published: store.published()?,
        })
    }
}

/// The store's facts and, when a daemon holds the store, a check line naming it.
fn store_facts(dir: &Path) -> Result<(StoreFacts, Option<Check>), HostError> {
    match super::local::doctor_facts(dir) {
        None => Ok((StoreFacts::read(&HostStore::open(dir)?)?, None)),
        Some(answer) => {
            let (pid, value) = answer?;
            let facts = serde_json::from_value(value)
                .map_err(|e| HostError::Store(format!("the host daemon's answer: {e}")))?;
            let line = ok(
                "host daemon",
                format!("running (pid {pid}); the store read through it"),
            );
            Ok((facts, Some(line)))
        }
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
    let (facts, daemon) = store_facts(dir)?;
    out.extend(daemon);
    let cmd = |rest: &str| format!("run `{}`", command(dir, rest));
    if let Some(new_pub) = &facts.rotating_to {
        out.push(fail(
            "key rotation",
            format!("a rotation to {} was interrupted", fp(new_pub)),
            format!("{} (or `host sync`) to finish it", cmd("rotate")),
        ));
    }
    let (Some(relay), Some(endpoint)) = (&facts.relay, &facts.endpoint) else {
        out.push(fail(
            "relay configured",
            "no relay set",
            cmd("relay set URL [--key FINGERPRINT] [--ca FILE]"),
        ));
        return Ok(out);
    };
    let opts = SyncOptions::from_env();
    let client = RelayClient::new(endpoint, &facts.name, &id.host, opts.timeout)?;
    let info = match client.get("/v2/relay/info", None, true) {
        Ok(a) if a.status == 200 => a.body,
        Ok(a) => {
            out.push(fail(
                "relay reachable",
                format!("{} answered {}", relay.url, a.error()),
                format!(
                    "check the URL and that the relay runs (`{}` to change it)",
                    command(dir, "relay set URL")
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
                command(
                    dir,
                    &format!("relay set {} --key {}", relay.url, fp(served))
                )
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
        out.push(enc_ad_check(&info, &id.enc.public_b64(), opts, dir));
    }
    out.push(allowlist_check(&facts, dir));
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
fn enc_ad_check(info: &Value, enc_pub: &str, opts: SyncOptions, dir: &Path) -> Check {
    const NAME: &str = "enc-key ad";
    let fix = &format!("run `{}` (it republishes the ad)", command(dir, "sync"));
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
fn allowlist_check(facts: &StoreFacts, dir: &Path) -> Check {
    const NAME: &str = "allowlist";
    if facts.peers.is_empty() {
        return fail(
            NAME,
            "no peer pinned: nobody may push to this host once an allowlist is published",
            format!("pin each peer: `{}`", command(dir, "peer add NAME PUBKEY")),
        );
    }
    let published = facts.published.as_deref().unwrap_or_default();
    let missing: Vec<&str> = facts
        .peers
        .iter()
        .filter(|p| !published.contains(&p.pubkey))
        .map(|p| p.name.as_str())
        .collect();
    if !missing.is_empty() {
        return fail(
            NAME,
            format!(
                "not published for {} since the last peer change",
                missing.join(", ")
            ),
            format!("run `{}`", command(dir, "sync")),
        );
    }
    let names: Vec<&str> = facts.peers.iter().map(|p| p.name.as_str()).collect();
    ok(NAME, format!("published for {}", names.join(", ")))
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
