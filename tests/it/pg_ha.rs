//! HA drills on a real pg_auto_failover cluster (relay-testkit's `HaCluster`: a monitor and two
//! synchronous data nodes on loopback), with two relay processes on the multi-host url
//! (`target_session_attrs=read-write`), four senders and a receiver under load throughout.
//!
//! The machine drill, in sequence on one cluster: (1) the primary's machine lost (SIGKILL to
//! its postmaster and its `pg_autoctl`): the monitor promotes the standby and both relays serve
//! again without a restart; (2) the old primary run again rejoins as a standby and the cluster
//! is synchronous again; (3) a planned switchover under load.
//!
//! The postmaster drill: three times, the primary's postmaster alone SIGKILLed and its keeper
//! held still for 3 s, so the monitor fails over every time; let go, the keeper may start
//! PostgreSQL again, read-write on its old timeline, beside the standby being promoted, until
//! it hears it is demoted (the report says for how long it did). The relays must never serve
//! or build on what only that old node holds, nor read its older state once the standby took
//! writes (`relay-pgstore`'s fence).
//!
//! After each: every acknowledged item reached the receiver exactly once, and the receiver's
//! acked cursor never moved back (no page's `head_seq` below it, no ack answered below it).
//!
//! The load and that checker ([`under_load`]) serve the partition drills too (`pg_partition`).

use crate::common;
use crate::pg_relay::{answered_of, assert_exactly_once, Answered};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use common::*;
use relay_testkit::ha::HaCluster;
use relay_wire::keys::SigningKey;
use serde_json::{json, Value};

/// Longest any answer may take: the store's operation deadline (10 s) with margin.
pub(crate) const ANSWER_BOUND: Duration = Duration::from_secs(14);
/// Longest from a loss or switchover until both relays serve again: the monitor's 2 s
/// unhealthy timeout and 4 s demote timeout, the keeper's promotion, and margin for a loaded
/// 2-core machine.
const SERVE_AGAIN: Duration = Duration::from_secs(40);
/// How long the cluster may take to be synchronous again (a rejoin, a switchover).
pub(crate) const RESYNC: Duration = Duration::from_secs(90);
/// Load before the first drill and after the last.
const STEADY: Duration = Duration::from_millis(1_500);
/// How long the postmaster drill holds the killed primary's keeper still: past the monitor's
/// 2 s unhealthy timeout, so every kill fails over (not held, the keeper often restarts the
/// postmaster before the monitor notices), and within its 4 s demote timeout, so the keeper
/// may still start the old primary again while the standby is being promoted.
const KEEPER_HELD: Duration = Duration::from_millis(3_000);
const SENDERS: usize = 4;
const PUSH_PAUSE: Duration = Duration::from_millis(20);

/// One push attempt: when it was sent and answered, at which relay, and its status (`None`:
/// no answer).
#[derive(Clone, Copy)]
pub(crate) struct Attempt {
    pub(crate) sent: Instant,
    pub(crate) answered: Instant,
    pub(crate) relay: usize,
    pub(crate) ok: bool,
    pub(crate) status: Option<u16>,
}

/// Push `item` until a relay answers 200, starting at relay `first` and switching relay after
/// each failure (503 or no answer), as a host behind a load balancer retries. Every answer
/// must come within [`ANSWER_BOUND`] and a refusal must be the store's 503.
fn push_until_accepted(
    sender: &Host,
    relays: [SocketAddr; 2],
    first: usize,
    item: &Value,
    log: &Mutex<Vec<Attempt>>,
) -> (Value, bool) {
    let body = json!({ "items": [item] }).to_string();
    let deadline = Instant::now() + SERVE_AGAIN + RESYNC;
    for attempt in 0.. {
        let relay = (first + attempt) % 2;
        let sent = Instant::now();
        let r = sender.try_call_at(relays[relay], "POST", "/v2/relay/items", body.as_bytes());
        let answered = Instant::now();
        assert!(
            answered - sent < ANSWER_BOUND,
            "a push answered after {:?}",
            answered - sent
        );
        let status = r.as_ref().ok().map(|r| r.status);
        log.lock().unwrap().push(Attempt {
            sent,
            answered,
            relay,
            ok: status == Some(200),
            status,
        });
        match r {
            Ok(r) if r.status == 200 => return (r.json()["results"][0].clone(), attempt > 0),
            Ok(r) => {
                r.assert_error(503, "store unavailable, retry later");
                assert!(r.header("retry-after").is_some(), "503 without Retry-After");
            }
            // A connection cut while the relay waited on the store: retried like a 503.
            Err(_) => {}
        }
        assert!(Instant::now() < deadline, "the relays did not serve again");
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

/// Pull and ack everything for `host` until `done` is set and the queue is empty, at either
/// relay: a failed pull or ack (503 during a failover) is tried again at the other. No cursor
/// may move back: a page's `head_seq` and an ack's `acked_through` are never below what this
/// receiver acked. Returns `(item_id, seq)` in the order received.
fn drain_through_failovers(
    host: &Host,
    relays: [SocketAddr; 2],
    epoch: &str,
    done: &AtomicBool,
    abort: &AtomicBool,
) -> Vec<(String, u64)> {
    let mut got = Vec::new();
    let (mut after, mut acked, mut at) = (0u64, 0u64, 0usize);
    for _ in 0..200_000 {
        if abort.load(Ordering::SeqCst) {
            return got;
        }
        let finished = done.load(Ordering::SeqCst);
        let path = format!("/v2/relay/items?after={after}");
        let page = match host.try_call_at(relays[at], "GET", &path, b"") {
            Ok(p) if p.status == 200 => p.json(),
            _ => {
                at = 1 - at;
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let head = page["head_seq"].as_u64().expect("head_seq");
        assert!(
            head >= acked,
            "relay {at} answered head_seq {head} below the acked cursor {acked}"
        );
        let items = page["items"].as_array().cloned().unwrap_or_default();
        for i in &items {
            let seq = i["seq"].as_u64().expect("seq");
            assert!(seq > after, "seqs rise: {seq} after {after}");
            got.push((i["item_id"].as_str().expect("item_id").to_string(), seq));
            after = seq;
        }
        if after > acked {
            let ack = json!({"epoch": epoch, "through": after}).to_string();
            match host.try_call_at(relays[at], "POST", "/v2/relay/ack", ack.as_bytes()) {
                Ok(r) if r.status == 200 => {
                    let through = r.json()["acked_through"].as_u64().expect("acked_through");
                    assert!(
                        through >= after,
                        "relay {at} acked through {through}, below {after} just acked"
                    );
                    acked = after;
                }
                _ => at = 1 - at,
            }
        } else if finished {
            return got;
        } else {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("the drain did not finish");
}

/// From `from`: how long until a push sent after it was answered 200 by relay `relay`.
fn served_again(log: &[Attempt], from: Instant, relay: usize) -> Option<Duration> {
    log.iter()
        .filter(|a| a.ok && a.relay == relay && a.sent > from)
        .map(|a| a.answered - from)
        .min()
}

/// Wait until both relays answered a push sent after `from` with 200: (relay 0, relay 1).
pub(crate) fn wait_both_serve(log: &Mutex<Vec<Attempt>>, from: Instant) -> (Duration, Duration) {
    wait_for(SERVE_AGAIN, || {
        let log = log.lock().unwrap();
        Some((served_again(&log, from, 0)?, served_again(&log, from, 1)?))
    })
    .unwrap_or_else(|| panic!("both relays did not serve again within {SERVE_AGAIN:?}"))
}

/// The longest time in `[from, to]` without any 200 push answer: the outage senders saw.
pub(crate) fn longest_gap(log: &[Attempt], from: Instant, to: Instant) -> Duration {
    let mut oks: Vec<Instant> = log
        .iter()
        .filter(|a| a.ok && a.answered >= from && a.answered <= to)
        .map(|a| a.answered)
        .collect();
    oks.sort();
    let mut prev = from;
    let mut gap = Duration::ZERO;
    for t in oks.into_iter().chain(std::iter::once(to)) {
        gap = gap.max(t - prev);
        prev = t;
    }
    gap
}

/// `mbx_relay_<name>_total` from a relay's `/metrics`.
pub(crate) fn counter(relay: &Relay, name: &str) -> f64 {
    let text = relay.metrics().text();
    // Its only series (labelled with the relay's `process` on a shared store).
    let line = format!("mbx_relay_{name}_total");
    text.lines()
        .filter_map(|l| l.strip_prefix(&line))
        .find(|rest| rest.starts_with([' ', '{']))
        .and_then(|rest| rest.rsplit(' ').next())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {line} in /metrics"))
}

/// What a drill under load left: the acknowledged pushes, what the receiver got, and the
/// relays (alive, for their metrics).
pub(crate) struct Outcome {
    pub(crate) answered: Vec<Answered>,
    pub(crate) received: Vec<(String, u64)>,
    pub(crate) relays: [Relay; 2],
}

/// Two relays on the database `url`, [`SENDERS`] senders pushing to one receiver that drains
/// at either relay, and `drills` run while they do; then every acknowledged item must have
/// reached the receiver exactly once.
pub(crate) fn under_load(
    url: &str,
    drills: impl FnOnce(&Mutex<Vec<Attempt>>, &mut Vec<String>),
) -> Outcome {
    let key = SigningKey::generate();
    let mut args = GENEROUS.to_vec();
    args.extend(["--metrics-listen", "127.0.0.1:0"]);
    let launch = || {
        Relay::launch(
            Backend::Postgres
                .opts(&args)
                .db(url)
                .env("MBX_RELAY_KEY", &key.seed_b64())
                // Every connection the fence admits, for a failed drill's report.
                .env("RUST_LOG", "info,relay_pgstore::fence=debug"),
        )
        .expect("a relay on the database url")
    };
    let relays = [launch(), launch()];
    let addrs = [relays[0].addr(), relays[1].addr()];
    let epoch = relays[0].epoch();
    let bob = Host::enrolled(&relays[0], "bob");
    let senders: Vec<Host> = (0..SENDERS)
        .map(|i| Host::enrolled(&relays[i % 2], &format!("s{i}")))
        .collect();

    let log: Mutex<Vec<Attempt>> = Mutex::new(Vec::new());
    let answered: Mutex<Vec<Answered>> = Mutex::new(Vec::new());
    let (stop, senders_done) = (AtomicBool::new(false), AtomicBool::new(false));
    let mut received = Vec::new();
    let mut report = Vec::new();
    let abort = AtomicBool::new(false);
    std::thread::scope(|s| {
        // A failed drill stops the load and the drain at once (else the test would hang
        // until the receiver's loop ran out).
        let _stop = StopOnPanic([&stop, &abort]);
        let rx = s.spawn(|| drain_through_failovers(&bob, addrs, &epoch, &senders_done, &abort));
        let pushers: Vec<_> = senders
            .iter()
            .enumerate()
            .map(|(i, sender)| {
                let (bob, stop, answered, log) = (&bob, &stop, &answered, &log);
                s.spawn(move || {
                    for n in 0..100_000usize {
                        if stop.load(Ordering::SeqCst) {
                            break;
                        }
                        let item = envelope_item(sender, &[bob]);
                        let (r, retried) =
                            push_until_accepted(sender, addrs, (i + n) % 2, &item, log);
                        answered
                            .lock()
                            .unwrap()
                            .push(answered_of(&item, &r, retried));
                        std::thread::sleep(PUSH_PAUSE);
                    }
                })
            })
            .collect();
        std::thread::sleep(STEADY);
        drills(&log, &mut report);
        std::thread::sleep(STEADY);
        stop.store(true, Ordering::SeqCst);
        for p in pushers {
            p.join().expect("sender thread");
        }
        senders_done.store(true, Ordering::SeqCst);
        received = rx.join().expect("receiver");
    });
    for (n, r) in relays.iter().enumerate() {
        r.assert_alive();
        for line in r
            .stderr_log()
            .lines()
            .filter(|l| l.contains("using this node"))
        {
            eprintln!("pg_ha: relay {}: {line}", n + 1);
        }
    }
    let answered = answered.into_inner().unwrap();
    let retried = answered.iter().filter(|a| a.3).count();
    for line in &report {
        eprintln!("pg_ha: {line}");
    }
    eprintln!(
        "pg_ha: {} pushes acknowledged ({retried} after a retry), {} received",
        answered.len(),
        received.len()
    );
    for (id, _, status, retried) in &answered {
        let ok = status == "accepted" || (*retried && status == "duplicate");
        assert!(ok, "{id}: {status} (retried: {retried})");
    }
    assert_exactly_once(&bob, &received, &answered);
    Outcome {
        answered,
        received,
        relays,
    }
}

/// Sets its flags when dropped while a panic unwinds.
struct StopOnPanic<'a>([&'a AtomicBool; 2]);

impl Drop for StopOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for flag in self.0 {
                flag.store(true, Ordering::SeqCst);
            }
        }
    }
}

/// Each relay's store counters, printed.
pub(crate) fn print_metrics(relays: &[Relay; 2]) {
    for r in relays {
        eprintln!(
            "pg_ha: relay metrics: reconnects {}, connections lost {}, reruns {}, commit unknown \
             {}, connect errors {}, timeouts {}, cancels {}, fenced {}",
            counter(r, "pg_reconnects"),
            counter(r, "pg_connections_lost"),
            counter(r, "pg_reruns"),
            counter(r, "pg_commit_unknown"),
            counter(r, "pg_connect_errors"),
            counter(r, "pg_timeouts"),
            counter(r, "pg_cancels"),
            counter(r, "pg_fenced")
        );
    }
}

#[test]
fn two_relays_serve_through_a_lost_primary_a_rejoin_and_a_switchover_losing_nothing() {
    let mut cluster = HaCluster::start();
    let db = cluster.fresh_db_name();
    let url = cluster.url_of(&db);
    let outcome = under_load(&url, |log, report| {
        // (1) The primary's machine lost: the monitor promotes the standby.
        let old = cluster.primary().expect("a primary");
        let lost = Instant::now();
        cluster.kill_machine(old);
        let (a, b) = wait_both_serve(log, lost);
        let promoted = wait_for(SERVE_AGAIN, || {
            cluster
                .primary()
                .filter(|p| *p != old)
                .map(|_| lost.elapsed())
        });
        let states = cluster.states();
        assert!(
            states
                .iter()
                .any(|s| s.reported == "wait_primary" || s.reported == "primary"),
            "a node took over: {states:?}"
        );
        report.push(format!(
            "kill -9 of the primary's machine: relay 1 served again after {a:?}, relay 2 after \
             {b:?}; monitor primary after {promoted:?}"
        ));

        // (2) The old primary comes back and rejoins as the new primary's standby.
        let back = Instant::now();
        cluster.restart_node(old).expect("pg_autoctl run");
        cluster
            .wait_synchronous(RESYNC)
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let new = cluster.primary().expect("a primary");
        assert_ne!(new, old, "the old primary rejoined as the standby");
        assert!(cluster.synchronous(new), "synchronous again");
        report.push(format!(
            "old primary rejoined as a synchronous standby after {:?}",
            back.elapsed()
        ));

        // (3) A planned switchover under load: the old primary is primary again.
        std::thread::sleep(Duration::from_millis(500));
        let from = Instant::now();
        cluster
            .switchover()
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        let switched = from.elapsed();
        let (a, b) = wait_both_serve(log, Instant::now());
        cluster
            .wait_synchronous(RESYNC)
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
        assert_eq!(
            cluster.primary(),
            Some(old),
            "the switchover swapped the roles"
        );
        let gap = longest_gap(&log.lock().unwrap(), from, Instant::now());
        report.push(format!(
            "switchover: pg_autoctl returned after {switched:?}; longest time without a 200 \
             push {gap:?}; then relay 1 served within {a:?}, relay 2 within {b:?}"
        ));
    });
    print_metrics(&outcome.relays);
    for r in &outcome.relays {
        assert!(
            counter(r, "pg_reconnects") >= 1.0,
            "each relay saw the database answer again"
        );
    }
}

/// For how long node `i` answered as a read-write primary within the next 8 s (`None`: never),
/// polled every 50 ms over its unix socket.
fn writable_again(cluster: &HaCluster, i: usize) -> Option<Duration> {
    let from = Instant::now();
    let (mut first, mut last) = (None, None);
    while from.elapsed() < Duration::from_secs(8) {
        if cluster
            .node_sql(i, "SELECT NOT pg_is_in_recovery()")
            .as_deref()
            == Ok("t")
        {
            let now = Instant::now();
            first.get_or_insert(now);
            last = Some(now);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(last? - first?)
}

/// Postmaster kills in the postmaster drill, one after another on one cluster.
const POSTMASTER_KILLS: usize = 3;

#[test]
fn a_killed_postmaster_restarted_by_its_keeper_never_serves_stale_state_or_doubles_an_item() {
    let mut cluster = HaCluster::start();
    let db = cluster.fresh_db_name();
    let url = cluster.url_of(&db);
    let outcome = under_load(&url, |log, report| {
        for round in 1..=POSTMASTER_KILLS {
            let old = cluster.primary().expect("a primary");
            let timeline = cluster.timeline(old);
            let killed = Instant::now();
            assert!(
                cluster.kill_postmaster_holding_keeper(old, KEEPER_HELD),
                "the primary's postmaster"
            );
            // Whether the keeper, let go, ran the old primary again read-write (what the drill
            // is about), watched while the relays come back.
            let (ran_again, (a, b)) = std::thread::scope(|s| {
                let watch = s.spawn(|| writable_again(&cluster, old));
                let served = wait_both_serve(log, killed);
                (watch.join().expect("watching the old primary"), served)
            });
            cluster
                .wait_synchronous(RESYNC)
                .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
            let new = cluster.primary().expect("a primary");
            report.push(format!(
                "postmaster kill {round}: node {} (timeline {timeline:?}) -> primary node {} \
                 (timeline {:?}){}; the old primary ran again read-write: {ran_again:?}; relay 1 \
                 served again after {a:?}, relay 2 after {b:?}; synchronous again after {:?}",
                old + 1,
                new + 1,
                cluster.timeline(new),
                if new == old { "" } else { ", promoted" },
                killed.elapsed()
            ));
            std::thread::sleep(STEADY);
        }
        // The monitor's view of the whole drill, printed at once so a failed drill shows it
        // too (the relays' logs name each node they used, and whether it required a
        // synchronous standby).
        for e in cluster.events(0) {
            eprintln!("pg_ha: monitor event {e}");
        }
    });
    print_metrics(&outcome.relays);
    assert!(
        !outcome.answered.is_empty() && !outcome.received.is_empty(),
        "the load ran"
    );
}
