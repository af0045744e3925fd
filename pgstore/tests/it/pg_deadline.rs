//! Deadlines that end the work on the server too: with every COMMIT stuck waiting for a
//! synchronous standby that does not exist (as on a promoted node that still asks for one),
//! the store answers each push an error at its 10 s operation deadline, and the backend that
//! ran it does not live on: the abandoned connection sends a cancel request before it closes
//! (a backend waiting for synchronous replication ignores a closed socket; before the fix each
//! such push left one waiting for good, until `max_connections` ran out). New connections to
//! the stuck node are refused meanwhile (the fence: it requires a standby it does not have).
//! Once the requirement is lifted, each push retried is stored exactly once (the cancelled
//! COMMIT had committed locally: its retry is a duplicate).

use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_pgstore::PgStore;
use relay_store::{EnrolOutcome, InsertOutcome, InsertRequest, OpenOptions, Quotas, RelayStore};
use relay_testkit::cluster::PgCluster;

use crate::pg_store::{enrol_req, item};

/// How long the commits stay stuck while pushes keep coming (the 60 s).
const STUCK: Duration = Duration::from_secs(60);
/// Longest one push may take to answer: the store's 10 s deadline with margin.
const ANSWER_BOUND: Duration = Duration::from_secs(15);
/// How long the abandoned backends may take to end once their push answered.
const BACKENDS_GONE: Duration = Duration::from_secs(10);
/// Pushes sent at once, each round.
const AT_ONCE: usize = 3;

/// Item `id` from host 1 to host 2, under caps this test never reaches.
fn push(id: &str) -> InsertRequest {
    let mut r = item(id, 1, &[2], b"bytes");
    r.quotas = Quotas::all(1_000_000);
    r
}

/// The relay's backends, and those of them waiting for synchronous replication.
fn backends(pg: &PgCluster) -> (u64, u64) {
    let row = pg
        .sql(
            "SELECT count(*), count(*) FILTER (WHERE wait_event = 'SyncRep') FROM \
             pg_stat_activity WHERE application_name = 'mbx-relay'",
        )
        .expect("pg_stat_activity");
    let (all, syncrep) = row.split_once('|').expect("two columns");
    (all.parse().expect("count"), syncrep.parse().expect("count"))
}

#[test]
fn a_commit_given_up_at_its_deadline_leaves_no_backend_waiting_on_the_server() {
    let Some(pg) = PgCluster::start_or_skip("pg_deadline") else {
        return;
    };
    let store: Arc<dyn RelayStore> = Arc::new(
        PgStore::open(&pg.fresh_db(), OpenOptions::default()).expect("open the postgres store"),
    );
    for k in [1, 2] {
        assert_eq!(
            store.enrol(enrol_req(k)).wait().unwrap(),
            EnrolOutcome::Enrolled
        );
    }
    // A few pooled connections, as a serving relay has.
    std::thread::scope(|s| {
        for n in 0..AT_ONCE {
            let store = store.clone();
            s.spawn(move || {
                let r = store.insert(push(&format!("warm{n}"))).wait();
                assert!(matches!(r, Ok(InsertOutcome::Stored { .. })), "{r:?}");
            });
        }
    });

    pg.set_sync_standbys(Some("no_such_standby"))
        .expect("commits now wait for a standby that never comes");
    let stuck_from = Instant::now();
    let (mut pushes, mut slowest, mut round) = (0usize, Duration::ZERO, 0usize);
    while stuck_from.elapsed() < STUCK {
        std::thread::scope(|s| {
            let tries: Vec<_> = (0..AT_ONCE)
                .map(|n| {
                    let store = store.clone();
                    s.spawn(move || {
                        let t = Instant::now();
                        let r = store.insert(push(&format!("stuck{round}-{n}"))).wait();
                        (r, t.elapsed())
                    })
                })
                .collect();
            for t in tries {
                let (r, took) = t.join().expect("push thread");
                assert!(r.is_err(), "a push answered success with no standby: {r:?}");
                assert!(took < ANSWER_BOUND, "a push answered after {took:?}");
                slowest = slowest.max(took);
                pushes += 1;
            }
        });
        round += 1;
        std::thread::sleep(Duration::from_millis(500));
    }
    let waiting_then = backends(&pg);
    let gone = Instant::now();
    let mut left = waiting_then;
    while left.1 > 0 && gone.elapsed() < BACKENDS_GONE {
        std::thread::sleep(Duration::from_millis(100));
        left = backends(&pg);
    }
    eprintln!(
        "pg_deadline: {pushes} pushes in {:?} of stuck commits, slowest answer {slowest:?}; \
         relay backends (all, waiting SyncRep) {waiting_then:?} at the end, {left:?} after {:?}",
        stuck_from.elapsed(),
        gone.elapsed()
    );
    assert_eq!(left.1, 0, "no backend outlives its request");
    assert!(left.0 <= 16, "at most the pool's 16 connections: {left:?}");

    // Lifted: every push retried is stored once, the cancelled ones as duplicates.
    pg.set_sync_standbys(None).expect("lift the requirement");
    for r in 0..round {
        for n in 0..AT_ONCE {
            let again = store.insert(push(&format!("stuck{r}-{n}"))).wait();
            assert!(
                matches!(again, Ok(InsertOutcome::Stored { .. })),
                "{again:?}"
            );
        }
    }
    let stored = store.usage_target(&[2; 32]).unwrap().items;
    assert_eq!(stored, u64::try_from(AT_ONCE * (round + 1)).unwrap());
}
