//! Key rotation (rebind) and the retention sweep with expiry notices and dedup pruning.

mod common;

use common::*;
use relay_keyspace::*;

#[test]
fn rebind_moves_queue_after_new_keys_items() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    let (s, old, new, other) = (key(1), key(2), key(3), key(4));
    store
        .enrol(enrol_req(old, "host", Some("acct"), 2))
        .wait()
        .unwrap();
    enrol(&store, new, "host-new");
    enrol(&store, other, "other");
    for i in 0..4 {
        insert(
            &store,
            s,
            &format!("o{i}"),
            &[(old, format!("w{i}").as_bytes())],
        );
    }
    store.ack(&old, 1_000).wait().unwrap(); // o0 acked: not moved
    insert(&store, s, "n0", &[(new, b"mine")]);
    insert(&store, s, "o3", &[(new, b"w3")]); // the new key has o3 already
    store
        .put_enc_ad(EncAd {
            host_pubkey: old,
            enc_pub: "e".into(),
            sig: "s".into(),
            at_ms: 1,
        })
        .wait()
        .unwrap();
    let list = |target, senders| SenderList {
        target,
        senders,
        iat_ms: 5,
        record: vec![],
        sig: String::new(),
    };
    store.put_sender_list(list(old, vec![s])).wait().unwrap();
    store
        .put_sender_list(list(other, vec![old, s]))
        .wait()
        .unwrap();

    assert_eq!(
        store.rebind(old, new).wait().unwrap(),
        RebindOutcome::Moved { moved: 2 }
    );
    let page = store.pull(&new, 0, 100, u64::MAX).unwrap();
    let ids: Vec<_> = page.items.iter().map(|i| i.item_id.as_str()).collect();
    assert_eq!(
        ids,
        vec!["n0", "o3", "o1", "o2"],
        "old queue after the new key's own items, in order"
    );
    assert!(page.items.windows(2).all(|w| w[0].seq < w[1].seq));
    assert!(store.pull(&old, 0, 100, u64::MAX).unwrap().items.is_empty());
    // Dedup rows moved with the new seqs: a retry to the new key is a duplicate.
    let moved_seq = page.items[2].seq;
    assert_eq!(store.dedup(&s, "o1", &new).unwrap().unwrap().seq, moved_seq);
    assert!(store.dedup(&s, "o1", &old).unwrap().is_none());
    assert!(stored_seqs(&insert(&store, s, "o1", &[(new, b"w1")]))[0].duplicate);
    // Enrolment, enc ad, lists.
    let e = store.enrolment(&new).unwrap().unwrap();
    assert_eq!(
        (e.host_name.as_str(), e.account.as_deref(), e.authority_rank),
        ("host", Some("acct"), 2)
    );
    assert!(store
        .enrolment(&old)
        .unwrap()
        .unwrap()
        .revoked_at_ms
        .is_some());
    assert_eq!(store.enc_ad(&old).unwrap(), None);
    assert_eq!(store.sender_list(&new).unwrap().unwrap().senders, vec![s]);
    assert!(store.sender_list(&old).unwrap().is_none());
    assert_eq!(
        store.sender_list(&other).unwrap().unwrap().senders,
        vec![s, new]
    );
    assert_eq!(store.live_enrolments_by_name("host", 10).unwrap().len(), 1);
    assert_eq!(
        store.usage_account("acct").unwrap().items,
        2,
        "moved items keep their account charge"
    );
    // Revoked old key: a second rotation from it is refused; rotating onto a revoked key too.
    assert_eq!(
        store.rebind(old, key(5)).wait().unwrap(),
        RebindOutcome::OldNotEnrolled
    );
    assert_eq!(
        store.rebind(other, old).wait().unwrap(),
        RebindOutcome::NewRevoked
    );
    assert_eq!(store.ops(1).unwrap()[0].kind, "rotate-key");
    check_invariants(&store);
}

#[test]
fn sweep_expires_notifies_and_prunes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    let (relay, sender, gone, t) = (key(100), key(1), key(2), key(3));
    enrol(&store, sender, "sender");
    enrol(&store, gone, "gone");
    enrol(&store, t, "target");
    let ret = |id: &str, s: Key32, ms: u64| InsertRequest {
        item: item(s, id, &[(t, b"x")]),
        quotas: big_quotas(),
        retention_ms: ms,
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
    check_invariants(&store);
}

#[test]
fn sweep_skips_notice_when_sender_queue_full_or_already_told() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    let (relay, sender, t) = (key(100), key(1), key(3));
    enrol(&store, sender, "sender");
    enrol(&store, t, "target");
    let ret = |id: &str| InsertRequest {
        item: item(sender, id, &[(t, b"x")]),
        quotas: big_quotas(),
        retention_ms: 10,
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
    enrol(&store, t2, "t2");
    store
        .insert(InsertRequest {
            item: item(sender, "a", &[(t2, b"x")]),
            quotas: big_quotas(),
            retention_ms: 10,
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
    check_invariants(&store);
}
