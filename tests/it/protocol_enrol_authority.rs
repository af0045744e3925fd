//! docs/protocol.md §3 "Enrolment" with a pluggable enrolment authority (spec §8): the optional
//! `proof` reaches the authority; a refusal or a failing authority answers
//! `403 {"error":"enrolment not authorized[: <reason, at most 200 chars>]","code":"DENIED"}` and
//! stores nothing; an allowed enrolment records the authority's name and account.
//!
//! The relay runs with the test authority of the `failpoints` build
//! (`MBX_RELAY_TEST_AUTHORITY=proof-stub`), which decides by `proof`: none → allow; `{"account":A}`
//! → allow inside A; `{"deny":R}` → refuse with reason R; `{"fail":true}` → unavailable;
//! `{"panic":true}` → panics.
use crate::common;
use relay_keyspace::RelayStore;

use common::{backend_tests, Backend};

use common::*;
use relay_wire::keys::parse_pubkey;
use serde_json::{json, Value};

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

backend_tests! {
    a_refusing_authority_answers_403_denied_with_its_reason_and_stores_nothing,
    a_refused_key_enrols_later_when_the_authority_allows,
    a_refusal_reason_is_cut_to_200_characters,
    a_failing_authority_answers_403_unavailable_and_stores_nothing,
    an_allowed_enrolment_records_the_authority_name_and_account,
    the_default_authority_is_host_key_challenge_and_passes_any_proof,
    a_name_is_unique_inside_a_proven_account_409_name_taken,
}
