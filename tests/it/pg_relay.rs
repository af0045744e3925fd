//! `mbx-relay serve --store postgres://...` as real processes on a throwaway PostgreSQL: two
//! hosts exchange mail; two relay processes serve one database (push via one, pull and ack via
//! the other; challenge via one, enrol via the other); one of two processes killed with SIGKILL
//! under load (the other keeps serving and takes the background-work lease, nothing
//! acknowledged is lost or doubled); PostgreSQL itself killed mid-load; a revocation written
//! into the database beside the relays, and a rotation at one process, ending the key's
//! streams and waiting pulls on every process.

use crate::common;
use crate::live_util;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use common::*;
use relay_testkit::cluster::PgCluster;
use relay_wire::keys::SigningKey;
use serde_json::{json, Value};

/// A relay serving `url` with the relay key `seed` (every process on one database shares it).
fn pg_relay(url: &str, seed: &str) -> Relay {
    pg_relay_with(url, seed, &[])
}

/// [`pg_relay`] with extra environment variables.
fn pg_relay_with(url: &str, seed: &str, env: &[(&str, &str)]) -> Relay {
    let mut opts = Backend::Postgres
        .opts(GENEROUS)
        .db(url)
        .env("MBX_RELAY_KEY", seed);
    for (k, v) in env {
        opts = opts.env(k, v);
    }
    Relay::launch(opts).expect("relay on postgres")
}

/// Two relay processes with one relay key on one fresh database.
fn two_relays_on_a_fresh_database() -> (SigningKey, String, Relay, Relay) {
    let key = SigningKey::generate();
    let url = fresh_database();
    let one = pg_relay(&url, &key.seed_b64());
    let two = pg_relay(&url, &key.seed_b64());
    (key, url, one, two)
}

#[test]
fn two_hosts_exchange_mail_through_a_relay_on_postgres() {
    if !postgres_available("pg_relay") {
        return;
    }
    let key = SigningKey::generate();
    let relay = pg_relay(&fresh_database(), &key.seed_b64());
    assert_eq!(relay.pubkey(), key.public_b64());
    let (alice, bob) = (
        Host::enrolled(&relay, "alice"),
        Host::enrolled(&relay, "bob"),
    );
    let item = envelope_item(&alice, &[&bob]);
    assert_eq!(alice.push_one(&relay, &item)["status"], json!("accepted"));
    assert_eq!(
        alice.push_one(&relay, &item)["status"],
        json!("duplicate"),
        "the same item again is a duplicate"
    );
    let got = bob.pull_all(&relay, 0);
    assert_eq!(got.len(), 1, "{got:?}");
    let seq = got[0]["seq"].clone();
    bob.ack(&relay, &relay.epoch(), seq).ok();
    assert!(bob.pull_all(&relay, 0).is_empty(), "acked mail is gone");
    // relay-tool reaches the PostgreSQL store through the relay's admin socket.
    let dir = relay.store_dir().to_str().expect("utf-8 path").to_string();
    for args in [
        vec!["stats", "--store-dir", &dir, "--json"],
        vec!["hosts", "--store-dir", &dir, "--json"],
        vec!["log", "--verify", "--store-dir", &dir],
        vec!["dump", "--store-dir", &dir, "--json"],
    ] {
        let out = relay_tool(&args);
        assert!(
            out.status.success(),
            "relay-tool {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stats: serde_json::Value =
        serde_json::from_slice(&relay_tool(&["stats", "--store-dir", &dir, "--json"]).stdout)
            .expect("stats json");
    assert_eq!(stats["epoch"], json!(relay.epoch()), "{stats}");
    let hosts = String::from_utf8(relay_tool(&["hosts", "--store-dir", &dir, "--json"]).stdout)
        .expect("utf-8");
    assert_eq!(hosts.lines().count(), 2, "{hosts}");
    relay.assert_alive();
}

#[test]
fn two_relay_processes_serve_one_database() {
    if !postgres_available("pg_relay") {
        return;
    }
    let (_, _, one, two) = two_relays_on_a_fresh_database();
    assert_eq!(one.epoch(), two.epoch(), "the epoch is the database's");

    // A challenge issued by one process is accepted by the other.
    let alice = Host::new("alice");
    let c = alice.challenge(&one);
    assert_eq!(c.status, 200, "{}", c.text());
    let challenge = c.json()["challenge"]
        .as_str()
        .expect("challenge")
        .to_string();
    let r = two.post_json("/v1/relay/enrol", &alice.enrol_body(&challenge, "", None));
    assert_eq!(r.status, 200, "enrol at the other process: {}", r.text());
    let bob = Host::enrolled(&two, "bob");

    // Push via one, pull and ack via the other.
    for _ in 0..3 {
        let item = envelope_item(&alice, &[&bob]);
        assert_eq!(alice.push_one(&one, &item)["status"], json!("accepted"));
    }
    let got = bob.pull_all(&two, 0);
    assert_eq!(got.len(), 3);
    let seqs: Vec<u64> = got
        .iter()
        .map(|i| i["seq"].as_u64().expect("seq"))
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    bob.ack(&two, &two.epoch(), json!(seqs[2])).ok();
    assert!(
        bob.pull_all(&one, 0).is_empty(),
        "the ack at two is seen at one"
    );
    one.assert_alive();
    two.assert_alive();
}

#[test]
fn postgres_killed_mid_load_gives_503_then_serves_again_without_a_relay_restart() {
    let Some(mut pg) = PgCluster::start_or_skip("pg_relay") else {
        return;
    };
    let key = SigningKey::generate();
    let relay = pg_relay(&pg.fresh_db(), &key.seed_b64());
    let (alice, bob) = (
        Host::enrolled(&relay, "alice"),
        Host::enrolled(&relay, "bob"),
    );
    let mut accepted = Vec::new();
    for _ in 0..5 {
        let item = envelope_item(&alice, &[&bob]);
        assert_eq!(alice.push_one(&relay, &item)["status"], json!("accepted"));
        accepted.push(item["item_id"].clone());
    }
    pg.kill9();
    let down = alice.push(&relay, &[envelope_item(&alice, &[&bob])]);
    assert_eq!(
        down.status,
        503,
        "a push while the database is down: {}",
        down.text()
    );
    pg.restart().expect("postgres restarts on its data");
    // The pool reconnects by itself: no relay restart.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let item = envelope_item(&alice, &[&bob]);
        let r = alice.push(&relay, std::slice::from_ref(&item));
        if r.status == 200 {
            assert_eq!(r.json()["results"][0]["status"], json!("accepted"));
            accepted.push(item["item_id"].clone());
            break;
        }
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(
            std::time::Instant::now() < deadline,
            "the relay did not serve again"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    // Nothing acknowledged was lost.
    let got: Vec<_> = bob
        .pull_all(&relay, 0)
        .iter()
        .map(|i| i["item_id"].clone())
        .collect();
    for id in &accepted {
        assert!(got.contains(id), "accepted item {id} lost; queued: {got:?}");
    }
    relay.assert_alive();
}

/// One answered push of the kill test: item id, `(target, seq)` per target, status, and
/// whether it was retried at the survivor.
pub(crate) type Answered = (String, Vec<(String, u64)>, String, bool);

/// Heartbeat period of the relays in the kill test (`MBX_RELAY_TEST_HEARTBEAT_MS`): the leader
/// lease lasts three periods unrenewed.
const TEST_HEARTBEAT_MS: u64 = 300;
/// Pushes per sender at most, and the pause between two of one sender: a steady, bounded load.
const MAX_PUSHES_PER_SENDER: usize = 300;
const PUSH_PAUSE: Duration = Duration::from_millis(5);
/// How long the load runs before the kill, and on after the lease passed.
const LOAD_BEFORE_KILL: Duration = Duration::from_millis(1_500);
const LOAD_AFTER_TAKEOVER: Duration = Duration::from_millis(1_000);

/// The background-work lease row `(holder, until_ms)`, if taken (a row the protocol does not
/// show; read with psql).
fn lease(url: &str) -> Option<(String, u64)> {
    let row = psql(
        url,
        "SELECT holder, until_ms FROM leases WHERE name = 'background'",
    );
    let (holder, until) = row.split_once('|')?;
    Some((holder.to_string(), until.parse().expect("until_ms")))
}

/// The heartbeat the lease holder writes (ms; 0 before the first).
fn heartbeat_ms(url: &str) -> u64 {
    psql(
        url,
        "SELECT coalesce(heartbeat_ms, 0) FROM meta WHERE id = 1",
    )
    .parse()
    .expect("heartbeat_ms")
}

/// One item pushed until a relay answered it: at `first`, and when that relay does not answer
/// (it was killed: `killed` must be set by then) again at `survivor`, as a sender retries.
/// Returns the result (accepted, or on a retry possibly duplicate) and whether it was retried.
fn push_until_answered(
    sender: &Host,
    item: &Value,
    first: SocketAddr,
    survivor: SocketAddr,
    killed: &AtomicBool,
) -> (Value, bool) {
    let body = json!({ "items": [item] }).to_string();
    let path = "/v2/relay/items";
    match sender.try_call_at(first, "POST", path, body.as_bytes()) {
        Ok(r) if r.status == 200 => return (r.json()["results"][0].clone(), false),
        failed => assert!(
            first != survivor && killed.load(Ordering::SeqCst),
            "a push to a live relay failed: {:?}",
            failed.map(|r| format!("{} {}", r.status, r.text()))
        ),
    }
    let r = sender
        .try_call_at(survivor, "POST", path, body.as_bytes())
        .expect("the surviving relay answers");
    assert_eq!(r.status, 200, "the survivor serves: {}", r.text());
    (r.json()["results"][0].clone(), true)
}

/// Pull and ack everything queued for `host` at `relay` until `done` is set and the queue is
/// empty; every pull and ack must succeed. Returns `(item_id, seq)` in the order received.
pub(crate) fn drain_while(
    host: &Host,
    relay: SocketAddr,
    epoch: &str,
    done: &AtomicBool,
) -> Vec<(String, u64)> {
    let mut got = Vec::new();
    let mut after = 0u64;
    for _ in 0..100_000 {
        let finished = done.load(Ordering::SeqCst);
        let path = format!("/v2/relay/items?after={after}");
        let page = host
            .try_call_at(relay, "GET", &path, b"")
            .expect("pull at the live relay");
        assert_eq!(page.status, 200, "pull: {}", page.text());
        let page = page.json();
        let items = page["items"].as_array().cloned().unwrap_or_default();
        for i in &items {
            let seq = i["seq"].as_u64().expect("seq");
            assert!(seq > after, "seqs rise: {seq} after {after}");
            got.push((i["item_id"].as_str().expect("item_id").to_string(), seq));
            after = seq;
        }
        if !items.is_empty() {
            let ack = json!({"epoch": epoch, "through": after}).to_string();
            let r = host
                .try_call_at(relay, "POST", "/v2/relay/ack", ack.as_bytes())
                .expect("ack at the live relay");
            assert_eq!(r.status, 200, "ack: {}", r.text());
        } else if finished {
            return got;
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("the drain did not finish");
}

#[test]
fn kill9_of_one_of_two_relays_under_load_keeps_the_other_serving_and_loses_nothing_acknowledged() {
    if !postgres_available("pg_relay") {
        return;
    }
    let key = SigningKey::generate();
    let url = fresh_database();
    let hb = TEST_HEARTBEAT_MS.to_string();
    let env = [("MBX_RELAY_TEST_HEARTBEAT_MS", hb.as_str())];
    let mut one = pg_relay_with(&url, &key.seed_b64(), &env);
    // `one` leads the background work before `two` exists.
    let (leader, _) =
        wait_for(Duration::from_secs(10), || lease(&url)).expect("one takes the lease");
    let two = pg_relay_with(&url, &key.seed_b64(), &env);
    let epoch = two.epoch();
    let (bob, carol) = (Host::enrolled(&one, "bob"), Host::enrolled(&two, "carol"));
    let senders: Vec<Host> = (0..4)
        .map(|i| Host::enrolled(if i % 2 == 0 { &one } else { &two }, &format!("s{i}")))
        .collect();
    let (addr_one, addr_two) = (one.addr(), two.addr());

    let killed = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let senders_done = AtomicBool::new(false);
    // Every answered push: (item_id, [(target, seq)], status, retried).
    let answered: Mutex<Vec<Answered>> = Mutex::new(Vec::new());
    let (mut received_bob, mut received_carol) = (Vec::new(), Vec::new());
    let (mut takeover_ms, mut killed_at_ms) = (0u64, 0u64);
    std::thread::scope(|s| {
        let rx_bob = s.spawn(|| drain_while(&bob, addr_two, &epoch, &senders_done));
        let rx_carol = s.spawn(|| drain_while(&carol, addr_two, &epoch, &senders_done));
        let pushers: Vec<_> = senders
            .iter()
            .enumerate()
            .map(|(i, sender)| {
                let (bob, carol, killed, stop, answered) =
                    (&bob, &carol, &killed, &stop, &answered);
                s.spawn(move || {
                    for n in 0..MAX_PUSHES_PER_SENDER {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let targets: Vec<&Host> = match n % 3 {
                            0 => vec![bob],
                            1 => vec![carol],
                            _ => vec![bob, carol],
                        };
                        let item = envelope_item(sender, &targets);
                        let first = if (i + n) % 2 == 0 { addr_one } else { addr_two };
                        let (r, retried) =
                            push_until_answered(sender, &item, first, addr_two, killed);
                        answered
                            .lock()
                            .unwrap()
                            .push(answered_of(&item, &r, retried));
                        std::thread::sleep(PUSH_PAUSE);
                    }
                })
            })
            .collect();

        std::thread::sleep(LOAD_BEFORE_KILL);
        let (holder, until_ms) = lease(&url).expect("lease row");
        assert_eq!(holder, leader, "a live leader keeps the lease under load");
        killed.store(true, Ordering::SeqCst);
        killed_at_ms = now_ms() as u64;
        one.kill9();
        // The survivor takes the lease once the dead leader's lapses (three heartbeats), and
        // writes the heartbeat from then on.
        let limit = Duration::from_millis(until_ms.saturating_sub(killed_at_ms) + 5_000);
        let (new_holder, _) = wait_for(limit, || lease(&url).filter(|(h, _)| *h != leader))
            .unwrap_or_else(|| panic!("the lease did not pass within {limit:?} of the kill"));
        takeover_ms = now_ms() as u64;
        assert_ne!(new_holder, leader);
        wait_for(Duration::from_secs(5), || {
            (heartbeat_ms(&url) > takeover_ms).then_some(())
        })
        .expect("the new leader writes the heartbeat");

        std::thread::sleep(LOAD_AFTER_TAKEOVER);
        stop.store(true, Ordering::SeqCst);
        for p in pushers {
            p.join().expect("sender thread");
        }
        senders_done.store(true, Ordering::SeqCst);
        received_bob = rx_bob.join().expect("bob's drain");
        received_carol = rx_carol.join().expect("carol's drain");
    });
    two.assert_alive();

    let answered = answered.into_inner().unwrap();
    let retried = answered.iter().filter(|a| a.3).count();
    eprintln!(
        "{} pushes answered ({retried} retried at the survivor after the kill); lease passed \
         {} ms after the kill",
        answered.len(),
        takeover_ms - killed_at_ms
    );
    assert!(
        answered.len() >= 40,
        "a real load: {} pushes",
        answered.len()
    );
    for (id, _, status, retried) in &answered {
        let ok = status == "accepted" || (*retried && status == "duplicate");
        assert!(ok, "{id}: {status} (retried: {retried})");
    }
    for (host, received) in [(&bob, &received_bob), (&carol, &received_carol)] {
        assert_exactly_once(host, received, &answered);
    }
}

/// The record of one answered push of `item`: its id, `(target, seq)` per target from the
/// push result `r`, the status, and whether it was retried.
pub(crate) fn answered_of(item: &Value, r: &Value, retried: bool) -> Answered {
    let seqs = r["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| {
            let pk = t["host_pubkey"].as_str().expect("pk").to_string();
            (pk, t["seq"].as_u64().expect("seq"))
        })
        .collect();
    let id = item["item_id"].as_str().expect("item_id").to_string();
    let status = r["status"].as_str().unwrap_or("").to_string();
    (id, seqs, status, retried)
}

/// Every acknowledged (item, target) of `answered` reached `host` exactly once, with its seq,
/// and nothing else arrived: `received` is `host`'s drain ([`drain_while`]).
pub(crate) fn assert_exactly_once(host: &Host, received: &[(String, u64)], answered: &[Answered]) {
    let pk = host.pubkey();
    let mut expected: Vec<(String, u64)> = answered
        .iter()
        .flat_map(|(id, seqs, _, _)| {
            seqs.iter()
                .filter(|(t, _)| *t == pk)
                .map(move |(_, seq)| (id.clone(), *seq))
        })
        .collect();
    expected.sort_by_key(|(_, seq)| *seq);
    let mut got = received.to_vec();
    got.sort_by_key(|(_, seq)| *seq);
    assert_eq!(
        got.len(),
        expected.len(),
        "{}: received {} items, {} acknowledged",
        host.name,
        got.len(),
        expected.len()
    );
    assert_eq!(
        got, expected,
        "{}: exactly the acknowledged items",
        host.name
    );
}

/// Open one event stream (first event read) and one waiting pull of `host` at `relay`.
fn stream_and_waiting_pull(
    relay: &Relay,
    host: &Host,
) -> (live_util::EventStream, std::net::TcpStream) {
    let mut es = live_util::EventStream::open(relay, host);
    assert!(
        es.wait_for("event: queued", Duration::from_secs(5)),
        "{}",
        es.text()
    );
    let pull = live_util::start_get(relay, host, "/v2/relay/items?wait=60");
    std::thread::sleep(Duration::from_millis(100));
    assert!(live_util::still_waiting(&pull), "the pull waits");
    (es, pull)
}

/// Within `limit` of `since` the stream has ended and the waiting pull answered
/// `401 bad relay hop`; returns how long that took.
fn ended_as_revoked(
    since: std::time::Instant,
    limit: Duration,
    es: &mut live_util::EventStream,
    pull: &mut std::net::TcpStream,
) -> Duration {
    assert!(es.closed_within(limit), "stream still open: {}", es.text());
    pull.set_read_timeout(Some(limit)).unwrap();
    let r = read_one_response(pull).expect("the waiting pull is answered");
    let took = since.elapsed();
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.text(), r#"{"error":"bad relay hop"}"#);
    assert!(took < limit, "{took:?}");
    took
}

/// Issue 24 item 3 on a shared store: `relay-tool revoke --store postgres://...` beside two
/// relay processes (no admin socket: straight into the database) ends the key's stream and
/// waiting pull at both within a few seconds, and a rotation through one process ends the old
/// key's at the other. Before the fix no relay was told: both kept waiting.
#[test]
fn a_revocation_in_the_database_ends_the_keys_live_delivery_on_every_process() {
    if !postgres_available("pg_relay") {
        return;
    }
    let (key, url, one, two) = two_relays_on_a_fresh_database();
    let limit = Duration::from_secs(4);
    let bob = Host::enrolled(&one, "bob");
    let (mut es1, mut pull1) = stream_and_waiting_pull(&one, &bob);
    let (mut es2, mut pull2) = stream_and_waiting_pull(&two, &bob);
    let t = std::time::Instant::now();
    let out = relay_tool_env(
        &["revoke", "--store", &url, &bob.pubkey()],
        &[("MBX_RELAY_KEY", &key.seed_b64())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let took1 = ended_as_revoked(t, limit, &mut es1, &mut pull1);
    let took2 = ended_as_revoked(t, limit, &mut es2, &mut pull2);
    eprintln!("revoke in the database: ended at one after {took1:?}, at two after {took2:?}");

    let dave = Host::enrolled(&one, "dave");
    let (mut es, mut pull) = stream_and_waiting_pull(&two, &dave);
    let dave2 = Host::new("dave");
    let t = std::time::Instant::now();
    let r = one.post_json(
        "/v2/relay/rotate",
        &rotation("dave", &dave.key, &dave2.key, None, None),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let took = ended_as_revoked(t, limit, &mut es, &mut pull);
    eprintln!("rotation at one: the old key's delivery at two ended after {took:?}");
    one.assert_alive();
    two.assert_alive();
}
