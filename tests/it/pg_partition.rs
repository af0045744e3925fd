//! Network partitions between the relays and PostgreSQL, made by the tests themselves: the
//! cluster runs inside a network namespace joined to the root namespace by a veth pair
//! (relay-testkit's `Netns`, a private /30 such as 10.201.x.0/30), two relays in the root
//! namespace reach it over that link, and the test sets the namespace's end of the link down
//! (packets vanish, no error: open connections hang, new ones time out) and up again, under
//! the load and history checker of the HA drills (`pg_ha::under_load`: four senders, a
//! receiver draining at either relay).
//!
//! While cut, no push is acknowledged: each is answered 503 within the store's operation
//! deadline. Restored, both relays serve again without a restart; over the whole history every
//! acknowledged item reached the receiver exactly once and its acked cursor never moved back.
//! Skipped (with a line saying why) when not root or `ip netns` is unavailable.

use crate::pg_ha::{counter, longest_gap, print_metrics, under_load, wait_both_serve, Attempt};

use std::time::{Duration, Instant};

use relay_testkit::cluster::{bindir_or_skip, PgCluster};
use relay_testkit::netns::Netns;

/// How long the partition lasts: past the store's 10 s operation deadline, so operations
/// caught on a connection when the link went are abandoned at it, not only new ones refused;
/// and past `pg_ha::ANSWER_BOUND` (14 s), so a push left hanging until the link returns fails
/// the bound every answer is held to.
const CUT: Duration = Duration::from_secs(15);
/// The flapping link: down for half of each period, up for the other half.
const FLAP_PERIOD: Duration = Duration::from_secs(2);
const FLAPS: usize = 5;

/// A cluster inside its own network namespace. Fields drop in order: the cluster stops
/// before its namespace (and link) is removed.
struct Partitionable {
    pg: PgCluster,
    ns: Netns,
}

impl Partitionable {
    /// The namespace and the cluster in it, or `None` (a skip line printed) when the test
    /// cannot make namespaces or PostgreSQL is not installed.
    fn start_or_skip(test: &str) -> Option<Partitionable> {
        let ns = Netns::create_or_skip(test)?;
        let bindir = bindir_or_skip(test)?;
        let pg = PgCluster::start_in_netns(&bindir, &ns)
            .unwrap_or_else(|e| panic!("PostgreSQL in network namespace: {e}"));
        Some(Partitionable { pg, ns })
    }

    /// A fresh database's url, without TLS (off loopback the relay defaults to verify-full;
    /// this link is the test's own).
    fn url(&self) -> String {
        format!("{}?sslmode=disable", self.pg.fresh_db())
    }
}

/// The attempts sent from `from` and answered by `to`.
fn within(log: &[Attempt], from: Instant, to: Instant) -> Vec<Attempt> {
    log.iter()
        .filter(|a| a.sent >= from && a.answered <= to)
        .copied()
        .collect()
}

#[test]
fn a_relay_cut_off_from_postgres_refuses_writes_with_503_and_serves_again_when_the_link_returns() {
    let Some(net) = Partitionable::start_or_skip("pg_partition::cut") else {
        return;
    };
    let url = net.url();
    let outcome = under_load(&url, |log, report| {
        let cut = Instant::now();
        net.ns.cut();
        std::thread::sleep(CUT);
        let restored = Instant::now();
        net.ns.restore();
        let (a, b) = wait_both_serve(log, restored);
        let log = log.lock().unwrap();
        let during = within(&log, cut, restored);
        assert!(
            during.iter().all(|a| a.status == Some(503)),
            "every push sent into the cut is answered 503: {:?}",
            during.iter().map(|a| a.status).collect::<Vec<_>>()
        );
        assert!(!during.is_empty(), "pushes were refused during the cut");
        let slowest = during.iter().map(|a| a.answered - a.sent).max();
        let gap = longest_gap(&log, cut, Instant::now());
        report.push(format!(
            "link cut for {CUT:?}: {} pushes answered 503 during it (slowest answer \
             {slowest:?}), none acknowledged; after the link returned relay 1 served again \
             after {a:?}, relay 2 after {b:?}; longest time without a 200 push {gap:?}",
            during.len()
        ));
    });
    print_metrics(&outcome.relays);
    assert!(
        outcome
            .relays
            .iter()
            .any(|r| counter(r, "pg_timeouts") >= 1.0),
        "an operation caught by the cut was abandoned at its deadline"
    );
    assert!(
        !outcome.answered.is_empty() && !outcome.received.is_empty(),
        "the load ran"
    );
}

#[test]
fn a_link_flapping_every_two_seconds_neither_loses_nor_doubles_an_item_nor_moves_a_cursor_back() {
    let Some(net) = Partitionable::start_or_skip("pg_partition::flap") else {
        return;
    };
    let url = net.url();
    let outcome = under_load(&url, |log, report| {
        let start = Instant::now();
        for _ in 0..FLAPS {
            net.ns.cut();
            std::thread::sleep(FLAP_PERIOD / 2);
            net.ns.restore();
            std::thread::sleep(FLAP_PERIOD / 2);
        }
        let restored = Instant::now();
        let (a, b) = wait_both_serve(log, restored);
        let log = log.lock().unwrap();
        let during = within(&log, start, restored);
        let refused = during.iter().filter(|a| !a.ok).count();
        let slowest = during.iter().map(|a| a.answered - a.sent).max();
        let gap = longest_gap(&log, start, Instant::now());
        report.push(format!(
            "link flapping ({FLAPS} times down {:?}, up {:?}): {} pushes acknowledged and \
             {refused} refused meanwhile (slowest answer {slowest:?}); longest time without a \
             200 push {gap:?}; afterwards relay 1 served within {a:?}, relay 2 within {b:?}",
            FLAP_PERIOD / 2,
            FLAP_PERIOD / 2,
            during.len() - refused
        ));
    });
    print_metrics(&outcome.relays);
    assert!(
        !outcome.answered.is_empty() && !outcome.received.is_empty(),
        "the load ran"
    );
}
