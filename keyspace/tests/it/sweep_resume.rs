//! A sweep run is linear in the rows it touches: each call resumes after the last expiry (or
//! dedup-prune) row the previous call of the run handled, instead of scanning again from the
//! start of the index over the tombstones the run left (quadratic: N rows in calls of `max`
//! re-read N² / 2·max tombstones). A row that lands before that position mid-run (only a key
//! rotation or a clock moved back can put one there) is handled by the next run: a call that
//! finds nothing more ends the run and the next starts at the beginning.

use crate::common;

use common::*;
use relay_keyspace::*;

const DAY: u64 = 24 * 3600 * 1000;
const RETENTION: u64 = 14 * DAY;
const T0: u64 = 1_800_000_000_000;

/// One sweep call of at most `max` rows at `now`, pruning dedup rows gone before `horizon`.
fn sweep(store: &Store, now: u64, horizon: u64, max: usize) -> SweepReport {
    store
        .sweep(
            now,
            horizon,
            big_quotas(),
            RETENTION,
            max,
            notice_fn(key(100)),
        )
        .wait()
        .unwrap()
}

fn insert(store: &Store, sender: Key32, id: &str, target: Key32) -> u64 {
    let out = store
        .insert(InsertRequest {
            item: item(sender, id, &[(target, b"wire")]),
            quotas: big_quotas(),
            retention_ms: RETENTION,
            require_live_sender: false,
        })
        .wait()
        .unwrap();
    stored_seqs(&out)[0].seq
}

fn fixture() -> (
    tempfile::TempDir,
    std::sync::Arc<TestClock>,
    Store,
    Key32,
    Key32,
) {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let (sender, target) = (key(1), key(2));
    enrol(&store, sender, "sender");
    enrol(&store, target, "target");
    (dir, clock, store, sender, target)
}

/// The ids of the items still queued for `target`.
fn queued(store: &Store, target: &Key32) -> Vec<String> {
    let page = store.pull(target, 0, 100, u64::MAX).unwrap();
    page.items.iter().map(|i| i.item_id.clone()).collect()
}

#[test]
fn a_sweep_run_resumes_after_its_last_expired_row_and_the_next_run_starts_over() {
    let (_dir, clock, store, sender, target) = fixture();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        clock.set(T0 + i as u64);
        insert(&store, sender, id, target);
    }
    let due = T0 + 2 + RETENTION;
    // The sweeps run later than `due` - retention, so the notices they queue are not due yet.
    clock.set(T0 + 10);
    let first = sweep(&store, due, 0, 1);
    assert_eq!((first.expired, first.more), (1, true));
    assert_eq!(queued(&store, &target), ["b", "c"]);
    // An item due earlier than the run's position, written mid-run (the clock moved back).
    clock.set(T0 - DAY);
    insert(&store, sender, "early", target);
    clock.set(T0 + 10);

    let second = sweep(&store, due, 0, 1);
    assert_eq!((second.expired, second.more), (1, true));
    assert_eq!(
        queued(&store, &target),
        ["c", "early"],
        "the call resumed after `a`, not at the start of the index"
    );
    let third = sweep(&store, due, 0, 1);
    assert_eq!((third.expired, third.more), (1, false), "the run ends");
    assert_eq!(queued(&store, &target), ["early"]);

    let next_run = sweep(&store, due, 0, 1);
    assert_eq!((next_run.expired, next_run.more), (1, false));
    assert!(queued(&store, &target).is_empty());
    check_invariants(&store);
}

#[test]
fn a_dedup_prune_run_resumes_after_its_last_pruned_row() {
    let (_dir, clock, store, sender, target) = fixture();
    let mut seqs = Vec::new();
    for id in ["a", "b", "c", "early"] {
        seqs.push(insert(&store, sender, id, target));
    }
    // Acked at T0 + 1, 2, 3 ms: their prune rows in that order.
    for (i, seq) in seqs[..3].iter().enumerate() {
        clock.set(T0 + 1 + i as u64);
        store.ack(&target, *seq).wait().unwrap();
    }
    let horizon = T0 + 10;
    let first = sweep(&store, T0 + 10, horizon, 1);
    assert_eq!((first.dedup_pruned, first.more), (1, true));
    // Acked mid-run with the clock moved back: its prune row sorts before the run's position.
    clock.set(T0);
    store.ack(&target, seqs[3]).wait().unwrap();
    let gone = |id: &str| store.dedup(&sender, id, &target).unwrap().is_none();

    let second = sweep(&store, T0 + 10, horizon, 1);
    assert_eq!(second.dedup_pruned, 1);
    assert!(
        gone("a") && gone("b") && !gone("early"),
        "resumed after `a`"
    );
    let third = sweep(&store, T0 + 10, horizon, 1);
    assert_eq!((third.dedup_pruned, third.more), (1, false), "the run ends");
    assert!(gone("c") && !gone("early"));

    let next_run = sweep(&store, T0 + 10, horizon, 1);
    assert_eq!(next_run.dedup_pruned, 1);
    assert!(gone("early"));
    check_invariants(&store);
}
