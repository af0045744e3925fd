//! Items stored with `NEVER_EXPIRES` (legacy v1 mail, docs/protocol.md §3 "Legacy v1 mail"): no sweep
//! expires them and none sends a notice for them, while quotas still count them and an ack still
//! removes them; items with a retention expire beside them as before.

mod common;

use common::*;
use relay_keyspace::*;

fn insert_with(store: &Store, sender: Key32, id: &str, target: Key32, retention_ms: u64) {
    let out = store
        .insert(InsertRequest {
            item: item(sender, id, &[(target, id.as_bytes())]),
            quotas: big_quotas(),
            retention_ms,
        })
        .wait()
        .unwrap();
    stored_seqs(&out);
}

#[test]
fn never_expiring_items_outlive_every_sweep_and_send_no_notice() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    let (relay, sender, target) = (key(1), key(2), key(3));
    enrol(&store, sender, "s");
    enrol(&store, target, "t");
    insert_with(&store, sender, "v1", target, NEVER_EXPIRES);
    insert_with(&store, sender, "v2", target, 1_000);
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
    check_invariants(&store);
}

#[test]
fn never_expiring_items_count_against_quotas_and_leave_on_ack() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    let (sender, target) = (key(2), key(3));
    enrol(&store, sender, "s");
    enrol(&store, target, "t");
    let one = Quotas {
        max_queue_items: 1,
        ..big_quotas()
    };
    let req = |id: &str| InsertRequest {
        item: item(sender, id, &[(target, id.as_bytes())]),
        quotas: one,
        retention_ms: NEVER_EXPIRES,
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
    check_invariants(&store);
}
