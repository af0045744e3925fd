//! The relay on a disk that fails, not a failpoint: its fjall store on `powercut`, whose fsyncs
//! answer EIO while the test says so and drop the data they did not sync (as Linux drops the
//! pages whose writeback failed). While they fail every push answers the store's 503 (never a
//! success), and `/health` too; once the disk is good again the same process serves again
//! (fjall reopened from what the disk holds: `keyspace/src/recover.rs`), each push retried is
//! stored once, and after a kill -9 and a power cut every item ever acknowledged is there,
//! exactly once.

use crate::common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

/// Items pushed before the disk fails, while it fails, and after.
const BEFORE: usize = 20;
const DURING: usize = 5;
const AFTER: usize = 20;
/// Longest a push may take to answer while the disk fails (the writer fails fast).
const ANSWER_BOUND: Duration = Duration::from_secs(10);
/// Longest from the disk being good again until a push is accepted.
const SERVE_AGAIN: Duration = Duration::from_secs(30);

/// Push `item` until it is answered 200: its status and how many 503s came first.
fn push_until_accepted(sender: &Host, relay: &Relay, item: &Value) -> (String, usize) {
    let body = json!({ "items": [item] }).to_string();
    let until = Instant::now() + SERVE_AGAIN;
    for refused in 0.. {
        let r = sender
            .try_call_at(relay.addr(), "POST", "/v2/relay/items", body.as_bytes())
            .expect("the relay answers");
        if r.status == 200 {
            let status = r.json()["results"][0]["status"]
                .as_str()
                .unwrap_or("")
                .to_string();
            return (status, refused);
        }
        r.assert_error(503, "store unavailable, retry later");
        assert!(Instant::now() < until, "the relay did not serve again");
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

#[test]
fn fsyncs_failing_with_eio_answer_503_then_the_relay_serves_again_losing_nothing_acknowledged() {
    let mut pc = powercut_mount(&[]);
    let mut relay =
        Relay::launch(RelayOpts::args(GENEROUS).store(&pc.path().join("store"))).unwrap();
    let (alice, bob) = (
        Host::enrolled(&relay, "alice"),
        Host::enrolled(&relay, "bob"),
    );
    let mut acknowledged: Vec<String> = Vec::new();
    for _ in 0..BEFORE {
        let item = envelope_item(&alice, &[&bob]);
        assert_eq!(alice.push_one(&relay, &item)["status"], json!("accepted"));
        acknowledged.push(item["item_id"].as_str().unwrap().to_string());
    }

    pc.set_faults("fsync-eio all");
    let failing = Instant::now();
    let during: Vec<Value> = (0..DURING)
        .map(|_| envelope_item(&alice, &[&bob]))
        .collect();
    let mut slowest = Duration::ZERO;
    for item in &during {
        let body = json!({ "items": [item] }).to_string();
        let t = Instant::now();
        let r = alice
            .try_call_at(relay.addr(), "POST", "/v2/relay/items", body.as_bytes())
            .expect("the relay answers");
        slowest = slowest.max(t.elapsed());
        assert!(t.elapsed() < ANSWER_BOUND, "a push took {:?}", t.elapsed());
        r.assert_error(503, "store unavailable, retry later");
    }
    let health = try_send(relay.addr(), "GET", "/health", &[], b"").expect("health answers");
    assert_eq!(health.status, 503, "health while every fsync fails");
    let failed_for = failing.elapsed();

    pc.set_faults("");
    let good = Instant::now();
    let mut retried_503s = 0;
    for item in &during {
        let (status, refused) = push_until_accepted(&alice, &relay, item);
        assert!(
            status == "accepted" || status == "duplicate",
            "a retried push: {status}"
        );
        retried_503s += refused;
        acknowledged.push(item["item_id"].as_str().unwrap().to_string());
    }
    let served_again = good.elapsed();
    for _ in 0..AFTER {
        let item = envelope_item(&alice, &[&bob]);
        assert_eq!(alice.push_one(&relay, &item)["status"], json!("accepted"));
        acknowledged.push(item["item_id"].as_str().unwrap().to_string());
    }
    relay.assert_alive();
    assert!(
        relay.stderr_log().contains("reopened"),
        "the store database was reopened: {}",
        relay.stderr_log()
    );

    relay.power_cut(&mut pc);
    let mut got: HashMap<String, usize> = HashMap::new();
    for i in bob.pull_all(&relay, 0) {
        *got.entry(i["item_id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    eprintln!(
        "power_cut_faults: {DURING} pushes under fsync EIO for {failed_for:?}, each 503 (slowest \
         {slowest:?}); served again {served_again:?} after the disk was good ({retried_503s} \
         more 503s); {} acknowledged, {} received after a kill -9 and a cut",
        acknowledged.len(),
        got.len()
    );
    for id in &acknowledged {
        assert_eq!(got.get(id), Some(&1), "{id}: acknowledged, received once");
    }
    assert_eq!(got.len(), acknowledged.len(), "nothing else arrived");
}
