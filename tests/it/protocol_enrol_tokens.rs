//! The hosted relay's account tokens (spec §8, docs/protocol.md §3 "Account tokens"): a relay
//! started with `--enrol-authority account-tokens` enrols only hosts presenting a token of its
//! issuer, for its URL, bound to a cloud key their host key certified; it verifies tokens offline
//! against the issuer's key set, fetched over HTTPS from a local issuer the test starts
//! (`token_issuer`: a CA made at run time, a JWKS the test rotates and breaks).
use std::time::{Duration, Instant};

use relay_wire::keys::SigningKey;
use serde_json::{json, Value};

use crate::common::*;
use crate::live_util;
use crate::token_issuer::{claims, proof, Issuer, IssuerKey, Serving, AUDIENCE};

/// A relay of `issuer` with these key-set timings (refresh, cache life, retry).
fn token_relay(issuer: &Issuer, timing: [&str; 3]) -> Relay {
    let extra = issuer.relay_args(timing[0], timing[1], timing[2]);
    let mut args: Vec<&str> = GENEROUS.to_vec();
    args.extend(extra.iter().map(String::as_str));
    Relay::start(&args)
}

/// Challenge, then enrol with `proof`.
fn enrol_with(relay: &Relay, h: &Host, proof: Value) -> Response {
    let ch = h.challenge(relay).ok()["challenge"]
        .as_str()
        .expect("challenge")
        .to_string();
    let mut body = h.enrol_body(&ch, "", None);
    body["proof"] = proof;
    relay.post_json("/v1/relay/enrol", &body)
}

/// The proof of a host with a fresh cloud key and a good token of `key` inside `account`.
fn good_proof(h: &Host, key: &IssuerKey, account: &str) -> Value {
    let cloud = SigningKey::generate();
    proof(
        &h.key.public(),
        &h.key,
        &cloud,
        &key.mint(&claims(&cloud, account)),
    )
}

fn denied(reason: &str) -> Value {
    json!({"error": format!("enrolment not authorized: {reason}"), "code": "DENIED"})
}

const UNAVAILABLE: &str = "the enrolment authority is unavailable";

/// Poll `f` every 100 ms until it is true (at most `secs`).
fn wait_until(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < end, "waited {secs} s for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Enrol `h` with a good token of `key`, retrying while the first key-set fetch is under way.
fn enrol_once_keys_are_in(relay: &Relay, h: &Host, key: &IssuerKey) {
    wait_until(20, "the first key-set fetch", || {
        let r = enrol_with(relay, h, good_proof(h, key, "acme"));
        assert!(
            r.status == 200 || r.json() == denied(UNAVAILABLE),
            "{}",
            r.text()
        );
        r.status == 200
    });
}

#[test]
fn a_host_bound_token_enrols_and_every_broken_claim_or_binding_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = IssuerKey::new("k1");
    let issuer = Issuer::start(dir.path(), vec![k1.jwk()]);
    let relay = token_relay(&issuer, ["10m", "1h", "1m"]);
    let good = Host::new("good");
    enrol_once_keys_are_in(&relay, &good, &k1);
    assert_eq!(
        good.pull(&relay, "").status,
        200,
        "the enrolled host's hops work"
    );

    // Each case: a new host, one thing wrong.
    let case = |name: &str, make: &dyn Fn(&Host) -> Value, reason: &str| {
        let h = Host::new(name);
        let r = enrol_with(&relay, &h, make(&h));
        assert_eq!(r.json(), denied(reason), "{name}: {}", r.text());
        assert_eq!(r.status, 403);
        h.get(&relay, "/v2/relay/items")
            .assert_error(401, "bad relay hop");
    };
    let with_claims = |h: &Host, edit: &dyn Fn(&mut Value)| {
        let cloud = SigningKey::generate();
        let mut c = claims(&cloud, "acme");
        edit(&mut c);
        proof(&h.key.public(), &h.key, &cloud, &k1.mint(&c))
    };
    case(
        "no-token",
        &|_| Value::Null,
        "this relay admits hosts with an account token only: put it in proof.token",
    );
    case(
        "wrong-aud",
        &|h| with_claims(h, &|c| c["aud"] = json!("https://api.accounts.test")),
        "the token's aud is not this relay",
    );
    case(
        "other-iss",
        &|h| with_claims(h, &|c| c["iss"] = json!("https://evil.test")),
        "the token's iss is not this relay's issuer",
    );
    case(
        "expired",
        &|h| {
            with_claims(h, &|c| {
                let now = now_ms() as u64 / 1000;
                c["iat"] = json!(now - 1000);
                c["exp"] = json!(now - 400);
            })
        },
        "the token has expired",
    );
    case(
        "long-lived",
        &|h| with_claims(h, &|c| c["exp"] = json!(c["iat"].as_u64().unwrap() + 901)),
        "the token's lifetime is over 15 minutes",
    );
    case(
        "no-client",
        &|h| {
            with_claims(h, &|c| {
                c.as_object_mut().unwrap().retain(|k, _| k != "client_id")
            })
        },
        "the token has no usable client_id",
    );
    case(
        "other-jkt",
        &|h| {
            // The token is bound to another cloud key than the certificate certifies.
            let (cloud, other) = (SigningKey::generate(), SigningKey::generate());
            proof(
                &h.key.public(),
                &h.key,
                &cloud,
                &k1.mint(&claims(&other, "acme")),
            )
        },
        "the token is bound to another key than the certified cloud key",
    );
    case(
        "cert-by-other-host",
        &|h| {
            // Another host key signed the certificate naming this host key.
            let cloud = SigningKey::generate();
            let token = k1.mint(&claims(&cloud, "acme"));
            proof(&h.key.public(), &SigningKey::generate(), &cloud, &token)
        },
        "cloud_cert is not signed by the host key",
    );
    case(
        "cert-of-other-host",
        &|_| {
            // A genuine certificate of another host, presented with its token by this host.
            let (other, cloud) = (SigningKey::generate(), SigningKey::generate());
            proof(
                &other.public(),
                &other,
                &cloud,
                &k1.mint(&claims(&cloud, "acme")),
            )
        },
        "cloud_cert certifies another host key",
    );
    case(
        "forged",
        &|h| {
            let cloud = SigningKey::generate();
            let forger = IssuerKey::new("k1");
            proof(
                &h.key.public(),
                &h.key,
                &cloud,
                &forger.mint(&claims(&cloud, "acme")),
            )
        },
        "the token signature does not verify",
    );
    // The certificate names the relay it is for.
    let h = Host::new("cert-aud");
    let mut p = good_proof(&h, &k1, "acme");
    p["cloud_cert"]["aud"] = json!("https://other-relay.test");
    p["cloud_cert_sig"] = json!(h.key.sign_canonical(&p["cloud_cert"]));
    assert_eq!(
        enrol_with(&relay, &h, p).json(),
        denied("cloud_cert is for another relay")
    );
    assert_eq!(AUDIENCE, "https://relay.test");
}

/// A token naming a `kid` the relay's set lacks waits (at most 5 s) for the fetch it asks for
/// when fetches are allowed: a key the issuer has just rotated in enrols on the first try.
/// While fetches are rate-limited (one per `--token-jwks-retry`) such tokens are refused at once
/// and all of them together ask for one fetch; a key that leaves the set stops at the next one.
#[test]
fn an_unknown_kid_waits_for_one_rate_limited_refetch_and_a_removed_key_stops_verifying() {
    let dir = tempfile::tempdir().unwrap();
    let (k1, k2) = (IssuerKey::new("k1"), IssuerKey::new("k2"));
    let issuer = Issuer::start(dir.path(), vec![k1.jwk()]);
    // No periodic fetch during the test: only the start and unknown kids fetch.
    let relay = token_relay(&issuer, ["1h", "2h", "3s"]);
    enrol_once_keys_are_in(&relay, &Host::new("first"), &k1);
    assert_eq!(issuer.fetches(), 1);

    // The issuer rotates k2 in and signs with it; a fetch is allowed again (3 s after the
    // last): the first enrolment with k2 fetches the set and waits for it.
    std::thread::sleep(Duration::from_millis(3_200));
    issuer.serve(Serving::Keys(vec![k1.jwk(), k2.jwk()]));
    let h2 = Host::new("second");
    let r = enrol_with(&relay, &h2, good_proof(&h2, &k2, "acme"));
    assert_eq!(
        r.status,
        200,
        "a rotated-in key enrols on the first try: {}",
        r.text()
    );
    assert_eq!(issuer.fetches(), 2);

    // Right after that fetch, fetches are rate-limited: unknown kids are refused without a
    // wait, and however many arrive they ask for at most one fetch per 3 s.
    let unknown = "the token's signing key (kid) is not in the issuer's key set; \
                   the relay fetches it again within a minute";
    let stranger = IssuerKey::new("k9");
    let h9 = Host::new("stranger");
    let hammer = Instant::now();
    let mut refusals = 0;
    while hammer.elapsed() < Duration::from_millis(2_500) {
        let asked = Instant::now();
        let r = enrol_with(&relay, &h9, good_proof(&h9, &stranger, "acme"));
        assert_eq!(r.json(), denied(unknown));
        if issuer.fetches() == 2 {
            assert!(
                asked.elapsed() < Duration::from_secs(2),
                "a rate-limited refusal does not wait"
            );
        }
        refusals += 1;
    }
    wait_until(15, "the fetch the refusals asked for", || {
        issuer.fetches() >= 3
    });
    // Past the one more fetch that may come 3 s after that one.
    std::thread::sleep(Duration::from_secs(5));
    // 2.5 s of refusals: the fetch at 3 s after the last, and at most one more for refusals
    // that came after it began.
    assert!(
        (3..=4).contains(&issuer.fetches()),
        "{refusals} refusals asked for {} fetches",
        issuer.fetches() - 2
    );
    let fetched = issuer.fetches();

    // The issuer drops k1. The next fetch (asked for, and here waited for, by another unknown
    // kid: the last fetch was over 3 s ago) replaces the set: k1's tokens stop at once.
    issuer.serve(Serving::Keys(vec![k2.jwk()]));
    let h3 = Host::new("third");
    assert_eq!(
        enrol_with(&relay, &h3, good_proof(&h3, &k1, "acme")).status,
        200,
        "k1 is still in force before the fetch"
    );
    assert_eq!(issuer.fetches(), fetched, "a known kid fetches nothing");
    assert_eq!(
        enrol_with(&relay, &h9, good_proof(&h9, &stranger, "acme")).json(),
        denied(unknown)
    );
    assert_eq!(issuer.fetches(), fetched + 1, "waited for its fetch");
    let h4 = Host::new("fourth");
    assert_eq!(
        enrol_with(&relay, &h4, good_proof(&h4, &k1, "acme")).json(),
        denied(unknown)
    );
    assert_eq!(
        enrol_with(&relay, &h4, good_proof(&h4, &k2, "acme")).status,
        200
    );
}

#[test]
fn a_down_issuer_keeps_the_cached_keys_for_their_life_then_new_enrolments_fail_closed() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = IssuerKey::new("k1");
    let issuer = Issuer::start(dir.path(), vec![k1.jwk()]);
    let relay = token_relay(&issuer, ["1s", "4s", "1s"]);
    let a = Host::new("a");
    enrol_once_keys_are_in(&relay, &a, &k1);

    issuer.serve(Serving::Down);
    let down_at = Instant::now();
    let b = Host::new("b");
    assert_eq!(
        enrol_with(&relay, &b, good_proof(&b, &k1, "acme")).status,
        200,
        "the cached set verifies while the issuer is down"
    );
    let c = Host::new("c");
    wait_until(30, "the cache life to end", || {
        let r = enrol_with(&relay, &c, good_proof(&c, &k1, "acme"));
        assert!(
            r.status == 200 || r.json() == denied(UNAVAILABLE),
            "{}",
            r.text()
        );
        r.status == 403
    });
    assert!(
        down_at.elapsed() >= Duration::from_secs(2),
        "the keys outlived the outage for their cache life"
    );
    // New enrolments fail closed; enrolled hosts keep pushing and pulling.
    a.push(&relay, &[a.envelope_to(&[&b])]).ok();
    assert_eq!(b.pull_all(&relay, 0).len(), 1);
    assert_eq!(a.pull(&relay, "").status, 200);

    issuer.serve(Serving::Keys(vec![k1.jwk()]));
    wait_until(20, "the issuer back", || {
        enrol_with(&relay, &c, good_proof(&c, &k1, "acme")).status == 200
    });
}

/// docs/protocol.md §3 "What within their token lifetime means on the wire": a token is checked
/// when its host enrols, never again. A host enrolled with a token already past its `exp` (inside
/// the 60 s clock skew) pushes and pulls; re-enrolling with an expired token is refused and
/// changes nothing (its hops keep working); a fresh token re-enrols it.
#[test]
fn a_token_expiring_after_enrolment_changes_nothing_on_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = IssuerKey::new("k1");
    let issuer = Issuer::start(dir.path(), vec![k1.jwk()]);
    let relay = token_relay(&issuer, ["10m", "1h", "1m"]);
    let peer = Host::new("peer");
    enrol_once_keys_are_in(&relay, &peer, &k1);
    // A token of `h` issued `ago` s before now, expired `expired` s ago.
    let aged = |h: &Host, ago: u64, expired: u64| {
        let cloud = SigningKey::generate();
        let mut c = claims(&cloud, "acme");
        let now = c["iat"].as_u64().unwrap();
        c["iat"] = json!(now - ago);
        c["exp"] = json!(now - expired);
        proof(&h.key.public(), &h.key, &cloud, &k1.mint(&c))
    };
    let h = Host::new("expiring");
    let r = enrol_with(&relay, &h, aged(&h, 120, 30));
    assert_eq!(r.status, 200, "inside the clock skew: {}", r.text());
    // Its token has expired by the relay's clock: its hops work all the same.
    h.push(&relay, &[h.envelope_to(&[&peer])]).ok();
    peer.push(&relay, &[peer.envelope_to(&[&h])]).ok();
    let got = h.pull_all(&relay, 0);
    assert_eq!(got.len(), 1);
    assert_eq!(peer.pull_all(&relay, 0).len(), 1);

    assert_eq!(
        enrol_with(&relay, &h, aged(&h, 300, 100)).json(),
        denied("the token has expired")
    );
    peer.push(&relay, &[peer.envelope_to(&[&h])]).ok();
    assert_eq!(
        h.pull_all(&relay, 0).len(),
        2,
        "a refused re-enrolment leaves the enrolment live"
    );
    assert_eq!(
        enrol_with(&relay, &h, good_proof(&h, &k1, "acme")).status,
        200
    );
}

/// Spec §8 "Revocation": `relay-tool deny` (through the admin socket) by host key revokes the
/// host at once: its event stream ends and its waiting pull answers `401 bad relay hop` within
/// a second, its next hop is refused and its token no longer enrols it; by `client_id` it does
/// the same to every host enrolled with that client's tokens and refuses the client's tokens,
/// while other clients' hosts live on and still enrol.
#[test]
fn a_deny_entry_ends_a_live_stream_within_a_second_and_refuses_the_host_and_client() {
    let dir = tempfile::tempdir().unwrap();
    let k1 = IssuerKey::new("k1");
    let issuer = Issuer::start(dir.path(), vec![k1.jwk()]);
    let relay = token_relay(&issuer, ["10m", "1h", "1m"]);
    let store = relay.store_dir().to_str().unwrap().to_string();
    let bob = Host::new("bob");
    enrol_once_keys_are_in(&relay, &bob, &k1);
    let other = Host::new("other");
    assert_eq!(
        enrol_with(&relay, &other, good_proof(&other, &k1, "acme")).status,
        200
    );
    let mut other_es = live_util::EventStream::open(&relay, &other);

    let mut es = live_util::EventStream::open(&relay, &bob);
    assert!(
        es.wait_for("queued", Duration::from_secs(5)),
        "{}",
        es.text()
    );
    let mut pull = live_util::start_get(&relay, &bob, "/v2/relay/items?wait=60");
    std::thread::sleep(Duration::from_millis(100));
    assert!(live_util::still_waiting(&pull), "the pull waits");
    let t = Instant::now();
    let out = relay_tool(&[
        "deny",
        "--store-dir",
        &store,
        "--host",
        &bob.pubkey(),
        "--note",
        "cloud key revoked",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (done["deny"].as_str(), done["revoked"].as_bool()),
        (Some("host"), Some(true))
    );
    assert!(es.closed_within(Duration::from_secs(1)), "the stream ended");
    let r = read_one_response(&mut pull).expect("the waiting pull is answered");
    assert_eq!(r.status, 401, "{}", r.text());
    let took = t.elapsed();
    eprintln!("deny: stream and waiting pull ended {took:?} after relay-tool started");
    assert!(took < Duration::from_secs(2), "{took:?}");
    bob.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    let deny_list = "this host or its account client is on the relay's deny list";
    assert_eq!(
        enrol_with(&relay, &bob, good_proof(&bob, &k1, "acme")).json(),
        denied(deny_list)
    );
    assert!(
        !other_es.closed_within(Duration::from_millis(200)),
        "another host's stream lives on"
    );

    // By client: dave enrolled with client-2's token (the enrolment records the client); the
    // entry revokes him as a host entry would, within a second, and refuses the client's tokens.
    let with_client = |h: &Host, client: &str| {
        let cloud = SigningKey::generate();
        let mut c = claims(&cloud, "acme");
        c["client_id"] = json!(client);
        proof(&h.key.public(), &h.key, &cloud, &k1.mint(&c))
    };
    let dave = Host::new("dave");
    assert_eq!(
        enrol_with(&relay, &dave, with_client(&dave, "client-2")).status,
        200
    );
    let mut es = live_util::EventStream::open(&relay, &dave);
    assert!(
        es.wait_for("queued", Duration::from_secs(5)),
        "{}",
        es.text()
    );
    let mut pull = live_util::start_get(&relay, &dave, "/v2/relay/items?wait=60");
    std::thread::sleep(Duration::from_millis(100));
    assert!(live_util::still_waiting(&pull), "the pull waits");
    let t = Instant::now();
    let out = relay_tool(&[
        "deny",
        "--store-dir",
        &store,
        "--client",
        "client-2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (done["deny"].as_str(), done["revoked"].as_u64()),
        (Some("client"), Some(1)),
        "{done}"
    );
    assert!(
        es.closed_within(Duration::from_secs(1)),
        "the client's host's stream ended"
    );
    let r = read_one_response(&mut pull).expect("the waiting pull is answered");
    assert_eq!(r.status, 401, "{}", r.text());
    let took = t.elapsed();
    eprintln!("deny by client: stream and waiting pull ended {took:?} after relay-tool started");
    assert!(took < Duration::from_secs(2), "{took:?}");
    dave.get(&relay, "/v2/relay/items")
        .assert_error(401, "bad relay hop");
    assert!(
        !other_es.closed_within(Duration::from_millis(200)),
        "a host of another client lives on"
    );
    let carol = Host::new("carol");
    assert_eq!(
        enrol_with(&relay, &carol, with_client(&carol, "client-2")).json(),
        denied(deny_list)
    );
    assert_eq!(
        enrol_with(&relay, &carol, with_client(&carol, "client-3")).status,
        200
    );
}

/// Our host (`mbx-relay host`) enrols on a token relay: `cloud-key` prints the key and
/// thumbprint the accounts service binds the token to; `relay set URL --token-file FILE` makes
/// every enrolment send the file's token with the host's cloud-key certificate for that URL.
#[test]
fn our_host_enrols_on_a_token_relay_with_a_token_file() {
    use relay_testkit::host::{free_port, HostCli, RelayProc};
    let dir = tempfile::tempdir().unwrap();
    let k1 = IssuerKey::new("k1");
    let issuer = Issuer::start(dir.path(), vec![k1.jwk()]);
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}");
    let mut args = issuer.relay_args("10m", "1h", "1m");
    let at = args.iter().position(|a| a == "--token-audience").unwrap();
    args[at + 1] = url.clone();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = RelayProc::start_on(dir.path(), port, "relay-store", &args);
    assert_eq!(relay.url(), url);

    let a = HostCli::init(dir.path(), "alpha");
    a.ok(&["relay", "set", &url]);
    let err = a.run(&["sync"]).expect_err("no token: refused");
    assert!(err.contains("account token only"), "{err}");

    let cloud = a.ok(&["cloud-key"]);
    let jkt = cloud["jkt"].as_str().expect("jkt");
    assert_eq!(a.ok(&["cloud-key"]), cloud, "made once");
    let now = now_ms() as u64 / 1000;
    let token = k1.mint(&json!({
        "iss": crate::token_issuer::ISSUER, "aud": url, "sub": "alpha", "account": "acme",
        "org": "org-1", "cnf": {"jkt": jkt}, "client_id": "client-1",
        "iat": now, "exp": now + 600, "jti": "j1",
    }));
    let token_file = dir.path().join("relay.token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    a.ok(&[
        "relay",
        "set",
        &url,
        "--token-file",
        token_file.to_str().unwrap(),
    ]);
    let mut report = Value::Null;
    wait_until(20, "the host enrolled with its token", || {
        match a.run(&["sync"]) {
            Ok(v) => {
                report = v;
                true
            }
            Err(e) => {
                assert!(e.contains("unavailable"), "{e}");
                false
            }
        }
    });
    assert_eq!(report["enrolled"], true, "{report}");
}
