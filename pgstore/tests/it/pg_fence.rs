//! The fence against a real old primary: a store on a primary/standby url (`PgPair`) sees the
//! standby promoted (timeline 2) and writes there; then the old primary runs again, read-write
//! on timeline 1 without the new write, first in the url, and the store's connections to the
//! promoted node are cut. Every read and write through the store is then refused, never
//! answered from the old node (which would show the queue without the new item); once the old
//! node is gone again the store serves the promoted node's state.
//!
//! And an old primary left running (as one cut off from its standby and its monitor stays up
//! until its keeper demotes it): a relay that only reads keeps its pooled connections to it,
//! while another relay, started after the promotion, writes on the promoted node. The reading
//! relay must not answer from its old connections (checked again once they are a second old).
//!
//! And within that second: a pull on a connection just checked is refused once the synchronous
//! standby stops streaming from the node (as a standby does before it is promoted).

use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_pgstore::PgStore;
use relay_store::{EnrolOutcome, InsertOutcome, InsertRequest, OpenOptions, Quotas, RelayStore};
use relay_testkit::standby::PgPair;

use crate::pg_store::{enrol_req, item};

/// How long the store may take to serve again after a node change.
const SERVE_AGAIN: Duration = Duration::from_secs(30);
/// How long the reads and writes are tried while the old primary is first in the url.
const WHILE_STALE: Duration = Duration::from_secs(3);

fn push(id: &str) -> InsertRequest {
    let mut r = item(id, 1, &[2], b"bytes");
    r.quotas = Quotas::all(1_000_000);
    r
}

/// The item ids queued for host 2, or the store's error.
fn queued(store: &dyn RelayStore) -> Result<Vec<String>, String> {
    store
        .pull(&[2; 32], 0, 100, 1 << 20)
        .map(|p| p.items.into_iter().map(|i| i.item_id).collect())
        .map_err(|e| e.to_string())
}

/// A store on `url` with host 1 (the sender) and host 2 (the target) enrolled.
fn enrolled_store(url: &str) -> Arc<dyn RelayStore> {
    let store: Arc<dyn RelayStore> =
        Arc::new(PgStore::open(url, OpenOptions::default()).expect("open the postgres store"));
    for k in [1, 2] {
        assert_eq!(
            store.enrol(enrol_req(k)).wait().unwrap(),
            EnrolOutcome::Enrolled
        );
    }
    store
}

/// Retry `f` until it answers `Ok` within [`SERVE_AGAIN`].
fn until_ok<T>(what: &str, mut f: impl FnMut() -> Result<T, String>) -> T {
    let until = Instant::now() + SERVE_AGAIN;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() > until => panic!("{what}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

#[test]
fn an_old_primary_run_again_on_an_older_timeline_is_refused_for_reads_and_writes() {
    let Some(mut pair) = PgPair::start_or_skip("pg_fence") else {
        return;
    };
    let url = pair.url_of(&pair.primary.fresh_db_name());
    let store = enrolled_store(&url);
    let stored = |r: Result<InsertOutcome, relay_store::StoreError>| match r {
        Ok(InsertOutcome::Stored { .. }) => Ok(()),
        other => Err(format!("{other:?}")),
    };
    stored(store.insert(push("before")).wait()).expect("stored on timeline 1");

    // The primary lost, the standby promoted (timeline 2) and writable alone.
    pair.primary.stop_immediate();
    pair.standby.promote().expect("promote");
    pair.standby
        .set_sync_standbys(None)
        .expect("no standby required");
    until_ok("a write on the promoted node", || {
        stored(store.insert(push("after")).wait())
    });

    // The old primary back, read-write on timeline 1 without "after", first in the url; the
    // store's connections to the promoted node cut.
    pair.primary.restart().expect("the old primary runs again");
    pair.primary
        .set_sync_standbys(None)
        .expect("no standby required");
    pair.standby.restart().expect("the promoted node restarts");
    let from = Instant::now();
    let (mut refusals, mut answers) = (Vec::new(), 0);
    while from.elapsed() < WHILE_STALE {
        match queued(store.as_ref()) {
            Ok(ids) => {
                assert_eq!(ids, ["before", "after"], "a read served stale state");
                answers += 1;
            }
            Err(e) => refusals.push(e),
        }
        let w = store.insert(push("during")).wait();
        assert!(
            !matches!(w, Ok(InsertOutcome::Stored { .. })),
            "a write was stored on the old primary"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "pg_fence: {} reads refused, {answers} answered (by the promoted node) in {WHILE_STALE:?}; \
         first refusal: {:?}",
        refusals.len(),
        refusals.first()
    );
    assert!(
        refusals
            .iter()
            .any(|e| e.contains("timeline 1, older than timeline 2")),
        "the old primary was refused for its timeline: {refusals:?}"
    );

    // The old node gone again: the promoted node's state.
    pair.primary.stop_immediate();
    let ids = until_ok("a read on the promoted node", || queued(store.as_ref()));
    assert_eq!(ids, ["before", "after"]);
}

/// Longer than the fence's one-second recheck: the reading store's pooled connection is due
/// for a check again.
const IDLE: Duration = Duration::from_millis(1_500);

#[test]
fn a_pooled_connection_to_an_old_primary_left_running_is_not_read_from_once_the_standby_took_over()
{
    let Some(pair) = PgPair::start_or_skip("pg_fence::left_running") else {
        return;
    };
    let db = pair.primary.fresh_db_name();
    // The standby listed first: once promoted it is the first writable host of the url.
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
        pair.standby.port(),
        pair.primary.port()
    );
    let reader = enrolled_store(&url);
    assert!(matches!(
        reader.insert(push("before")).wait(),
        Ok(InsertOutcome::Stored { .. })
    ));
    assert_eq!(queued(reader.as_ref()).unwrap(), ["before"]);

    // The standby promoted (timeline 2), writable alone; the old primary left running on
    // timeline 1, still asking for a synchronous standby (its commits wait: none comes).
    pair.standby.promote().expect("promote");
    pair.standby
        .set_sync_standbys(None)
        .expect("no standby required");
    pair.primary
        .set_sync_standbys(Some("no_such_standby"))
        .expect("the old primary waits for a standby");
    // Another relay, started now: its connections go to the promoted node.
    let writer: Arc<dyn RelayStore> =
        Arc::new(PgStore::open(&url, OpenOptions::default()).expect("open the writing store"));
    until_ok("a write on the promoted node", || {
        match writer.insert(push("after")).wait() {
            Ok(InsertOutcome::Stored { .. }) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });

    std::thread::sleep(IDLE);
    let from = Instant::now();
    let (mut refusals, mut answers) = (Vec::new(), 0);
    while from.elapsed() < WHILE_STALE {
        match queued(reader.as_ref()) {
            Ok(ids) => {
                assert_eq!(
                    ids,
                    ["before", "after"],
                    "a read served the old primary's stale state"
                );
                answers += 1;
            }
            Err(e) => refusals.push(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "pg_fence: {} reads refused, {answers} answered (by the promoted node) in \
         {WHILE_STALE:?}; first refusal: {:?}",
        refusals.len(),
        refusals.first()
    );
    assert!(answers > 0, "the reading store reached the promoted node");
}

/// A pull or cursor read on a pooled connection checked less than a second ago is refused once
/// the node's synchronous standby has stopped streaming from it (here stopped; promoted, it stops the
/// same way before it takes a write): in the drill, a receiver that had acked through an item
/// on the just-promoted node was answered the old primary's older `head_seq` in that second.
#[test]
fn a_read_is_refused_as_soon_as_the_synchronous_standby_stops_streaming() {
    let Some(mut pair) = PgPair::start_or_skip("pg_fence::standby_stops") else {
        return;
    };
    let url = pair.url_of(&pair.primary.fresh_db_name());
    let store = enrolled_store(&url);
    assert!(matches!(
        store.insert(push("before")).wait(),
        Ok(InsertOutcome::Stored { .. })
    ));
    // Past the recheck interval, so this read checks its connection: fresh from `checked`.
    std::thread::sleep(IDLE);
    assert_eq!(queued(store.as_ref()).unwrap(), ["before"]);
    let checked = Instant::now();
    pair.standby.stop_immediate();
    let stopped = checked.elapsed();
    let first = queued(store.as_ref());
    eprintln!("pg_fence: standby stopped {stopped:?} after the check; first read: {first:?}");
    let refused = first.expect_err("a read answered after the standby stopped streaming");
    assert!(
        refused.contains("none streams from it now"),
        "refused in the read's own flight, not by a later check: {refused}"
    );
    // The cursor alone (what `/info` and the error answers report) the same way.
    let cursor = store.cursor(&[2; 32]).map_err(|e| e.to_string());
    assert!(
        matches!(&cursor, Err(e) if e.contains("none streams from it now")),
        "the cursor read was refused in its own flight: {cursor:?} ({:?} after the check)",
        checked.elapsed()
    );

    pair.standby.restart().expect("the standby runs again");
    let ids = until_ok("a read once the standby streams again", || {
        queued(store.as_ref())
    });
    assert_eq!(ids, ["before"]);
}
