//! Mail rules: insert, pull, ack, dedup (duplicate vs conflict), per-item atomic fan-out, seqs,
//! quotas, the push batch, the sweep with its notices, items that never expire.

use super::support::*;
use super::Backend;
use crate::*;

pub fn insert_pull_ack_roundtrip(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (s, t) = (key(1), key(2));
    enrol(store, t, "target");
    let a = stored_seqs(&insert(store, s, "A", &[(t, b"one")]));
    let b = stored_seqs(&insert(store, s, "B", &[(t, b"two")]));
    assert_eq!(a[0].seq, 1_000);
    assert_eq!(b[0].seq, 1_001);
    let page = store.pull(&t, 0, 10, 1 << 20).unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[0].wire, b"one");
    assert_eq!(page.items[1].item_id, "B");
    assert_eq!(page.head_seq, 1_001);
    assert!(!page.more);
    let page = store.pull(&t, 0, 1, 1 << 20).unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(page.more);
    assert_eq!(
        store.ack(&t, 1_002).wait().unwrap(),
        AckOutcome::BeyondHead { head_seq: 1_001 }
    );
    assert_eq!(
        store.ack(&t, 1_000).wait().unwrap(),
        AckOutcome::Acked {
            acked_through: 1_000,
            deleted: 1,
            head_seq: 1_001
        }
    );
    assert_eq!(
        store.cursor(&t).unwrap(),
        Cursor {
            head_seq: 1_001,
            acked_through: 1_000
        }
    );
    let page = store.pull(&t, 0, 10, 1 << 20).unwrap();
    assert_eq!(
        page.items.iter().map(|i| i.seq).collect::<Vec<_>>(),
        vec![1_001]
    );
    assert_eq!(
        store.usage_target(&t).unwrap(),
        Usage { items: 1, bytes: 3 }
    );
    backend.check_invariants(store);
    store.close().unwrap();
}

pub fn a_pull_page_always_holds_one_item_whatever_its_byte_budget(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(5));
    let store = &*store;
    let (s, t) = (key(1), key(2));
    enrol(store, t, "t");
    insert(store, s, "A", &[(t, &[7u8; 100])]);
    insert(store, s, "B", &[(t, &[7u8; 100])]);
    let page = store.pull(&t, 0, 10, 10).unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(page.more);
    let page = store.pull(&t, 0, 10, 200).unwrap();
    assert_eq!(page.items.len(), 2);
}

pub fn a_duplicate_answers_the_original_seq_and_time(backend: &dyn Backend) {
    let clock = TestClock::new(10_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (s, t) = (key(1), key(2));
    enrol(store, t, "t");
    let first = insert(store, s, "X", &[(t, b"wire")]);
    clock.advance(500);
    let again = insert(store, s, "X", &[(t, b"wire")]);
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
    let other = stored_seqs(&insert(store, key(3), "X", &[(t, b"other")]));
    assert!(!other[0].duplicate);
    backend.check_invariants(store);
}

pub fn a_conflict_stores_nothing_even_for_other_targets(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let (s, t1, t2) = (key(1), key(2), key(3));
    enrol(store, t1, "a");
    enrol(store, t2, "b");
    insert(store, s, "X", &[(t2, b"v1")]);
    let out = insert(store, s, "X", &[(t1, b"v2"), (t2, b"v2")]);
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
    let out = insert(store, s, "X", &[(t1, b"v1"), (t2, b"v1")]);
    match out {
        InsertOutcome::Stored { targets, .. } => {
            assert!(!targets[0].duplicate);
            assert!(targets[1].duplicate);
        }
        other => panic!("{other:?}"),
    }
    backend.check_invariants(store);
}

pub fn concurrent_inserts_of_one_item_accept_it_once(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let (s, t) = (key(1), key(2));
    enrol(store, t, "t");
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

pub fn seqs_are_floored_at_the_clock_and_never_reused_across_restarts_and_epochs(
    backend: &dyn Backend,
) {
    let clock = TestClock::new(100);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (s, t) = (key(1), key(2));
    enrol(store, t, "t");
    let mut handed = Vec::new();
    for i in 0..5 {
        handed.push(stored_seqs(&insert(store, s, &format!("a{i}"), &[(t, b"x")]))[0].seq);
    }
    assert_eq!(
        handed,
        vec![100, 101, 102, 103, 104],
        "same-ms inserts count up from the clock"
    );
    clock.set(1_000);
    handed.push(stored_seqs(&insert(store, s, "b", &[(t, b"x")]))[0].seq);
    assert_eq!(*handed.last().unwrap(), 1_000, "floored at the clock");
    // Clock going backwards never lowers seqs.
    clock.set(50);
    handed.push(stored_seqs(&insert(store, s, "c", &[(t, b"x")]))[0].seq);
    assert_eq!(*handed.last().unwrap(), 1_001);
    // Ack everything, delete: the head stays.
    store.ack(&t, 1_001).wait().unwrap();
    let n = stored_seqs(&insert(store, s, "d", &[(t, b"x")]))[0].seq;
    assert_eq!(n, 1_002);
    assert!(store.delete_item(&t, n).wait().unwrap());
    assert!(!store.delete_item(&t, n).wait().unwrap());
    handed.push(n);
    // An epoch change (a restore, a stale heartbeat) does not restart seqs either.
    store.rotate_epoch("conformance").wait().unwrap();
    let n = stored_seqs(&insert(store, s, "after-epoch", &[(t, b"x")]))[0].seq;
    assert_eq!(n, 1_003, "the epoch rotated, the seq counted on");
    handed.push(n);
    store.close().unwrap();
    let store = backend.open(clock.clone());
    let store = &*store;
    let n = stored_seqs(&insert(store, s, "e", &[(t, b"x")]))[0].seq;
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
    backend.check_invariants(store);
}

pub fn a_target_must_be_live_enrolled_at_commit_time(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let (s, t, u) = (key(1), key(2), key(3));
    enrol(store, t, "t");
    assert_eq!(
        insert(store, s, "X", &[(t, b"a"), (u, b"a")]),
        InsertOutcome::TargetNotEnrolled { target: u }
    );
    assert!(store.pull(&t, 0, 10, u64::MAX).unwrap().items.is_empty());
    backend.check_invariants(store);
}

fn q(items: u64, bytes: u64) -> Quotas {
    Quotas {
        max_queue_items: items,
        max_queue_bytes: bytes,
        max_sender_items: u64::MAX,
        max_sender_bytes: u64::MAX,
        max_account_items: u64::MAX,
        max_account_bytes: u64::MAX,
    }
}

fn put(
    store: &dyn RelayStore,
    s: Key32,
    id: &str,
    t: Key32,
    wire: &[u8],
    quotas: Quotas,
) -> InsertOutcome {
    store
        .insert(req(item(s, id, &[(t, wire)]), quotas))
        .wait()
        .unwrap()
}

pub fn queue_caps_are_inclusive_and_duplicates_are_not_charged(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let (s, t) = (key(1), key(2));
    enrol(store, t, "t");
    let quotas = q(2, 10);
    assert!(matches!(
        put(store, s, "a", t, &[0; 5], quotas),
        InsertOutcome::Stored { .. }
    ));
    assert!(
        matches!(
            put(store, s, "b", t, &[0; 5], quotas),
            InsertOutcome::Stored { .. }
        ),
        "exactly at the cap"
    );
    assert_eq!(
        put(store, s, "c", t, &[0; 1], quotas),
        InsertOutcome::Quota {
            target: t,
            which: QuotaKind::QueueItems
        }
    );
    store
        .ack(&t, store.cursor(&t).unwrap().head_seq)
        .wait()
        .unwrap();
    assert!(matches!(
        put(store, s, "d", t, &[0; 10], quotas),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        put(store, s, "e", t, &[0; 1], q(10, 10)),
        InsertOutcome::Quota {
            target: t,
            which: QuotaKind::QueueBytes
        }
    );
    // A duplicate of a stored item is not charged again.
    assert!(matches!(
        put(store, s, "d", t, &[0; 10], quotas),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        store.usage_target(&t).unwrap(),
        Usage {
            items: 1,
            bytes: 10
        }
    );
    backend.check_invariants(store);
}

pub fn sender_share_and_account_caps_hold_over_every_target(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let (s1, s2, t1, t2, t3) = (key(1), key(2), key(3), key(4), key(5));
    store
        .enrol(enrol_req(t1, "h1", Some("acct"), 2))
        .wait()
        .unwrap();
    store
        .enrol(enrol_req(t2, "h2", Some("acct"), 2))
        .wait()
        .unwrap();
    enrol(store, t3, "h3"); // no proven account: never charged to one
    let quotas = Quotas {
        max_queue_items: 100,
        max_queue_bytes: 1000,
        max_sender_items: 1,
        max_sender_bytes: 1000,
        max_account_items: 2,
        max_account_bytes: 1000,
    };
    assert!(matches!(
        put(store, s1, "a", t1, b"x", quotas),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        put(store, s1, "b", t1, b"x", quotas),
        InsertOutcome::Quota {
            target: t1,
            which: QuotaKind::SenderItems
        }
    );
    assert!(matches!(
        put(store, s2, "b", t1, b"x", quotas),
        InsertOutcome::Stored { .. }
    ));
    // The account (t1 + t2) holds 2: t2 is refused although its own queue is empty.
    assert_eq!(
        put(store, s1, "c", t2, b"x", quotas),
        InsertOutcome::Quota {
            target: t2,
            which: QuotaKind::AccountItems
        }
    );
    assert_eq!(
        store.usage_account("acct").unwrap(),
        Usage { items: 2, bytes: 2 }
    );
    assert!(matches!(
        put(store, s1, "c", t3, b"x", quotas),
        InsertOutcome::Stored { .. }
    ));
    // A multi-target item counts each new target against the shared account, all or nothing.
    store
        .ack(&t1, store.cursor(&t1).unwrap().head_seq)
        .wait()
        .unwrap();
    let multi = store
        .insert(req(
            item(key(6), "m", &[(t1, b"x"), (t2, b"x"), (t3, b"x")]),
            quotas,
        ))
        .wait()
        .unwrap();
    assert!(matches!(multi, InsertOutcome::Stored { .. }), "{multi:?}");
    let again = store
        .insert(req(item(s2, "n", &[(t1, b"y"), (t2, b"y")]), quotas))
        .wait()
        .unwrap();
    assert_eq!(
        again,
        InsertOutcome::Quota {
            target: t1,
            which: QuotaKind::AccountItems
        }
    );
    let bytes = Quotas {
        max_sender_items: 100,
        max_account_items: 100,
        max_account_bytes: 3,
        ..quotas
    };
    assert_eq!(
        put(store, s2, "o", t2, b"yy", bytes),
        InsertOutcome::Quota {
            target: t2,
            which: QuotaKind::AccountBytes
        }
    );
    assert_eq!(
        store.usage_sender(&key(6), &t1).unwrap(),
        Usage { items: 1, bytes: 1 }
    );
    assert_eq!(store.usage_sender(&s1, &t1).unwrap(), Usage::default());
    backend.check_invariants(store);
}

pub fn the_sweep_expires_notifies_and_prunes(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (relay, sender, gone, t) = (key(100), key(1), key(2), key(3));
    enrol(store, sender, "sender");
    enrol(store, gone, "gone");
    enrol(store, t, "target");
    let ret = |id: &str, s: Key32, ms: u64| InsertRequest {
        item: item(s, id, &[(t, b"x")]),
        quotas: big_quotas(),
        retention_ms: ms,
        require_live_sender: false,
    };
    store.insert(ret("a", sender, 100)).wait().unwrap(); // expires 1100
    store.insert(ret("b", sender, 100)).wait().unwrap();
    store.insert(ret("c", gone, 100)).wait().unwrap();
    store.insert(ret("keep", sender, 1_000_000)).wait().unwrap();
    let mut receipt = item(sender, "r", &[(t, b"x")]);
    receipt.kind = ItemKind::Receipt;
    store
        .insert(InsertRequest {
            item: receipt,
            quotas: big_quotas(),
            retention_ms: 100,
            require_live_sender: false,
        })
        .wait()
        .unwrap();
    store.rebind(gone, key(9)).wait().unwrap(); // the sender of "c" is no longer enrolled
    clock.set(2_000);
    let r = store
        .sweep(2_000, 0, big_quotas(), 10_000, 2, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.notices, r.more), (2, 2, true), "{r:?}");
    let r = store
        .sweep(2_000, 0, big_quotas(), 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.notices, r.more), (2, 0, false), "{r:?}");
    let left: Vec<_> = store
        .pull(&t, 0, 100, u64::MAX)
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.item_id)
        .collect();
    assert_eq!(left, vec!["keep"]);
    let notices = store.pull(&sender, 0, 100, u64::MAX).unwrap().items;
    assert_eq!(notices.len(), 2);
    assert!(notices
        .iter()
        .all(|n| n.kind == ItemKind::Expired && n.sender == relay));
    assert!(
        store
            .pull(&key(9), 0, 100, u64::MAX)
            .unwrap()
            .items
            .is_empty(),
        "notice went to a rotated-away key"
    );
    // Dedup rows outlive the items until the horizon: a late retry is a duplicate, not a re-delivery.
    assert!(stored_seqs(&store.insert(ret("a", sender, 100)).wait().unwrap())[0].duplicate);
    assert_eq!(store.pull(&t, 0, 100, u64::MAX).unwrap().items.len(), 1);
    // Already told: sweeping an item with the same notice id gives no second notice.
    // Prune past the horizon, which counts from the expiry (2,000): rows of expired items go,
    // the queued item's row stays.
    let r = store
        .sweep(2_000, 2_000, big_quotas(), 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!(
        r.dedup_pruned, 0,
        "not before the horizon after expiry {r:?}"
    );
    let r = store
        .sweep(2_000, 2_001, big_quotas(), 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!(r.dedup_pruned, 4, "{r:?}");
    assert!(store.dedup(&sender, "a", &t).unwrap().is_none());
    assert!(
        store.dedup(&sender, "keep", &t).unwrap().is_some(),
        "row of a queued item pruned"
    );
    // Expiring mail is mail: the relay log does not record sweeps.
    assert!(store.ops(100).unwrap().iter().all(|e| e.kind != "sweep"));
    backend.check_invariants(store);
}

pub fn the_sweep_sends_no_notice_past_the_senders_cap_or_twice(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (relay, sender, t) = (key(100), key(1), key(3));
    enrol(store, sender, "sender");
    enrol(store, t, "target");
    let ret = |id: &str| InsertRequest {
        item: item(sender, id, &[(t, b"x")]),
        quotas: big_quotas(),
        retention_ms: 10,
        require_live_sender: false,
    };
    store.insert(ret("a")).wait().unwrap();
    store.insert(ret("b")).wait().unwrap();
    clock.set(5_000);
    let full = Quotas {
        max_queue_items: 1,
        ..big_quotas()
    };
    let r = store
        .sweep(5_000, 0, full, 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!(
        (r.expired, r.notices),
        (2, 1),
        "second notice exceeds the sender's queue cap"
    );
    // Item "a" to another target gets the same notice id (the test notice names target[0]):
    // the sender was already told, so no second notice.
    let t2 = key(4);
    enrol(store, t2, "t2");
    store
        .insert(InsertRequest {
            item: item(sender, "a", &[(t2, b"x")]),
            quotas: big_quotas(),
            retention_ms: 10,
            require_live_sender: false,
        })
        .wait()
        .unwrap();
    clock.set(9_000);
    let r = store
        .sweep(9_000, 0, big_quotas(), 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.notices), (1, 0), "{r:?}");
    assert_eq!(
        store.pull(&sender, 0, 100, u64::MAX).unwrap().items.len(),
        1
    );
    backend.check_invariants(store);
}

/// An item leaving its queue (expired by the sweep, deleted by its host) gives back exactly what
/// it was charged: its queue's usage, its sender's share and its target's account; an emptied
/// share reads as none. Three items of one queue and account, two of one sender, expire in one
/// sweep call.
pub fn an_item_leaving_its_queue_gives_back_its_usage(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (relay, s1, s2, t1, t2) = (key(1), key(2), key(3), key(4), key(5));
    enrol(store, s1, "s1");
    enrol(store, s2, "s2");
    for (t, name) in [(t1, "t1"), (t2, "t2")] {
        store
            .enrol(enrol_req(t, name, Some("acct"), 2))
            .wait()
            .unwrap();
    }
    // Each wire is its id's bytes: 3, 4, 2, 1 and 5.
    insert_with(store, s1, "due", t1, 100); // expires at 1,100
    insert_with(store, s1, "kept", t1, 1_000_000);
    insert_with(store, s1, "d2", t1, 100); // expires at 1,100
    insert_with(store, s2, "x", t1, 100); // expires at 1,100
    insert_with(store, s1, "other", t2, 1_000_000);
    let usage = |items, bytes| Usage { items, bytes };
    assert_eq!(store.usage_target(&t1).unwrap(), usage(4, 10));
    assert_eq!(store.usage_sender(&s1, &t1).unwrap(), usage(3, 9));
    assert_eq!(store.usage_account("acct").unwrap(), usage(5, 15));

    clock.set(2_000);
    let r = store
        .sweep(2_000, 0, big_quotas(), 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.notices, r.more), (3, 3, false), "{r:?}");
    assert_eq!(store.usage_target(&t1).unwrap(), usage(1, 4));
    assert_eq!(store.usage_sender(&s1, &t1).unwrap(), usage(1, 4));
    assert_eq!(store.usage_sender(&s2, &t1).unwrap(), Usage::default());
    assert_eq!(store.usage_account("acct").unwrap(), usage(2, 9));

    let kept = store.pull(&t1, 0, 10, u64::MAX).unwrap().items;
    assert_eq!(kept.len(), 1);
    assert!(store.delete_item(&t1, kept[0].seq).wait().unwrap());
    assert!(
        !store.delete_item(&t1, kept[0].seq).wait().unwrap(),
        "gone already"
    );
    assert_eq!(store.usage_target(&t1).unwrap(), Usage::default());
    assert_eq!(store.usage_sender(&s1, &t1).unwrap(), Usage::default());
    assert_eq!(store.usage_account("acct").unwrap(), usage(1, 5));
    backend.check_invariants(store);
}

/// A sweep tells each sender in the order the items leave, one at a time: a notice's quota
/// checks see the items before it gone and the ones after it still queued, however many leave
/// in one call. Host a's item for b and b's item for a expire together; a's queue is first in
/// key order, so b's notice finds b's queue still full (refused) and a's finds a's emptied.
pub fn a_notice_sees_the_items_before_it_leave_and_not_the_ones_after(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (relay, a, b) = (key(1), key(2), key(3));
    enrol(store, a, "a");
    enrol(store, b, "b");
    insert_with(store, b, "for-a", a, 100);
    insert_with(store, a, "for-b", b, 100);
    clock.set(2_000);
    let one_item_queues = Quotas {
        max_queue_items: 1,
        ..big_quotas()
    };
    let r = store
        .sweep(2_000, 0, one_item_queues, 10_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.notices, r.more), (2, 1, false), "{r:?}");
    let told_a = store.pull(&a, 0, 10, u64::MAX).unwrap().items;
    assert_eq!(told_a.len(), 1);
    assert_eq!(
        (told_a[0].kind, told_a[0].sender),
        (ItemKind::Expired, relay)
    );
    assert!(store.pull(&b, 0, 10, u64::MAX).unwrap().items.is_empty());
    backend.check_invariants(store);
}

fn insert_with(store: &dyn RelayStore, sender: Key32, id: &str, target: Key32, retention_ms: u64) {
    let out = store
        .insert(InsertRequest {
            item: item(sender, id, &[(target, id.as_bytes())]),
            quotas: big_quotas(),
            retention_ms,
            require_live_sender: false,
        })
        .wait()
        .unwrap();
    stored_seqs(&out);
}

pub fn never_expiring_items_outlive_every_sweep_and_send_no_notice(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (relay, sender, target) = (key(1), key(2), key(3));
    enrol(store, sender, "s");
    enrol(store, target, "t");
    insert_with(store, sender, "v1", target, NEVER_EXPIRES);
    insert_with(store, sender, "v2", target, 1_000);
    let page = store.pull(&target, 0, 10, u64::MAX).unwrap();
    let exp: Vec<_> = page
        .items
        .iter()
        .map(|i| (i.item_id.as_str(), i.expires_at_ms))
        .collect();
    assert_eq!(exp, vec![("v1", NEVER_EXPIRES), ("v2", 2_000)]);

    // Far in the future: the item with a retention goes (with its notice), the other stays.
    let far = NEVER_EXPIRES - 1;
    clock.set(far);
    let r = store
        .sweep(far, 0, big_quotas(), 1_000, 100, notice_fn(relay))
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.notices, r.more), (1, 1, false), "{r:?}");
    let left: Vec<_> = store
        .pull(&target, 0, 10, u64::MAX)
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.item_id)
        .collect();
    assert_eq!(left, vec!["v1"]);
    let told: Vec<_> = store
        .pull(&sender, 0, 10, u64::MAX)
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.item_id)
        .collect();
    assert_eq!(
        told,
        vec![format!("expired:v2:{}", target[0])],
        "no notice for the v1 item"
    );
    backend.check_invariants(store);
}

pub fn never_expiring_items_count_against_quotas_and_leave_on_ack(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (sender, target) = (key(2), key(3));
    enrol(store, sender, "s");
    enrol(store, target, "t");
    let one = Quotas {
        max_queue_items: 1,
        ..big_quotas()
    };
    let req = |id: &str| InsertRequest {
        item: item(sender, id, &[(target, id.as_bytes())]),
        quotas: one,
        retention_ms: NEVER_EXPIRES,
        require_live_sender: false,
    };
    stored_seqs(&store.insert(req("a")).wait().unwrap());
    assert!(matches!(
        store.insert(req("b")).wait().unwrap(),
        InsertOutcome::Quota {
            which: QuotaKind::QueueItems,
            ..
        }
    ));
    let head = store.cursor(&target).unwrap().head_seq;
    store.ack(&target, head).wait().unwrap();
    assert!(store
        .pull(&target, 0, 10, u64::MAX)
        .unwrap()
        .items
        .is_empty());
    stored_seqs(&store.insert(req("b")).wait().unwrap());
    backend.check_invariants(store);
}

/// `insert_many` (a push batch) answers each item as `insert` would, in order: one refused
/// item (a conflict, a quota) leaves the others of the batch stored.
pub fn a_push_batch_answers_each_item_on_its_own(backend: &dyn Backend) {
    let clock = TestClock::new(5_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (s, t1, t2) = (key(1), key(2), key(3));
    enrol(store, t1, "a");
    enrol(store, t2, "b");
    insert(store, s, "taken", &[(t1, b"first")]);
    let one = Quotas {
        max_queue_items: 2,
        ..big_quotas()
    };
    let outs = store
        .insert_many(vec![
            req(item(s, "new", &[(t1, b"n"), (t2, b"n")]), one),
            req(item(s, "taken", &[(t1, b"other bytes")]), one),
            req(item(s, "taken", &[(t1, b"first")]), one),
            req(item(s, "over", &[(t1, b"o")]), one),
            req(item(s, "to-nobody", &[(key(9), b"x")]), one),
        ])
        .wait()
        .unwrap();
    assert_eq!(outs.len(), 5);
    let new = stored_seqs(&outs[0]);
    assert!(
        new.iter().all(|t| !t.duplicate) && new.len() == 2,
        "{outs:?}"
    );
    assert_eq!(outs[1], InsertOutcome::Conflict { target: t1 });
    assert!(stored_seqs(&outs[2])[0].duplicate);
    assert_eq!(
        outs[3],
        InsertOutcome::Quota {
            target: t1,
            which: QuotaKind::QueueItems
        }
    );
    assert_eq!(outs[4], InsertOutcome::TargetNotEnrolled { target: key(9) });
    let ids: Vec<_> = store
        .pull(&t1, 0, 10, u64::MAX)
        .unwrap()
        .items
        .into_iter()
        .map(|i| i.item_id)
        .collect();
    assert_eq!(ids, vec!["taken", "new"]);
    assert_eq!(store.pull(&t2, 0, 10, u64::MAX).unwrap().items.len(), 1);
    backend.check_invariants(store);
}

/// Inside one push batch each item sees the items before it as committed: the same item again
/// is a duplicate of the earlier one's seq, other bytes a conflict, a sender share or an
/// account filled by earlier items refuses later ones, and an item refused on one target
/// leaves nothing on its other targets (the next item takes the head as if it never ran).
pub fn a_push_batch_sees_its_own_earlier_items(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(5_000));
    let store = &*store;
    let (s, t1, t2) = (key(1), key(2), key(3));
    enrol(store, t1, "plain");
    store
        .enrol(enrol_req(t2, "proven", Some("acct"), 2))
        .wait()
        .unwrap();
    let quotas = Quotas {
        max_sender_items: 2,
        max_account_items: 1,
        ..big_quotas()
    };
    let outs = store
        .insert_many(vec![
            req(item(s, "a", &[(t1, b"a")]), quotas),
            req(item(s, "a", &[(t1, b"a")]), quotas),
            req(item(s, "a", &[(t1, b"other")]), quotas),
            req(item(s, "b", &[(t1, b"b")]), quotas),
            req(item(s, "c", &[(t2, b"c"), (t1, b"c")]), quotas),
            req(item(s, "d", &[(t2, b"d")]), quotas),
            req(item(s, "e", &[(t2, b"e")]), quotas),
        ])
        .wait()
        .unwrap();
    assert_eq!(outs.len(), 7, "{outs:?}");
    let a = stored_seqs(&outs[0]);
    assert_eq!(
        stored_seqs(&outs[1]),
        vec![TargetSeq {
            seq: a[0].seq,
            duplicate: true
        }]
    );
    assert_eq!(outs[2], InsertOutcome::Conflict { target: t1 });
    let b = stored_seqs(&outs[3]);
    assert!(b[0].seq > a[0].seq && !b[0].duplicate, "{outs:?}");
    assert_eq!(
        outs[4],
        InsertOutcome::Quota {
            target: t1,
            which: QuotaKind::SenderItems
        }
    );
    let d = stored_seqs(&outs[5]);
    assert_eq!(
        outs[6],
        InsertOutcome::Quota {
            target: t2,
            which: QuotaKind::AccountItems
        }
    );
    let ids = |t: &Key32| -> Vec<(String, u64)> {
        store
            .pull(t, 0, 10, u64::MAX)
            .unwrap()
            .items
            .into_iter()
            .map(|i| (i.item_id, i.seq))
            .collect()
    };
    assert_eq!(
        ids(&t1),
        vec![("a".into(), a[0].seq), ("b".into(), b[0].seq)]
    );
    assert_eq!(
        ids(&t2),
        vec![("d".into(), d[0].seq)],
        "item c left nothing on t2"
    );
    assert_eq!(store.cursor(&t2).unwrap().head_seq, d[0].seq);
    assert_eq!(store.usage_sender(&s, &t1).unwrap().items, 2);
    assert_eq!(store.usage_account("acct").unwrap().items, 1);
    assert!(store.dedup(&s, "c", &t2).unwrap().is_none());
    backend.check_invariants(store);
}
