//! Ack after pull: the pull leaves hints (sender, account, size, expiry) so that the ack does
//! not read the items' records back. Whatever happens to the items between the pull and the
//! ack (deleted, expired, moved by a rotation, pulled twice, acked in parts), the usage
//! counters must still equal a full recount.

use crate::common;

use common::*;
use relay_keyspace::*;

const DAY_MS: u64 = 24 * 3600 * 1000;

fn pull_all(store: &Store, target: &Key32) -> Vec<u64> {
    let page = store.pull(target, 0, 500, u64::MAX).expect("pull");
    page.items.iter().map(|i| i.seq).collect()
}

fn acked(out: AckOutcome) -> u64 {
    match out {
        AckOutcome::Acked { deleted, .. } => deleted,
        other => panic!("expected Acked, got {other:?}"),
    }
}

fn setup(dir: &std::path::Path) -> (Store, std::sync::Arc<TestClock>) {
    let clock = TestClock::new(1_000_000);
    let store = open_with(dir, clock.clone());
    store
        .enrol(enrol_req(key(1), "target", Some("acct"), 2))
        .wait()
        .unwrap();
    store
        .enrol(enrol_req(key(2), "target-new", Some("acct"), 2))
        .wait()
        .unwrap();
    enrol(&store, key(10), "sender-a");
    enrol(&store, key(11), "sender-b");
    (store, clock)
}

/// Items deleted by `delete_item` or expired by a sweep after their pull are not counted
/// again by the ack; the others are.
#[test]
fn items_gone_since_their_pull_are_not_counted_by_the_ack() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = setup(dir.path());
    let t = key(1);
    let mut seqs = Vec::new();
    for (i, sender) in [key(10), key(11), key(10), key(11)].into_iter().enumerate() {
        let wire = vec![b'a' + i as u8; 100 + i * 10];
        let mut r = req(
            item(sender, &format!("item-{i}"), &[(t, &wire)]),
            big_quotas(),
        );
        // The third item expires after a day, the others after a week.
        r.retention_ms = if i == 2 { DAY_MS } else { 7 * DAY_MS };
        seqs.extend(
            stored_seqs(&store.insert(r).wait().unwrap())
                .iter()
                .map(|s| s.seq),
        );
        clock.advance(1);
    }
    assert_eq!(pull_all(&store, &t), seqs);

    assert!(store.delete_item(&t, seqs[1]).wait().unwrap());
    clock.advance(2 * DAY_MS);
    let now = clock.now_ms();
    let swept = store
        .sweep(now, 0, big_quotas(), 1_000, 100, Box::new(|_, _| None))
        .wait()
        .unwrap();
    assert_eq!(swept.expired, 1, "{swept:?}");
    assert_eq!(check_invariants(&store), 2);

    let head = store.cursor(&t).unwrap().head_seq;
    assert_eq!(acked(store.ack(&t, head).wait().unwrap()), 2);
    assert_eq!(check_invariants(&store), 0);
    assert_eq!(store.usage_target(&t).unwrap(), Usage::default());
    assert_eq!(store.usage_account("acct").unwrap(), Usage::default());
}

/// A page pulled twice, acked in two parts, with items queued after the pull (no hints for
/// them): every ack counts each item once.
#[test]
fn acks_in_parts_over_pulled_and_unpulled_items() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = setup(dir.path());
    let t = key(1);
    let mut seqs = Vec::new();
    let add = |n: usize, seqs: &mut Vec<u64>| {
        for i in 0..n {
            let id = format!("item-{}", seqs.len());
            let wire = vec![b'x'; 50 + i];
            let out = insert(&store, key(10 + (i as u64 % 2)), &id, &[(t, &wire)]);
            seqs.extend(stored_seqs(&out).iter().map(|s| s.seq));
            clock.advance(1);
        }
    };
    add(6, &mut seqs);
    assert_eq!(pull_all(&store, &t), seqs);
    assert_eq!(pull_all(&store, &t), seqs);
    add(3, &mut seqs);

    assert_eq!(acked(store.ack(&t, seqs[2]).wait().unwrap()), 3);
    assert_eq!(check_invariants(&store), 6);
    // Through the last pulled item and the three queued after the pull.
    assert_eq!(acked(store.ack(&t, seqs[8]).wait().unwrap()), 6);
    assert_eq!(check_invariants(&store), 0);
    assert_eq!(store.usage_target(&t).unwrap(), Usage::default());
}

/// A rotation after the pull moves the items to the new key under new seqs: an ack of the old
/// key finds nothing, and the new key's items (never pulled) are counted from their records.
#[test]
fn a_rotation_between_pull_and_ack() {
    let dir = tempfile::tempdir().unwrap();
    let (store, clock) = setup(dir.path());
    let (old, new) = (key(1), key(2));
    for i in 0..4u8 {
        insert(&store, key(10), &format!("item-{i}"), &[(old, &[i; 80])]);
        clock.advance(1);
    }
    let pulled = pull_all(&store, &old);
    assert_eq!(pulled.len(), 4);
    store.rebind(old, new).wait().unwrap();
    assert_eq!(check_invariants(&store), 4);

    let through = *pulled.last().unwrap();
    let head = store.cursor(&old).unwrap().head_seq;
    // The old key's head seq stays, so this is an ack, of nothing.
    assert!(through <= head);
    assert_eq!(acked(store.ack(&old, through).wait().unwrap()), 0);
    assert_eq!(check_invariants(&store), 4);

    let head = store.cursor(&new).unwrap().head_seq;
    assert_eq!(acked(store.ack(&new, head).wait().unwrap()), 4);
    assert_eq!(check_invariants(&store), 0);
    assert_eq!(store.usage_account("acct").unwrap(), Usage::default());
}
