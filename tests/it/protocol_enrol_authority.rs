//! docs/protocol.md §3 "Enrolment" with a pluggable enrolment authority (spec §8): the optional
//! `proof` reaches the authority; a refusal or a failing authority answers
//! `403 {"error":"enrolment not authorized[: <reason, at most 200 chars>]","code":"DENIED"}` and
//! stores nothing; an allowed enrolment records the authority's name and account.
//!
//! The relay runs with the test authority of the `failpoints` build
//! (`MBX_RELAY_TEST_AUTHORITY=proof-stub`), which decides by `proof`: none → allow; `{"account":A}`
//! → allow inside A; `{"deny":R}` → refuse with reason R; `{"fail":true}` → unavailable;
//! `{"panic":true}` → panics.
//!
//! Closed enrolment runs the real authorities: `--enrol-authority allowlist` over a file the test
//! rewrites (reloaded on change and on SIGHUP), and `--enrol-authority invite` with codes from
//! `relay-tool invite`.
use crate::common;
use relay_keyspace::RelayStore;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::keys::parse_pubkey;
use serde_json::{json, Value};
use std::time::Duration;

fn stub_relay(backend: Backend, args: &[&str]) -> Relay {
    let mut all: Vec<&str> = GENEROUS.to_vec();
    all.extend_from_slice(args);
    let opts = backend
        .opts(&all)
        .env("MBX_RELAY_TEST_AUTHORITY", "proof-stub");
    Relay::launch(opts).expect("relay with the test authority starts")
}

/// A fresh challenge for `h`.
fn challenge(relay: &Relay, h: &Host) -> String {
    h.challenge(relay).ok()["challenge"]
        .as_str()
        .expect("challenge")
        .to_string()
}

/// Challenge, then enrol with this `proof` (none when `Value::Null`... is sent as null).
fn enrol_with(relay: &Relay, h: &Host, proof: Option<Value>) -> Response {
    let ch = challenge(relay, h);
    let mut body = h.enrol_body(&ch, "", None);
    if let Some(p) = proof {
        body["proof"] = p;
    }
    relay.post_json("/v1/relay/enrol", &body)
}

fn denied(text: &str) -> Value {
    json!({"error": text, "code": "DENIED"})
}

/// The enrolment row of `h`: `(authorized_by, account, authority_rank)`. On fjall read from the
/// store of the relay, stopped for that and started again; on PostgreSQL from the database.
fn stored_enrolment(relay: &mut Relay, h: &Host) -> Option<(String, Option<String>, u8)> {
    let key = parse_pubkey(&h.pubkey()).expect("key");
    if let Some(url) = relay.db_url() {
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        let row = psql(
            url,
            &format!(
                "SELECT authorized_by, authority_rank, account IS NULL, coalesce(account, '') \
                 FROM enrolments WHERE host_pubkey = '\\x{hex}'::bytea"
            ),
        );
        if row.is_empty() {
            return None;
        }
        let f: Vec<&str> = row.split('|').collect();
        let account = (f[2] == "f").then(|| f[3].to_string());
        return Some((f[0].to_string(), account, f[1].parse().expect("rank")));
    }
    relay.kill9();
    let opts = relay_keyspace::OpenOptions {
        create: false,
        ..Default::default()
    };
    let store = relay_keyspace::Store::open(relay.store_dir(), opts).expect("open store");
    let e = store.enrolment(&key).expect("read");
    store.close().expect("close");
    relay.start_again().expect("restart");
    e.map(|e| (e.authorized_by, e.account, e.authority_rank))
}

fn a_refusing_authority_answers_403_denied_with_its_reason_and_stores_nothing(backend: Backend) {
    // One live enrolment at most: a refused enrolment that took room would lock out the next.
    let relay = stub_relay(backend, &["--max-enrolments", "1"]);
    let h = Host::new("refused");
    let r = enrol_with(&relay, &h, Some(json!({"deny": "not on the guest list"})));
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        r.json(),
        denied("enrolment not authorized: not on the guest list")
    );
    h.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    assert!(h.info(&relay).get("you").is_none(), "not enrolled");
    // The refusal consumed the challenge: the same signed statement cannot try another proof.
    let ch = challenge(&relay, &h);
    let mut body = h.enrol_body(&ch, "", None);
    body["proof"] = json!({"deny": null});
    let r = relay.post_json("/v1/relay/enrol", &body);
    assert_eq!(r.json(), denied("enrolment not authorized"));
    body["proof"] = json!({"account": "acme"});
    relay
        .post_json("/v1/relay/enrol", &body)
        .assert_error(401, "no pending enrolment challenge");
    // Nothing was stored: the live count is still 0, so another key takes the one place...
    let other = Host::new("other");
    assert_eq!(enrol_with(&relay, &other, None).ok(), json!({"ok": true}));
    // ...and the refused key is not enrolled but may enrol when the authority allows (here
    // the relay is full, so it gets FULL, proving it is a new enrolment and not a stored one).
    let r = enrol_with(&relay, &h, None);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"error": "relay enrolment capacity reached", "code": "FULL"})
    );
}

fn a_refused_key_enrols_later_when_the_authority_allows(backend: Backend) {
    let relay = stub_relay(backend, &[]);
    let h = Host::new("later");
    let r = enrol_with(&relay, &h, Some(json!({"deny": ""})));
    assert_eq!(r.json(), denied("enrolment not authorized"), "empty reason");
    assert_eq!(enrol_with(&relay, &h, None).ok(), json!({"ok": true}));
    assert_eq!(h.info(&relay)["you"]["host"], json!("later"));
}

fn a_refusal_reason_is_cut_to_200_characters(backend: Backend) {
    let relay = stub_relay(backend, &[]);
    let h = Host::new("long");
    let reason = format!("{}{}", "r".repeat(200), "cut-off-tail");
    let r = enrol_with(&relay, &h, Some(json!({ "deny": reason })));
    assert_eq!(r.status, 403);
    assert_eq!(
        r.json(),
        denied(&format!("enrolment not authorized: {}", "r".repeat(200)))
    );
    // Exactly 200 is kept whole.
    let exact = "e".repeat(200);
    let r = enrol_with(&relay, &h, Some(json!({ "deny": exact })));
    assert_eq!(
        r.json(),
        denied(&format!("enrolment not authorized: {exact}"))
    );
}

fn a_failing_authority_answers_403_unavailable_and_stores_nothing(backend: Backend) {
    let relay = stub_relay(backend, &["--max-enrolments", "1"]);
    let h = Host::new("failing");
    for proof in [json!({"fail": true}), json!({"panic": true})] {
        let r = enrol_with(&relay, &h, Some(proof.clone()));
        assert_eq!(r.status, 403, "{proof}: {}", r.text());
        assert_eq!(
            r.json(),
            denied("enrolment not authorized: the enrolment authority is unavailable"),
            "{proof}"
        );
    }
    relay.assert_alive();
    h.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    // Nothing stored: the one place is still free for the same key.
    assert_eq!(enrol_with(&relay, &h, None).ok(), json!({"ok": true}));
}

fn an_allowed_enrolment_records_the_authority_name_and_account(backend: Backend) {
    let mut relay = stub_relay(backend, &[]);
    let a = Host::new("laptop");
    assert_eq!(
        enrol_with(&relay, &a, Some(json!({"account": "acme"}))).ok(),
        json!({"ok": true})
    );
    let e = stored_enrolment(&mut relay, &a).expect("enrolled");
    assert_eq!(e, ("test-proof-stub".into(), Some("acme".into()), 1));
}

fn the_default_authority_is_host_key_challenge_and_passes_any_proof(backend: Backend) {
    let mut relay = backend.start_generous(&[]);
    let h = Host::new("default");
    // The default authority allows every key, whatever the proof says.
    assert_eq!(
        enrol_with(&relay, &h, Some(json!({"deny": "ignored"}))).ok(),
        json!({"ok": true})
    );
    let e = stored_enrolment(&mut relay, &h).expect("enrolled");
    assert_eq!(e, ("host-key-challenge".into(), None, 0));
}

fn a_name_is_unique_inside_a_proven_account_409_name_taken(backend: Backend) {
    let relay = stub_relay(backend, &[]);
    let first = Host::new("desk");
    assert_eq!(
        enrol_with(&relay, &first, Some(json!({"account": "acme"}))).ok(),
        json!({"ok": true})
    );
    // Another key, same name (case-insensitively), same account: refused, nothing stored.
    let second = Host::new("DESK");
    let r = enrol_with(&relay, &second, Some(json!({"account": "acme"})));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({
            "error": "host name DESK is already enrolled in this account with another key",
            "code": "NAME_TAKEN"
        })
    );
    second
        .get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    // Another account, or no account, may use the name.
    let third = Host::new("desk");
    assert_eq!(
        enrol_with(&relay, &third, Some(json!({"account": "globex"}))).ok(),
        json!({"ok": true})
    );
    assert_eq!(enrol_with(&relay, &second, None).ok(), json!({"ok": true}));
}

/// A relay run with `--enrol-authority allowlist` over `list` (a file in a temp dir).
fn allowlist_relay(backend: Backend, list: &std::path::Path) -> Relay {
    let path = list.to_str().expect("utf-8 path");
    backend.start_generous(&["--enrol-authority", "allowlist", "--enrol-allowlist", path])
}

fn not_listed() -> Value {
    denied("enrolment not authorized: this host key is not on the relay's allow-list")
}

/// `h` enrols (`true`) or is refused as not listed (`false`), with a fresh challenge.
fn enrols(relay: &Relay, h: &Host) -> bool {
    let r = enrol_with(relay, h, None);
    match r.status {
        200 => true,
        403 => {
            assert_eq!(r.json(), not_listed());
            false
        }
        other => panic!("unexpected {other}: {}", r.text()),
    }
}

fn an_allowlist_relay_enrols_only_listed_keys_and_reloads_on_change_and_sighup(backend: Backend) {
    let tmp = tempfile::tempdir().expect("tmp");
    let list = tmp.path().join("hosts.allow");
    let (a, b, c) = (Host::new("alpha"), Host::new("beta"), Host::new("gamma"));
    std::fs::write(
        &list,
        format!(
            "# our hosts
{} alpha's laptop

",
            a.pubkey()
        ),
    )
    .unwrap();
    let mut relay = allowlist_relay(backend, &list);
    assert!(enrols(&relay, &a));
    assert!(!enrols(&relay, &b), "not listed");
    b.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    // A changed file is read again within about a second: beta in, alpha out for new
    // enrolments (alpha's enrolment stays until an admin revokes it).
    std::fs::write(
        &list,
        format!(
            "{}
",
            b.pubkey()
        ),
    )
    .unwrap();
    let in_force = wait_for(Duration::from_secs(15), || enrols(&relay, &b).then_some(()));
    assert!(in_force.is_some(), "the changed list took effect");
    assert!(!enrols(&relay, &a), "removed from the list");
    assert!(h_is_live(&relay, &a), "an enrolled host keeps working");
    // Same length, same inode, the old modified time: only SIGHUP makes the relay read it.
    let before = std::fs::metadata(&list).unwrap().modified().unwrap();
    std::fs::write(
        &list,
        format!(
            "{}
",
            c.pubkey()
        ),
    )
    .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&list)
        .unwrap()
        .set_modified(before)
        .unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    assert!(!enrols(&relay, &c), "an unnoticed change is not in force");
    let pid = relay.pid().expect("relay pid");
    // SAFETY: kill with a live child's pid and a valid signal has no preconditions.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
    let in_force = wait_for(Duration::from_secs(15), || enrols(&relay, &c).then_some(()));
    assert!(in_force.is_some(), "SIGHUP reloaded the list");
    // A broken file keeps the list in force.
    std::fs::write(
        &list,
        "not a key
",
    )
    .unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
    std::thread::sleep(Duration::from_millis(1_500));
    relay.assert_alive();
    assert!(enrols(&relay, &c), "the last good list stays");
    // (A restart would refuse that file: put a good one back before stored_enrolment's.)
    std::fs::write(&list, format!("{}\n", c.pubkey())).unwrap();
    let e = stored_enrolment(&mut relay, &c).expect("enrolled");
    assert_eq!(e, ("allowlist".into(), None, 1));
}

/// Whether `h`'s hop is accepted.
fn h_is_live(relay: &Relay, h: &Host) -> bool {
    h.get(relay, "/v2/relay/items").status == 200
}

fn an_allowlist_relay_refuses_to_start_on_a_bad_or_missing_list(backend: Backend) {
    let tmp = tempfile::tempdir().expect("tmp");
    let list = tmp.path().join("hosts.allow");
    std::fs::write(
        &list,
        format!(
            "{}
bogus-line
",
            Host::new("a").pubkey()
        ),
    )
    .unwrap();
    let path = list.to_str().unwrap();
    for (args, why) in [
        (
            vec!["--enrol-authority", "allowlist", "--enrol-allowlist", path],
            "line 2",
        ),
        (
            vec!["--enrol-authority", "allowlist"],
            "needs --enrol-allowlist",
        ),
        (
            vec!["--enrol-allowlist", path],
            "only with --enrol-authority allowlist",
        ),
        (
            vec!["--enrol-authority", "tokens"],
            "not an enrolment authority",
        ),
    ] {
        let err = Relay::launch(backend.opts(&args)).err().expect("refused");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    // `serve --check` reads the list as a start would, and says how many keys it holds.
    std::fs::write(&list, format!("{}\n", Host::new("a").pubkey())).unwrap();
    let store = tmp.path().join("store");
    let out = relay_exits(
        &[
            "serve",
            "--check",
            "--store-dir",
            store.to_str().unwrap(),
            "--enrol-authority",
            "allowlist",
            "--enrol-allowlist",
            path,
        ],
        &[],
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(
        said.contains("enrolment authority: allowlist (1 keys)"),
        "{said}"
    );
}

/// A relay run with `--enrol-authority invite`.
fn invite_relay(backend: Backend) -> Relay {
    backend.start_generous(&["--enrol-authority", "invite"])
}

/// `relay-tool invite` against `relay` (through its admin socket): the code.
fn issue_invite(relay: &Relay, expires: &str) -> String {
    let dir = relay.store_dir().to_str().expect("utf-8").to_string();
    let out = relay_tool(&[
        "invite",
        "--store-dir",
        &dir,
        "--expires",
        expires,
        "--note",
        "for a test host",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "relay-tool invite: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["invite"].as_str().map(str::len), Some(16), "{v}");
    v["code"].as_str().expect("code").to_string()
}

fn invite_refused() -> Value {
    denied("enrolment not authorized: the invite code is unknown, used or expired")
}

fn an_invite_relay_enrols_one_new_key_per_code_before_it_expires(backend: Backend) {
    let mut relay = invite_relay(backend);
    let (a, b) = (Host::new("alpha"), Host::new("beta"));
    let r = enrol_with(&relay, &a, None);
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(
        r.json(),
        denied(
            "enrolment not authorized: this relay admits invited hosts only: put the operator's \
             invite code in proof.invite"
        )
    );
    let made_up = json!({"invite": "mbxi-00000000000000000000000000000000"});
    assert_eq!(
        enrol_with(&relay, &a, Some(made_up)).json(),
        invite_refused()
    );
    let code = issue_invite(&relay, "7d");
    let proof = json!({ "invite": code });
    assert_eq!(
        enrol_with(&relay, &a, Some(proof.clone())).ok(),
        json!({"ok": true})
    );
    // Single use: another key cannot take it; the key that took it re-enrols with or without.
    assert_eq!(
        enrol_with(&relay, &b, Some(proof.clone())).json(),
        invite_refused()
    );
    b.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    assert_eq!(
        enrol_with(&relay, &a, Some(proof)).ok(),
        json!({"ok": true})
    );
    assert_eq!(enrol_with(&relay, &a, None).ok(), json!({"ok": true}));
    // An expired code admits nobody.
    let short = issue_invite(&relay, "1s");
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(
        enrol_with(&relay, &b, Some(json!({ "invite": short }))).json(),
        invite_refused()
    );
    // The store keeps the hash only: the code is nowhere in a dump.
    let dir = relay.store_dir().to_str().expect("utf-8").to_string();
    let dump = relay_tool(&["dump", "--store-dir", &dir, "--json"]);
    assert!(
        dump.status.success(),
        "{}",
        String::from_utf8_lossy(&dump.stderr)
    );
    let dumped = String::from_utf8_lossy(&dump.stdout);
    assert!(!dumped.contains(&short[5..]), "an invite code was stored");
    if backend == Backend::Fjall {
        assert!(
            dumped.contains("\"invite\":"),
            "the unused invite is listed"
        );
    }
    let e = stored_enrolment(&mut relay, &a).expect("enrolled");
    assert_eq!(e, ("invite".into(), None, 1));
    // With the relay stopped, relay-tool stores the invite in the store itself.
    assert_eq!(relay.terminate(Duration::from_secs(20)), Some(0));
    let mut args = vec!["invite", "--store-dir", &dir, "--expires", "1h", "--json"];
    if let Some(url) = relay.db_url() {
        args.extend(["--store", url]);
    }
    let out = relay_tool(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    let code = v["code"].as_str().expect("code").to_string();
    relay.start_again().expect("restart");
    assert_eq!(
        enrol_with(&relay, &b, Some(json!({ "invite": code }))).ok(),
        json!({"ok": true})
    );
}

/// Our host (`mbx-relay host`) joins an invite relay with the operator's code: `relay set URL
/// --invite CODE`, then `sync` enrols presenting it; the code is forgotten once used.
fn our_host_enrols_on_an_invite_relay_with_the_operators_code(backend: Backend) {
    use relay_testkit::host::HostCli;
    let relay = invite_relay(backend);
    let url = format!("http://{}", relay.addr());
    let tmp = tempfile::tempdir().expect("tmp");
    let a = HostCli::init(tmp.path(), "alpha");
    a.ok(&["relay", "set", &url]);
    let err = a.run(&["sync"]).expect_err("no invite: refused");
    assert!(err.contains("admits invited hosts only"), "{err}");
    let code = issue_invite(&relay, "1h");
    a.ok(&["relay", "set", &url, "--invite", &code]);
    a.sync();
    // Another host given the same code is refused: single use.
    let b = HostCli::init(tmp.path(), "beta");
    b.ok(&["relay", "set", &url, "--invite", &code]);
    let err = b.run(&["sync"]).expect_err("a used code: refused");
    assert!(err.contains("unknown, used or expired"), "{err}");
    // The host that used it syncs on without it.
    a.sync();
}

backend_tests! {
    our_host_enrols_on_an_invite_relay_with_the_operators_code,
    an_allowlist_relay_enrols_only_listed_keys_and_reloads_on_change_and_sighup,
    an_allowlist_relay_refuses_to_start_on_a_bad_or_missing_list,
    an_invite_relay_enrols_one_new_key_per_code_before_it_expires,
    a_refusing_authority_answers_403_denied_with_its_reason_and_stores_nothing,
    a_refused_key_enrols_later_when_the_authority_allows,
    a_refusal_reason_is_cut_to_200_characters,
    a_failing_authority_answers_403_unavailable_and_stores_nothing,
    an_allowed_enrolment_records_the_authority_name_and_account,
    the_default_authority_is_host_key_challenge_and_passes_any_proof,
    a_name_is_unique_inside_a_proven_account_409_name_taken,
}
