//! Network partitions, made by the tests themselves with network namespaces (relay-testkit's
//! `Netns`), under the load and history checker of the HA drills (`pg_ha::under_load`: two
//! relays in the root namespace, four senders, a receiver draining at either relay; over the
//! whole history every acknowledged item reached the receiver exactly once, read from the
//! nodes that survived, and its acked cursor never moved back).
//!
//! A single PostgreSQL inside a namespace joined by a veth pair (a private /30 such as
//! 10.201.x.0/30): the namespace's end of the link set down (packets vanish, no error: open
//! connections hang, new ones time out) for longer than the store's operation deadline, and a
//! link flapping. While cut, no push is acknowledged: each is answered 503 within the
//! deadline; restored, both relays serve again without a restart.
//!
//! A pg_auto_failover cluster with the monitor and each node in a namespace of its own on one
//! LAN (`HaCluster::start_in_netns_or_skip`): the relays cut from the primary but not the
//! standby; the primary cut from its synchronous standby (its commits wait: 503, never a
//! success the standby lacks); the monitor cut off (nothing changes: the primary keeps its
//! standby and its role); the primary's replies to the relays lost while their packets still
//! arrive (statements run, answers vanish). Each partition is held past the operation
//! deadline, then healed; both relays must serve again and the cluster be synchronous again.
//!
//! Skipped (with a line saying why) when not root or `ip netns` is unavailable.

use crate::common::wait_for;
use crate::pg_ha::{
    counter, longest_gap, print_metrics, under_load, wait_both_serve, Attempt, RESYNC,
};

use std::sync::Mutex;
use std::time::{Duration, Instant};

use relay_testkit::cluster::{bindir_or_skip, PgCluster};
use relay_testkit::ha::{HaCluster, Member};
use relay_testkit::netns::Netns;

/// How long the partition lasts: past the store's 10 s operation deadline, so operations
/// caught on a connection when the link went are abandoned at it, not only new ones refused;
/// and past `pg_ha::ANSWER_BOUND` (14 s), so a push left hanging until the link returns fails
/// the bound every answer is held to.
const CUT: Duration = Duration::from_secs(15);
/// A recovery after the cut slower than this prints what the relays logged (the 11.5 s seen
/// once; 0.4-0.8 s is usual).
const SLOW_RECOVERY: Duration = Duration::from_secs(5);
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
    let slow = std::cell::Cell::new(false);
    let outcome = under_load(&url, |log, report| {
        net.ns.cut();
        // Taken once the link is down: a push sent while `ip` ran may still succeed.
        let cut = Instant::now();
        std::thread::sleep(CUT);
        let restored = Instant::now();
        net.ns.restore();
        // Sessions the server still holds open in a transaction begun before the cut (their
        // client gave up at its deadline): their row locks stall every push to the target.
        // (Asked again for up to 3 s: the link takes a moment to carry packets.)
        let stale = wait_for(Duration::from_secs(3), || {
            net.pg
                .sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'mbx-relay' \
                     AND state LIKE 'idle in transaction%' AND clock_timestamp() - state_change \
                     > interval '12 s'",
                )
                .ok()
        });
        let (a, b) = wait_both_serve(log, restored);
        report.push(format!(
            "relay sessions idle in a transaction since before the cut's 12th second, right \
             after the link returned: {stale:?}"
        ));
        assert_eq!(
            stale.as_deref(),
            Some("0"),
            "no relay session outlives its deadline idle in a transaction (its row locks \
             would stall every push to the target after the heal)"
        );
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
        if a.max(b) > SLOW_RECOVERY {
            slow.set(true);
            report.push(format!(
                "slow recovery; the attempts answered after the link returned (sent, took, \
                 relay, status, from the restore): {:?}",
                log.iter()
                    .filter(|a| a.answered >= restored && !a.ok)
                    .map(|a| (
                        a.sent.checked_duration_since(restored),
                        a.answered - a.sent,
                        a.relay + 1,
                        a.status
                    ))
                    .collect::<Vec<_>>()
            ));
        }
    });
    print_metrics(&outcome.relays);
    if slow.get() {
        for (i, r) in outcome.relays.iter().enumerate() {
            let log = r.stderr_log();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!(
                "---- relay {} stderr (last 60 lines) ----\n{}",
                i + 1,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
    }
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

/// How long a partition between HA members lasts: past the store's 10 s operation deadline
/// (operations caught by it are abandoned there, not only new ones refused), short of
/// `pg_ha::ANSWER_BOUND`: the suite's normal tier holds one such cut per scenario.
const HA_CUT: Duration = Duration::from_secs(11);
/// How often the monitor's view is sampled during a partition.
const SAMPLE: Duration = Duration::from_millis(250);

/// What a partition of an HA cluster saw: when it was made and healed, which node was primary
/// then, and when the monitor first stopped holding that node `primary` (its goal or its
/// report), if it did.
struct Partition {
    from: Instant,
    to: Instant,
    primary: usize,
    primary_left: Option<Instant>,
    /// When the old primary itself was first seen not writable (in recovery or down; asked
    /// over its unix socket, which no cut stops), if it was.
    primary_stopped: Option<Instant>,
}

/// Make a partition with `cut` (given the primary's index), hold it for `hold` while sampling
/// the monitor and the old primary, heal it with `heal`, and wait until both relays serve
/// again.
fn hold_partition(
    cluster: &HaCluster,
    log: &Mutex<Vec<Attempt>>,
    report: &mut Vec<String>,
    what: &str,
    hold: Duration,
    cut: impl FnOnce(usize),
    heal: impl FnOnce(usize),
) -> Partition {
    let primary = cluster.primary().expect("a primary");
    cut(primary);
    let from = Instant::now();
    let (mut primary_left, mut primary_stopped) = (None, None);
    while from.elapsed() < hold {
        let writable = cluster.node_sql(primary, "SELECT NOT pg_is_in_recovery()");
        if primary_stopped.is_none() && !matches!(writable.as_deref(), Ok("t")) {
            primary_stopped = Some(Instant::now());
            report.push(format!(
                "{what}: after {:?} node {} itself was no longer writable",
                from.elapsed(),
                primary + 1
            ));
        }
        let state = cluster.state_of(primary);
        let held = state.as_ref().is_none_or(|s| s.goal == "primary");
        if !held && primary_left.is_none() {
            primary_left = Some(Instant::now());
            report.push(format!(
                "{what}: after {:?} the monitor moved node {}: {:?}",
                from.elapsed(),
                primary + 1,
                cluster.states()
            ));
        }
        std::thread::sleep(SAMPLE);
    }
    heal(primary);
    let to = Instant::now();
    let (a, b) = wait_both_serve(log, to);
    let log = log.lock().unwrap();
    let during = answered_within(&log, from, to);
    let refused = during.iter().filter(|a| !a.ok).count();
    let slowest = during.iter().map(|a| a.answered - a.sent).max();
    report.push(format!(
        "{what} for {hold:?}: {} pushes acknowledged and {refused} refused meanwhile (slowest \
         answer {slowest:?}); longest time without a 200 push {:?}; after the heal relay 1 \
         served again after {a:?}, relay 2 after {b:?}",
        during.len() - refused,
        longest_gap(&log, from, Instant::now())
    ));
    Partition {
        from,
        to,
        primary,
        primary_left,
        primary_stopped,
    }
}

/// An HA cluster in namespaces under the HA load, `drill` run on it; then the cluster must be
/// synchronous again. Returns at once when skipped.
fn ha_partition_drill(
    test: &str,
    drill: impl FnOnce(&HaCluster, &Mutex<Vec<Attempt>>, &mut Vec<String>),
) {
    ha_partition_drill_listing(test, Listed::Node1First, drill);
}

/// Which node the relays' multi-host url lists first (the one it tries first).
#[derive(Clone, Copy)]
enum Listed {
    Node1First,
    /// The standby first: once promoted, it is the first writable host, so the relays' new
    /// connections go there while older ones may still reach the old primary.
    StandbyFirst,
}

/// [`ha_partition_drill`] with the relays' url listing `listed` first.
fn ha_partition_drill_listing(
    test: &str,
    listed: Listed,
    drill: impl FnOnce(&HaCluster, &Mutex<Vec<Attempt>>, &mut Vec<String>),
) {
    let Some(mut cluster) = HaCluster::start_in_netns_or_skip(test) else {
        return;
    };
    let db = cluster.fresh_db_name();
    let first = match listed {
        Listed::Node1First => 0,
        Listed::StandbyFirst => 1 - cluster.primary().expect("a primary"),
    };
    let url = cluster.url_listing_first(&db, first);
    let outcome = under_load(&url, |log, report| {
        drill(&cluster, log, report);
        cluster
            .wait_synchronous(RESYNC)
            .unwrap_or_else(|e| panic!("{e}\n{}", cluster.logs()));
    });
    print_metrics(&outcome.relays);
    assert!(
        !outcome.answered.is_empty() && !outcome.received.is_empty(),
        "the load ran"
    );
    let duplicates = outcome
        .answered
        .iter()
        .filter(|a| a.2 == "duplicate")
        .count();
    eprintln!("pg_ha: {duplicates} pushes answered duplicate (a retry of what had committed)");
}

/// The attempts answered from `from` to `to`, whenever sent (a push sent just before a
/// partition may wait in it until the deadline).
fn answered_within(log: &[Attempt], from: Instant, to: Instant) -> Vec<Attempt> {
    log.iter()
        .filter(|a| a.answered >= from && a.answered <= to)
        .copied()
        .collect()
}

/// No push sent into `p` was acknowledged while the partition held and the monitor still held
/// its primary, and pushes were refused meanwhile (at the deadline, or at once).
fn assert_none_acknowledged_while_primary_held(log: &Mutex<Vec<Attempt>>, p: &Partition) {
    let log = log.lock().unwrap();
    let held_until = p.primary_left.unwrap_or(p.to);
    let acked: Vec<_> = within(&log, p.from, held_until)
        .into_iter()
        .filter(|a| a.ok)
        .map(|a| a.answered - p.from)
        .collect();
    assert!(
        acked.is_empty(),
        "pushes acknowledged during the partition (after {acked:?}), the primary unchanged"
    );
    assert!(
        answered_within(&log, p.from, p.to).iter().any(|a| !a.ok),
        "pushes were refused during the partition"
    );
}

/// The relays cut from the primary both ways (silently: its namespace drops what comes from
/// the root namespace and what it sends there), not from the standby: their sessions to the
/// primary hang or time out, the standby refuses a read-write session, so every push is
/// refused until the heal; the monitor sees both nodes and keeps its primary.
fn relays_cut_from_the_primary(c: &HaCluster, log: &Mutex<Vec<Attempt>>, r: &mut Vec<String>) {
    let root = c.root_addr();
    let what = "relays cut from the primary (both ways)";
    let p = hold_partition(
        c,
        log,
        r,
        what,
        HA_CUT,
        |p| {
            c.net(Member::Node(p)).drop_from(root);
            c.net(Member::Node(p)).drop_to(root);
        },
        |p| {
            c.net(Member::Node(p)).undrop_from(root);
            c.net(Member::Node(p)).undrop_to(root);
        },
    );
    assert_none_acknowledged_while_primary_held(log, &p);
    assert_eq!(p.primary_left, None, "the monitor kept its primary");
}

/// How long the primary is cut from its standby: long enough that a COMMIT caught by the cut
/// and abandoned at the deadline would be seen still waiting ([`OUTLIVED`]) had its cancel
/// not ended it.
const STANDBY_CUT: Duration = Duration::from_secs(15);
/// A relay backend still waiting for the standby after this long outlived its request (the
/// 10 s operation deadline, and 2 s for the cancel request to land on a loaded machine).
const OUTLIVED: &str = "12 s";

/// The primary cut from its synchronous standby both ways: while the monitor holds it
/// `primary` (synchronous), a COMMIT waits for a standby it cannot reach and is refused at
/// the deadline, never acknowledged, and cancelled on the server: just before the heal no
/// relay backend on the primary has waited for the standby longer than its request lived.
fn primary_cut_from_standby(c: &HaCluster, log: &Mutex<Vec<Attempt>>, r: &mut Vec<String>) {
    let what = "primary cut from its standby (both ways)";
    let standby = |p: usize| c.net(Member::Node(1 - p)).inner_addr();
    let outlived = Mutex::new(None);
    let p = hold_partition(
        c,
        log,
        r,
        what,
        STANDBY_CUT,
        |p| {
            c.net(Member::Node(p)).drop_from(standby(p));
            c.net(Member::Node(p)).drop_to(standby(p));
        },
        |p| {
            *outlived.lock().unwrap() = Some(c.node_sql(
                p,
                &format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'mbx-relay' \
                     AND wait_event = 'SyncRep' \
                     AND clock_timestamp() - query_start > interval '{OUTLIVED}'"
                ),
            ));
            c.net(Member::Node(p)).undrop_from(standby(p));
            c.net(Member::Node(p)).undrop_to(standby(p));
        },
    );
    assert_none_acknowledged_while_primary_held(log, &p);
    let outlived = outlived.into_inner().unwrap().expect("the heal ran");
    r.push(format!(
        "{what}: relay backends waiting for the standby longer than {OUTLIVED} at the heal: \
         {outlived:?}"
    ));
    assert_eq!(
        outlived.as_deref(),
        Ok("0"),
        "no relay backend outlives its request (a COMMIT abandoned at the deadline is cancelled)"
    );
}

/// The monitor's link down: the primary still streams to its standby, so it neither demotes
/// itself nor stops committing, and the relays keep serving.
fn monitor_cut_off(c: &HaCluster, log: &Mutex<Vec<Attempt>>, r: &mut Vec<String>) {
    let what = "monitor cut off (its link down)";
    let net = c.net(Member::Monitor);
    let p = hold_partition(c, log, r, what, HA_CUT, |_| net.cut(), |_| net.restore());
    let acked = answered_within(&log.lock().unwrap(), p.from, p.to)
        .iter()
        .any(|a| a.ok);
    assert!(
        acked,
        "pushes were acknowledged while the monitor was cut off"
    );
    c.wait_synchronous(RESYNC)
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    assert_eq!(c.primary(), Some(p.primary), "the same primary");
}

/// One direction only: the primary's packets to the relays dropped, theirs still arriving.
/// Statements (COMMITs among them) run while their answers vanish: each push is refused at
/// the deadline, and its retry after the heal is a `duplicate` of what committed.
fn primary_replies_lost(c: &HaCluster, log: &Mutex<Vec<Attempt>>, r: &mut Vec<String>) {
    let root = c.root_addr();
    let what = "the primary's packets to the relays dropped (theirs still arrive)";
    let p = hold_partition(
        c,
        log,
        r,
        what,
        HA_CUT,
        |p| c.net(Member::Node(p)).drop_to(root),
        |p| c.net(Member::Node(p)).undrop_to(root),
    );
    assert_none_acknowledged_while_primary_held(log, &p);
    assert_eq!(p.primary_left, None, "the monitor kept its primary");
}

/// The primary cut from the monitor and from its standby at once (both ways), the relays
/// still reaching it: the monitor promotes the standby, while the old primary stays up until
/// its keeper demotes it (after its `network_partition_timeout`, once it sees no standby
/// streaming; its walsender may keep the lost standby listed for a while). Meanwhile the old
/// node still answers the relays: its commits wait for the standby it lost (503 at the
/// deadline, cancelled there, which commits them locally), its reads would show what the
/// promoted node lacks and miss what it acknowledged since. The relays must serve neither:
/// the history checker fails a page whose `head_seq` is below an acked cursor and an item
/// received twice (a cancelled push served from the old node, then its retry stored again
/// on the promoted one).
fn primary_isolated(c: &HaCluster, log: &Mutex<Vec<Attempt>>, r: &mut Vec<String>) {
    let what = "primary cut from the monitor and its standby (both ways; the relays reach it)";
    let peers = |p: usize| {
        [
            c.net(Member::Node(1 - p)).inner_addr(),
            c.net(Member::Monitor).inner_addr(),
        ]
    };
    let streams = Mutex::new(None);
    let p = hold_partition(
        c,
        log,
        r,
        what,
        HA_CUT,
        |p| {
            for peer in peers(p) {
                c.net(Member::Node(p)).drop_from(peer);
                c.net(Member::Node(p)).drop_to(peer);
            }
        },
        |p| {
            *streams.lock().unwrap() =
                Some(c.node_sql(p, "SELECT count(*) FROM pg_stat_replication"));
            for peer in peers(p) {
                c.net(Member::Node(p)).undrop_from(peer);
                c.net(Member::Node(p)).undrop_to(peer);
            }
        },
    );
    assert_none_acknowledged_while_primary_held(log, &p);
    assert!(
        p.primary_left.is_some(),
        "the monitor moved its primary away from the isolated node"
    );
    r.push(format!(
        "{what}: the monitor moved node {} after {:?}, the node itself stopped being writable \
         after {:?}; standbys it still listed as streaming at the heal: {:?}",
        p.primary + 1,
        p.primary_left.map(|t| t - p.from),
        p.primary_stopped.map(|t| t - p.from),
        streams.into_inner().unwrap()
    ));
}

/// The four partitions between HA members, one after another on one cluster (one cluster
/// start instead of four: the suite's normal tier); each alone below (`--ignored`).
#[test]
fn partitions_between_ha_members_acknowledge_nothing_the_survivors_lack_and_heal_without_restarts()
{
    ha_partition_drill("pg_partition::ha", |c, log, r| {
        relays_cut_from_the_primary(c, log, r);
        c.wait_synchronous(RESYNC)
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
        primary_cut_from_standby(c, log, r);
        c.wait_synchronous(RESYNC)
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
        monitor_cut_off(c, log, r);
        primary_replies_lost(c, log, r);
    });
}

#[test]
#[ignore = "one HA partition alone (about a minute): the normal tier runs all four on one cluster"]
fn relays_cut_from_the_primary_but_not_the_standby_get_503_and_serve_again_without_a_failover() {
    ha_partition_drill(
        "pg_partition::relays_from_primary",
        relays_cut_from_the_primary,
    );
}

#[test]
#[ignore = "one HA partition alone (about a minute): the normal tier runs all four on one cluster"]
fn a_primary_cut_from_its_synchronous_standby_acknowledges_no_write_the_standby_lacks() {
    ha_partition_drill(
        "pg_partition::primary_from_standby",
        primary_cut_from_standby,
    );
}

#[test]
#[ignore = "one HA partition alone (about a minute): the normal tier runs all four on one cluster"]
fn the_monitor_cut_off_changes_no_role_and_the_relays_keep_serving() {
    ha_partition_drill("pg_partition::monitor", monitor_cut_off);
}

#[test]
#[ignore = "one HA partition alone (about a minute): the normal tier runs all four on one cluster"]
fn an_asymmetric_cut_losing_the_primarys_replies_acknowledges_nothing_and_retries_dedupe() {
    ha_partition_drill("pg_partition::asymmetric", primary_replies_lost);
}

#[test]
#[ignore = "one HA partition alone (about a minute and a half: a failover and a rejoin); run \
            with --include-ignored pg_partition::"]
fn a_primary_cut_from_its_monitor_and_standby_is_never_read_from_after_the_standby_took_over() {
    ha_partition_drill_listing(
        "pg_partition::primary_isolated",
        Listed::StandbyFirst,
        primary_isolated,
    );
}

#[test]
#[ignore = "one HA partition alone (about a minute and a half: a failover and a rejoin); run \
            with --include-ignored pg_partition::"]
fn a_primary_cut_from_its_monitor_and_standby_and_listed_first_is_refused_until_it_is_demoted() {
    ha_partition_drill_listing(
        "pg_partition::primary_isolated_first",
        Listed::Node1First,
        primary_isolated,
    );
}
