//! Dedup (duplicate vs conflict) and seq allocation (monotonic, clock floor, never reused).

mod common;

use common::*;
use relay_keyspace::*;

#[test]
fn duplicate_reports_original_seq_and_time() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(10_000);
    let store = open_with(dir.path(), clock.clone());
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    let first = insert(&store, s, "X", &[(t, b"wire")]);
    clock.advance(500);
    let again = insert(&store, s, "X", &[(t, b"wire")]);
    assert_eq!(
        first,
        InsertOutcome::Stored {
            at_ms: 10_000,
            targets: vec![TargetSeq {
                seq: 10_000,
                duplicate: false
            }]
        }
    );
    assert_eq!(
        again,
        InsertOutcome::Stored {
            at_ms: 10_000,
            targets: vec![TargetSeq {
                seq: 10_000,
                duplicate: true
            }]
        }
    );
    assert_eq!(store.pull(&t, 0, 10, u64::MAX).unwrap().items.len(), 1);
    let row = store.dedup(&s, "X", &t).unwrap().unwrap();
    assert_eq!(
        (row.seq, row.accepted_at_ms, row.wire_hash),
        (10_000, 10_000, hash(b"wire"))
    );
    // Another sender may use the same item id: separate dedup key.
    let other = stored_seqs(&insert(&store, key(3), "X", &[(t, b"other")]));
    assert!(!other[0].duplicate);
    check_invariants(&store);
}

#[test]
fn conflict_stores_nothing_even_for_other_targets() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    let (s, t1, t2) = (key(1), key(2), key(3));
    enrol(&store, t1, "a");
    enrol(&store, t2, "b");
    insert(&store, s, "X", &[(t2, b"v1")]);
    let out = insert(&store, s, "X", &[(t1, b"v2"), (t2, b"v2")]);
    assert_eq!(out, InsertOutcome::Conflict { target: t2 });
    assert!(
        store.pull(&t1, 0, 10, u64::MAX).unwrap().items.is_empty(),
        "partial fan-out stored"
    );
    assert_eq!(
        store.cursor(&t1).unwrap().head_seq,
        0,
        "a seq was allocated for a rejected item"
    );
    assert!(store.dedup(&s, "X", &t1).unwrap().is_none());
    // A mixed item: one target duplicate, one new -> at_ms is now.
    let out = insert(&store, s, "X", &[(t1, b"v1"), (t2, b"v1")]);
    match out {
        InsertOutcome::Stored { targets, .. } => {
            assert!(!targets[0].duplicate);
            assert!(targets[1].duplicate);
        }
        other => panic!("{other:?}"),
    }
    check_invariants(&store);
}

#[test]
fn concurrent_same_key_inserts_accept_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    let pendings: Vec<_> = (0..50)
        .map(|_| store.insert(req(item(s, "same", &[(t, b"w")]), big_quotas())))
        .collect();
    let outs: Vec<_> = pendings.into_iter().map(|p| p.wait().unwrap()).collect();
    let new = outs
        .iter()
        .filter(|o| stored_seqs(o).iter().any(|t| !t.duplicate))
        .count();
    assert_eq!(new, 1, "exactly one insert may be new");
    let seqs: std::collections::BTreeSet<u64> =
        outs.iter().map(|o| stored_seqs(o)[0].seq).collect();
    assert_eq!(seqs.len(), 1);
}

#[test]
fn seqs_monotonic_floored_and_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(100);
    let store = open_with(dir.path(), clock.clone());
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    let mut handed = Vec::new();
    for i in 0..5 {
        handed.push(stored_seqs(&insert(&store, s, &format!("a{i}"), &[(t, b"x")]))[0].seq);
    }
    assert_eq!(
        handed,
        vec![100, 101, 102, 103, 104],
        "same-ms inserts count up from the clock"
    );
    clock.set(1_000);
    handed.push(stored_seqs(&insert(&store, s, "b", &[(t, b"x")]))[0].seq);
    assert_eq!(*handed.last().unwrap(), 1_000, "floored at the clock");
    // Clock going backwards never lowers seqs.
    clock.set(50);
    handed.push(stored_seqs(&insert(&store, s, "c", &[(t, b"x")]))[0].seq);
    assert_eq!(*handed.last().unwrap(), 1_001);
    // Ack everything, delete: the head stays.
    store.ack(&t, 1_001).wait().unwrap();
    let n = stored_seqs(&insert(&store, s, "d", &[(t, b"x")]))[0].seq;
    assert_eq!(n, 1_002);
    assert!(store.delete_item(&t, n).wait().unwrap());
    assert!(!store.delete_item(&t, n).wait().unwrap());
    handed.push(n);
    store.close().unwrap();
    let store = open_with(dir.path(), clock.clone());
    let n = stored_seqs(&insert(&store, s, "e", &[(t, b"x")]))[0].seq;
    assert!(
        handed.iter().all(|h| *h < n),
        "seq {n} reused after reopen: {handed:?}"
    );
    assert!(handed.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(
        store.cursor(&t).unwrap(),
        Cursor {
            head_seq: n,
            acked_through: 1_001
        }
    );
    check_invariants(&store);
}

#[test]
fn target_must_be_live_enrolled() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    let (s, t, u) = (key(1), key(2), key(3));
    enrol(&store, t, "t");
    assert_eq!(
        insert(&store, s, "X", &[(t, b"a"), (u, b"a")]),
        InsertOutcome::TargetNotEnrolled { target: u }
    );
    assert!(store.pull(&t, 0, 10, u64::MAX).unwrap().items.is_empty());
    check_invariants(&store);
}
