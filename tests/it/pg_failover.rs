//! A relay on a multi-host PostgreSQL url (`...?target_session_attrs=read-write`) through the
//! loss of its primary: a primary with a synchronous streaming-replication standby started by
//! the test (relay-testkit's `PgPair`), the primary stopped with `pg_ctl stop -m immediate`
//! under a sender's load, the standby promoted with `pg_ctl promote`. Promoted, it still asks
//! for a synchronous standby (inherited, as from any base backup), so its commits hang until
//! the requirement is lifted, as an HA manager does when no standby is left: the relay's
//! commits in flight then have an unknown outcome. While no node is writable, and while
//! commits hang, every answer (health included) is a bounded 503 with `Retry-After`; then the
//! same relay process serves again, every acknowledged item reaches its target exactly once
//! (a retried push whose first attempt did commit is a duplicate), and SIGTERM exits in
//! bounded time with the database gone. Before the fix a push and `/health` hung for good.

use crate::common;
use crate::pg_relay::{answered_of, assert_exactly_once, drain_while, Answered};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use relay_testkit::standby::PgPair;
use relay_wire::keys::SigningKey;
use serde_json::{json, Value};

/// Longest any answer may take while no node is writable: the store's operation deadline
/// (10 s) with margin for a loaded machine.
const OUTAGE_ANSWER: Duration = Duration::from_secs(14);
/// `/health` must answer within `mbx-relay health`'s own 5 s probe timeout.
const HEALTH_ANSWER: Duration = Duration::from_secs(5);
/// How long no node is up as primary, before the promotion.
const LOST: Duration = Duration::from_secs(2);
/// How long the promoted node's commits hang (waiting for a synchronous standby): longer than
/// health's 5 s freshness window plus its 3 s deadline, so health must have said 503.
const HANGING: Duration = Duration::from_secs(10);
/// Longest from the promotion until the relay serves again (no restart).
const SERVE_AGAIN: Duration = Duration::from_secs(30);
/// Longest from SIGTERM to exit with the database gone.
const EXIT_BOUND: Duration = Duration::from_secs(15);
/// Items pushed and acknowledged before the primary is lost, and pushes at most by the sender.
const BEFORE: usize = 10;
const MAX_PUSHES: usize = 2_000;

/// Push `item` until a relay answers 200 (a 503 or no answer: again after a pause, as a host
/// retries); every answer must come within [`OUTAGE_ANSWER`], and a 503 must be the store's
/// with `Retry-After`. Returns the push result and whether it was retried.
fn push_until_accepted(sender: &Host, relay: &Relay, item: &Value) -> (Value, bool) {
    let body = json!({ "items": [item] }).to_string();
    let deadline = Instant::now() + SERVE_AGAIN + LOST + HANGING + OUTAGE_ANSWER;
    for attempt in 0.. {
        let t = Instant::now();
        let r = sender.try_call_at(relay.addr(), "POST", "/v2/relay/items", body.as_bytes());
        let took = t.elapsed();
        assert!(took < OUTAGE_ANSWER, "a push answered after {took:?}");
        match r {
            Ok(r) if r.status == 200 => return (r.json()["results"][0].clone(), attempt > 0),
            Ok(r) => {
                r.assert_error(503, "store unavailable, retry later");
                assert!(r.header("retry-after").is_some(), "503 without Retry-After");
            }
            Err(e) => panic!("the relay did not answer a push: {e}"),
        }
        assert!(Instant::now() < deadline, "the relay did not serve again");
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

/// `GET /health`: its status and how long it took.
fn health(relay: &Relay) -> (u16, Duration) {
    let t = Instant::now();
    let r = try_send(relay.addr(), "GET", "/health", &[], b"").expect("health answers");
    (r.status, t.elapsed())
}

#[test]
fn a_relay_on_a_multi_host_url_serves_through_the_loss_of_the_primary_and_a_promotion() {
    let Some(mut pair) = PgPair::start_or_skip("pg_failover") else {
        return;
    };
    let url = pair.url_of(&pair.primary.fresh_db_name());
    let key = SigningKey::generate();
    let mut relay = Relay::launch(
        Backend::Postgres
            .opts(GENEROUS)
            .db(&url)
            .env("MBX_RELAY_KEY", &key.seed_b64()),
    )
    .expect("relay on the multi-host url");
    let epoch = relay.epoch();
    let (alice, bob) = (
        Host::enrolled(&relay, "alice"),
        Host::enrolled(&relay, "bob"),
    );
    let answered: Mutex<Vec<Answered>> = Mutex::new(Vec::new());
    for _ in 0..BEFORE {
        let item = envelope_item(&alice, &[&bob]);
        let r = alice.push_one(&relay, &item);
        answered.lock().unwrap().push(answered_of(&item, &r, false));
    }
    // Acked before the loss: must not come back from the promoted standby.
    let mut received = drain_while(&bob, relay.addr(), &epoch, &AtomicBool::new(true));
    assert_eq!(received.len(), BEFORE);

    let stop = AtomicBool::new(false);
    let (mut outage_health, mut first_503, mut served_again) = (Duration::ZERO, None, None);
    std::thread::scope(|s| {
        let sender = s.spawn(|| {
            for _ in 0..MAX_PUSHES {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let item = envelope_item(&alice, &[&bob]);
                let (r, retried) = push_until_accepted(&alice, &relay, &item);
                answered
                    .lock()
                    .unwrap()
                    .push(answered_of(&item, &r, retried));
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let lost = Instant::now();
        pair.primary.stop_immediate();
        // While no node is writable: health answers within bound, every time, and once the
        // last good write is older than its freshness window, 503.
        let mut health_in = |phase: Duration, promote: bool| {
            let from = Instant::now();
            while from.elapsed() < phase {
                let (status, took) = health(&relay);
                outage_health = outage_health.max(took);
                assert!(took < HEALTH_ANSWER, "health answered after {took:?}");
                if status == 503 {
                    first_503.get_or_insert(lost.elapsed());
                } else {
                    assert_eq!(status, 200, "health: {status}");
                    assert!(
                        first_503.is_none(),
                        "health 200 again while no node is writable"
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            if promote {
                pair.standby.promote().expect("the standby promotes");
            }
        };
        health_in(LOST, true);
        health_in(HANGING, false);
        assert!(
            first_503.is_some(),
            "health never answered 503 while no node was writable"
        );
        let released = Instant::now();
        pair.standby
            .set_sync_standbys(None)
            .expect("lift the synchronous standby");
        served_again = wait_for(SERVE_AGAIN, || {
            (health(&relay).0 == 200).then(|| released.elapsed())
        });
        assert!(
            served_again.is_some(),
            "health not 200 within {SERVE_AGAIN:?} of the release"
        );
        std::thread::sleep(Duration::from_millis(1_000));
        stop.store(true, Ordering::SeqCst);
        sender.join().expect("sender thread");
    });
    let answered = answered.into_inner().unwrap();
    let retried = answered.iter().filter(|a| a.3).count();
    eprintln!(
        "failover: {} pushes answered ({retried} retried); health 503 {:?} after the loss, at \
         most {outage_health:?} per answer; 200 again {:?} after the synchronous standby was lifted",
        answered.len(),
        first_503.unwrap_or_default(),
        served_again.unwrap_or_default()
    );
    for (id, _, status, retried) in &answered {
        let ok = status == "accepted" || (*retried && status == "duplicate");
        assert!(ok, "{id}: {status} (retried: {retried})");
    }
    received.extend(drain_while(
        &bob,
        relay.addr(),
        &epoch,
        &AtomicBool::new(true),
    ));
    assert_exactly_once(&bob, &received, &answered);

    // The database gone altogether: SIGTERM still ends the process in bounded time.
    pair.standby.stop_immediate();
    // 503 once the last good write is older than health's 5 s freshness window.
    let down = wait_for(Duration::from_secs(10), || {
        let (status, took) = health(&relay);
        assert!(took < HEALTH_ANSWER, "health answered after {took:?}");
        (status == 503).then_some(())
    });
    assert!(down.is_some(), "health not 503 with no database");
    let t = Instant::now();
    relay.terminate(EXIT_BOUND);
    eprintln!(
        "SIGTERM with the database gone: exited after {:?}",
        t.elapsed()
    );
}
