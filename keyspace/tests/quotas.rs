//! Quotas: inclusive caps per target, per sender x target and per proven account.

mod common;

use common::*;
use relay_keyspace::*;

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

fn put(store: &Store, s: Key32, id: &str, t: Key32, wire: &[u8], quotas: Quotas) -> InsertOutcome {
    store
        .insert(req(item(s, id, &[(t, wire)]), quotas))
        .wait()
        .unwrap()
}

#[test]
fn queue_caps_are_inclusive() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    let quotas = q(2, 10);
    assert!(matches!(
        put(&store, s, "a", t, &[0; 5], quotas),
        InsertOutcome::Stored { .. }
    ));
    assert!(
        matches!(
            put(&store, s, "b", t, &[0; 5], quotas),
            InsertOutcome::Stored { .. }
        ),
        "exactly at the cap"
    );
    assert_eq!(
        put(&store, s, "c", t, &[0; 1], quotas),
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
        put(&store, s, "d", t, &[0; 10], quotas),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        put(&store, s, "e", t, &[0; 1], q(10, 10)),
        InsertOutcome::Quota {
            target: t,
            which: QuotaKind::QueueBytes
        }
    );
    // A duplicate of a stored item is not charged again.
    assert!(matches!(
        put(&store, s, "d", t, &[0; 10], quotas),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        store.usage_target(&t).unwrap(),
        Usage {
            items: 1,
            bytes: 10
        }
    );
    check_invariants(&store);
}

#[test]
fn sender_share_and_account_caps() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    let (s1, s2, t1, t2, t3) = (key(1), key(2), key(3), key(4), key(5));
    store
        .enrol(enrol_req(t1, "h1", Some("acct"), 2))
        .wait()
        .unwrap();
    store
        .enrol(enrol_req(t2, "h2", Some("acct"), 2))
        .wait()
        .unwrap();
    enrol(&store, t3, "h3"); // no proven account: never charged to one
    let quotas = Quotas {
        max_queue_items: 100,
        max_queue_bytes: 1000,
        max_sender_items: 1,
        max_sender_bytes: 1000,
        max_account_items: 2,
        max_account_bytes: 1000,
    };
    assert!(matches!(
        put(&store, s1, "a", t1, b"x", quotas),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        put(&store, s1, "b", t1, b"x", quotas),
        InsertOutcome::Quota {
            target: t1,
            which: QuotaKind::SenderItems
        }
    );
    assert!(matches!(
        put(&store, s2, "b", t1, b"x", quotas),
        InsertOutcome::Stored { .. }
    ));
    // The account (t1 + t2) holds 2: t2 is refused although its own queue is empty.
    assert_eq!(
        put(&store, s1, "c", t2, b"x", quotas),
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
        put(&store, s1, "c", t3, b"x", quotas),
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
        put(&store, s2, "o", t2, b"yy", bytes),
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
    check_invariants(&store);
}
