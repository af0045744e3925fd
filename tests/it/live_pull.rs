//! Long-poll pulls (docs/protocol.md §8, mbx-relay extension): a waiting pull is answered right
//! after a durable push to its target and never for a push whose fsync failed; it times out with
//! the normal empty page; `wait` is checked like the other query parameters; a fifth wait of a
//! key answers the oldest; shutdown answers every waiter at once (1,000 of them within 2 s); an
//! epoch rotation is seen as 409 by the next wait; a client that never sends `wait` sees the same
//! answers as before, plus `x-mbx-wait-max: 60`; a waiter whose client left frees its connection.

use crate::common;
use crate::live_util;

use std::sync::mpsc;
use std::time::{Duration, Instant};

#[cfg(feature = "failpoints")]
use common::relay_with_fsync_trigger;
use common::{envelope_item, read_one_response, Host, Relay};
use live_util::{start_get, still_waiting, timed_pull};
use serde_json::{json, Value};

/// The median of some durations.
fn median(mut d: Vec<Duration>) -> Duration {
    d.sort();
    d[d.len() / 2]
}

/// Push one envelope from `from` to `to`, asserting it was accepted; its item id.
fn push_to(relay: &Relay, from: &Host, to: &Host) -> String {
    let it = envelope_item(from, &[to]);
    let r = from.push_one(relay, &it);
    assert_eq!(r["status"], json!("accepted"), "{r}");
    it["item_id"].as_str().unwrap().to_string()
}

fn item_ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["item_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_waiting_pull_is_answered_within_50ms_of_a_durable_push_to_its_target() {
    let relay = Relay::start_generous(&[]);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let carol = Host::enrolled(&relay, "carol");
    // Baseline: a plain pull's round trip on this (possibly loaded) machine.
    let base = median((0..7).map(|_| timed_pull(&relay, &bob, "").1).collect());
    let bound = Duration::from_millis(50).max(base * 5);
    let mut latencies = Vec::new();
    for round in 0..5 {
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let (r, _) = timed_pull(&relay, &bob, "?wait=20");
                tx.send((r, Instant::now())).unwrap();
            });
            std::thread::sleep(Duration::from_millis(300));
            // A push to someone else wakes nobody here.
            push_to(&relay, &alice, &carol);
            assert!(
                rx.recv_timeout(Duration::from_millis(300)).is_err(),
                "round {round}: woken by a push to another target"
            );
            let id = push_to(&relay, &alice, &bob);
            let pushed = Instant::now();
            let (r, answered) = rx.recv_timeout(Duration::from_secs(30)).expect("answer");
            let latency = answered.saturating_duration_since(pushed);
            assert_eq!(r.status, 200, "{}", r.text());
            assert!(
                item_ids(&r.json()).contains(&id),
                "round {round}: {}",
                r.text()
            );
            // Without the wake the answer comes at the 20 s deadline.
            assert!(
                latency < Duration::from_secs(1),
                "round {round}: answered {latency:?} after the push: not woken by it"
            );
            latencies.push(latency);
            let last = r.json()["last_seq"].as_u64().unwrap();
            assert_eq!(bob.ack(&relay, &relay.epoch(), json!(last)).status, 200);
            // Leave nothing queued for the next round's wait.
            let _ = bob.pull_all(&relay, last);
        });
    }
    // The median round, so one scheduling hiccup of a loaded machine does not decide.
    let typical = median(latencies.clone());
    assert!(
        typical <= bound,
        "answered {typical:?} (median of {latencies:?}) after the push (bound {bound:?}, plain pull {base:?})"
    );
}

#[test]
fn queued_items_answer_at_once_and_a_wait_times_out_with_the_normal_empty_page() {
    let relay = Relay::start_generous(&[]);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let id = push_to(&relay, &alice, &bob);
    let (r, took) = timed_pull(&relay, &bob, "?after=0&wait=30");
    assert_eq!(item_ids(&r.json()), vec![id], "{}", r.text());
    assert!(took < Duration::from_secs(5), "queued items wait: {took:?}");
    let seq = r.json()["last_seq"].as_u64().unwrap();
    for secs in [1u64, 2] {
        let (r, took) = timed_pull(&relay, &bob, &format!("?after={seq}&wait={secs}"));
        let want = Duration::from_secs(secs);
        assert!(
            took >= want && took < want + Duration::from_millis(1500),
            "wait={secs} answered after {took:?}: {} {}",
            r.status,
            r.text()
        );
        assert_eq!(r.status, 200);
        let plain = bob.pull(&relay, &format!("?after={seq}")).ok();
        assert_eq!(r.json(), plain, "the normal empty page");
        assert_eq!(r.json()["items"], json!([]));
        assert_eq!(r.json()["last_seq"], json!(seq));
    }
}

#[test]
fn a_bad_wait_is_400_and_zero_or_empty_answer_at_once() {
    let relay = Relay::start_generous(&[]);
    let bob = Host::enrolled(&relay, "bob");
    for bad in ["61", "-1", "1.5", "abc", "99999999999999999999999", "%201"] {
        let r = bob.pull(&relay, &format!("?wait={bad}"));
        r.assert_error(400, "bad wait: an integer number of seconds from 0 to 60");
        assert_eq!(r.header("x-mbx-wait-max"), Some("60"));
    }
    for now in ["?wait=0", "?wait=", "?wait=0&after=0"] {
        let (r, took) = timed_pull(&relay, &bob, now);
        assert_eq!(r.status, 200, "{now}: {}", r.text());
        assert!(took < Duration::from_secs(1), "{now} waited {took:?}");
    }
    // The epoch is checked first, as without wait: 409 at once.
    let (r, took) = timed_pull(&relay, &bob, "?epoch=old&wait=30");
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["epoch"], json!(relay.epoch()));
    assert!(took < Duration::from_secs(1), "409 waited {took:?}");
}

#[test]
fn a_client_that_never_sends_wait_sees_the_same_answers_plus_the_header() {
    let relay = Relay::start_generous(&[]);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let empty = bob.pull(&relay, "");
    push_to(&relay, &alice, &bob);
    push_to(&relay, &alice, &bob);
    let plain = bob.pull(&relay, "?after=0&limit=1");
    let waited = bob.pull(&relay, "?after=0&limit=1&wait=10");
    assert_eq!(plain.body, waited.body, "same bytes with or without wait");
    let epoch = relay.epoch();
    assert_eq!(
        empty.json(),
        json!({"epoch": epoch, "head_seq": 0, "items": [], "last_seq": 0, "more": false})
    );
    // Exactly the headers of any other JSON answer, plus x-mbx-wait-max.
    let ack = bob.ack(&relay, &epoch, json!(0));
    let names = |r: &common::Response| {
        let mut n: Vec<String> = r.headers.iter().map(|(k, _)| k.clone()).collect();
        n.sort();
        n
    };
    let mut want = names(&ack);
    want.push("x-mbx-wait-max".into());
    want.sort();
    for r in [&empty, &plain, &waited] {
        assert_eq!(names(r), want);
        assert_eq!(r.header("x-mbx-wait-max"), Some("60"));
        assert_eq!(r.header("content-type"), Some("application/json"));
    }
    assert_eq!(ack.header("x-mbx-wait-max"), None, "pulls only");
}

#[test]
fn a_fifth_wait_of_a_key_answers_the_oldest_and_a_push_wakes_the_rest() {
    let relay = Relay::start_generous(&[]);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let mut waits = Vec::new();
    for _ in 0..4 {
        waits.push(start_get(&relay, &bob, "/v2/relay/items?wait=30"));
        std::thread::sleep(Duration::from_millis(150)); // registered in this order
    }
    assert!(waits.iter().all(still_waiting));
    let t = Instant::now();
    waits.push(start_get(&relay, &bob, "/v2/relay/items?wait=30"));
    let first = read_one_response(&mut waits[0]).expect("oldest answered");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(first.status, 200);
    assert_eq!(first.json()["items"], json!([]));
    std::thread::sleep(Duration::from_millis(200));
    assert!(waits[1..].iter().all(still_waiting), "only the oldest goes");
    let id = push_to(&relay, &alice, &bob);
    let pushed = Instant::now();
    for (n, s) in waits[1..].iter_mut().enumerate() {
        let r = read_one_response(s).expect("woken");
        assert_eq!(item_ids(&r.json()), vec![id.clone()], "wait {}", n + 1);
    }
    assert!(
        pushed.elapsed() < Duration::from_secs(5),
        "woken by the push, not the deadline"
    );
}

#[cfg(feature = "failpoints")]
#[test]
fn a_waiting_pull_is_not_answered_for_a_push_whose_fsync_failed() {
    let (relay, trigger, _work) = relay_with_fsync_trigger();
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    std::fs::write(&trigger, b"").unwrap();
    // The watcher (every 20 ms) switches the fault on.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !relay.stderr_log().contains("store fsyncs fail: true") {
        assert!(Instant::now() < deadline, "fault never switched on");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut wait = start_get(&relay, &bob, "/v2/relay/items?wait=30");
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..5 {
        let r = alice.push(&relay, &[envelope_item(&alice, &[&bob])]);
        assert_eq!(r.status, 503, "committed but not durable: {}", r.text());
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        still_waiting(&wait),
        "woken by a commit that was not durable"
    );
    std::fs::remove_file(&trigger).unwrap();
    // The same process serves again: the first durable push wakes the wait with its item.
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let it = envelope_item(&alice, &[&bob]);
        let r = alice.push(&relay, std::slice::from_ref(&it));
        if r.status == 200 && r.json()["results"][0]["status"] == json!("accepted") {
            break it["item_id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "never durable again: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let pushed = Instant::now();
    let r = read_one_response(&mut wait).expect("woken");
    assert!(
        pushed.elapsed() < Duration::from_secs(5),
        "woken by the push, not the deadline"
    );
    assert_eq!(r.status, 200);
    assert!(item_ids(&r.json()).contains(&id), "{}", r.text());
}

#[test]
fn shutdown_answers_waiters_and_the_next_wait_after_an_epoch_rotation_gets_409() {
    let mut relay = Relay::start_generous(&[]);
    let bob = Host::enrolled(&relay, "bob");
    let old = relay.epoch();
    let mut wait = start_get(
        &relay,
        &bob,
        &format!("/v2/relay/items?epoch={old}&wait=60"),
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(still_waiting(&wait));
    let t = Instant::now();
    assert_eq!(relay.terminate(Duration::from_secs(10)), Some(0));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let r = read_one_response(&mut wait).expect("answered at shutdown");
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["items"], json!([]));
    let out = common::relay_tool(&[
        "rotate-epoch",
        "--store-dir",
        relay.store_dir().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    relay.start_again().expect("restart");
    let new = relay.epoch();
    assert_ne!(new, old);
    let (r, took) = timed_pull(&relay, &bob, &format!("?epoch={old}&wait=60"));
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["epoch"], json!(new));
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[test]
fn sigterm_with_1000_waiting_pulls_exits_within_2s_and_answers_them_all() {
    const WAITERS: usize = 1000;
    let mut relay = Relay::start_generous(&[
        "--max-connections",
        "2000",
        "--max-connections-per-address",
        "2000",
    ]);
    // Four waits per key at most: 250 hosts.
    let hosts: Vec<Host> = (0..WAITERS / 4)
        .map(|i| Host::enrolled(&relay, &format!("h{i}")))
        .collect();
    let mut waits: Vec<_> = (0..WAITERS)
        .map(|i| start_get(&relay, &hosts[i / 4], "/v2/relay/items?wait=60"))
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let held = waits.iter().filter(|s| still_waiting(s)).count();
    assert_eq!(held, WAITERS, "every pull is waiting");
    let t = Instant::now();
    assert_eq!(relay.terminate(Duration::from_secs(30)), Some(0));
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "exit took {took:?}");
    for s in &mut waits {
        let r = read_one_response(s).expect("answered");
        assert_eq!(r.status, 200);
    }
}

#[test]
fn a_waiting_pull_whose_client_left_frees_its_connection_at_once() {
    let relay = Relay::start_generous(&["--max-connections", "6"]);
    let bob = Host::enrolled(&relay, "bob");
    let carol = Host::enrolled(&relay, "carol");
    let left: Vec<_> = (0..4)
        .map(|_| start_get(&relay, &bob, "/v2/relay/items?wait=30"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(left.iter().all(still_waiting));
    drop(left);
    std::thread::sleep(Duration::from_millis(500));
    // Six new waits fit only if the four abandoned ones gave their connections back.
    let waits: Vec<_> = (0..6)
        .map(|i| {
            start_get(
                &relay,
                if i < 3 { &bob } else { &carol },
                "/v2/relay/items?wait=30",
            )
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    for (i, s) in waits.iter().enumerate() {
        assert!(still_waiting(s), "wait {i} was refused or answered");
    }
}

#[test]
fn metrics_count_the_waiters() {
    let relay = Relay::start_generous(&["--metrics-listen", "127.0.0.1:0"]);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let waiters = |relay: &Relay| {
        let text = relay.metrics().text();
        text.lines()
            .find_map(|l| l.strip_prefix("mbx_relay_waiters "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no mbx_relay_waiters in {text}"))
    };
    assert_eq!(waiters(&relay), 0);
    let mut waits: Vec<_> = (0..3)
        .map(|_| start_get(&relay, &bob, "/v2/relay/items?wait=30"))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(waiters(&relay), 3);
    push_to(&relay, &alice, &bob);
    for s in &mut waits {
        assert_eq!(read_one_response(s).expect("woken").status, 200);
    }
    assert_eq!(waiters(&relay), 0);
}
