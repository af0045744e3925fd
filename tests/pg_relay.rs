//! `mbx-relay serve --store postgres://...` as real processes on a throwaway PostgreSQL: two
//! hosts exchange mail, and two relay processes serve one database (push via one, pull and ack
//! via the other; challenge via one, enrol via the other).

mod common;

use common::*;
use mbx_relay::wire::keys::SigningKey;
use relay_pgstore::cluster::PgCluster;
use serde_json::json;

/// A relay serving `url` with the relay key `seed` (every process on one database shares it).
fn pg_relay(url: &str, seed: &str) -> Relay {
    let mut args: Vec<&str> = GENEROUS.to_vec();
    args.extend(["--store", url]);
    Relay::launch(RelayOpts::args(&args).env("MBX_RELAY_KEY", seed)).expect("relay on postgres")
}

#[test]
fn two_hosts_exchange_mail_through_a_relay_on_postgres() {
    let Some(pg) = PgCluster::start_or_skip("pg_relay") else {
        return;
    };
    let key = SigningKey::generate();
    let relay = pg_relay(&pg.fresh_db(), &key.seed_b64());
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
    let Some(pg) = PgCluster::start_or_skip("pg_relay") else {
        return;
    };
    let key = SigningKey::generate();
    let url = pg.fresh_db();
    let (one, two) = (
        pg_relay(&url, &key.seed_b64()),
        pg_relay(&url, &key.seed_b64()),
    );
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
