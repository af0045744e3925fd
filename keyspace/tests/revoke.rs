//! An admin's revocation and purge (`Store::revoke_key`): revoked exactly as a rotation revokes,
//! the queue deleted with one notice per envelope in the same batch as its counters, dedup
//! tombstones kept, an unknown key refused, a full queue purged in one bounded batch.

mod common;

use std::time::Instant;

use common::*;
use relay_keyspace::*;

const RELAY: u64 = 999;

fn request(k: Key32, revoke: bool, purge: bool) -> RevokeRequest {
    RevokeRequest {
        key: k,
        revoke,
        purge,
        quotas: big_quotas(),
        retention_ms: 14 * 24 * 3600 * 1000,
        admin_uid: 1234,
        reason: "stolen\nlaptop".into(),
    }
}

fn run(store: &Store, req: RevokeRequest) -> RevokeReport {
    match store
        .revoke_key(req, notice_fn(key(RELAY)))
        .wait()
        .expect("revoke")
    {
        RevokeOutcome::Done(r) => r,
        other => panic!("expected Done, got {other:?}"),
    }
}

fn list(target: Key32, senders: &[Key32], iat_ms: u64) -> SenderList {
    SenderList {
        target,
        senders: senders.to_vec(),
        iat_ms,
        record: b"{}".to_vec(),
        sig: "sig".into(),
    }
}

#[test]
fn a_revoked_key_loses_its_enc_ads_lists_and_enrolment_as_in_a_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    let (t, a, b) = (key(1), key(2), key(3));
    for (k, n) in [(t, "t"), (a, "a"), (b, "b")] {
        enrol(&store, k, n);
    }
    store
        .put_enc_ad(EncAd {
            host_pubkey: t,
            enc_pub: "e".into(),
            sig: "s".into(),
            at_ms: 1,
        })
        .wait()
        .unwrap();
    store
        .put_enc_ad_v2(EncAdV2 {
            host_pubkey: t,
            record: b"{}".to_vec(),
            sig: "s".into(),
            at_ms: 1,
        })
        .wait()
        .unwrap();
    store.put_sender_list(list(a, &[t, b], 5)).wait().unwrap();
    store.put_sender_list(list(b, &[t], 5)).wait().unwrap();
    store.put_sender_list(list(t, &[a], 5)).wait().unwrap();

    let r = run(&store, request(t, true, false));
    assert!(r.revoked && !r.already_revoked, "{r:?}");
    assert_eq!(r.lists_changed, 2);
    assert!(store.enc_ads(&t).unwrap().is_empty(), "both enc ads gone");
    assert!(
        store.sender_list(&t).unwrap().is_none(),
        "its own list gone"
    );
    assert_eq!(store.sender_list(&a).unwrap().unwrap().senders, vec![b]);
    assert!(store.sender_list(&b).unwrap().unwrap().senders.is_empty());
    assert!(
        rows_of(&store, "sender_index")
            .iter()
            .all(|(k, _)| !k.to_string().contains(&fingerprint(&t))),
        "no index row names or belongs to the revoked key"
    );
    assert!(store
        .enrolment(&t)
        .unwrap()
        .unwrap()
        .revoked_at_ms
        .is_some());
    assert_eq!(store.live_enrolment_count().unwrap(), 2);
    assert_eq!(
        store.enrol(enrol_req(t, "t", None, 0)).wait().unwrap(),
        EnrolOutcome::Revoked
    );
    // Pushes to it are refused in the commit.
    assert!(matches!(
        insert(&store, a, "late", &[(t, b"w")]),
        InsertOutcome::TargetNotEnrolled { .. }
    ));
    let op = &store.ops(1).unwrap()[0];
    assert_eq!(op.kind, "revoke");
    assert!(
        op.detail.contains("revoked, 2 allowlists changed")
            && op.detail.contains("uid 1234")
            && op.detail.contains("reason: stolen laptop"),
        "{}",
        op.detail
    );
    // Again: nothing more to do, said so.
    let again = run(&store, request(t, true, false));
    assert!(again.already_revoked && !again.revoked, "{again:?}");
    assert_eq!(store.live_enrolment_count().unwrap(), 2);
    check_invariants(&store);
}

#[test]
fn a_purge_deletes_the_queue_and_tells_each_envelope_sender_once_in_one_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    let (t, a, b) = (key(1), key(2), key(3));
    for (k, n) in [(t, "t"), (a, "a"), (b, "b")] {
        enrol(&store, k, n);
    }
    insert(&store, a, "a1", &[(t, b"one"), (b, b"one")]);
    insert(&store, b, "b1", &[(t, b"two!")]);
    let receipt = NewItem {
        kind: ItemKind::Receipt,
        ..item(a, "r1", &[(t, b"rcpt")])
    };
    store.insert(req(receipt, big_quotas())).wait().unwrap();
    insert(&store, t, "self", &[(t, b"me")]);

    // Purge only: the key stays live; its sender gets no notice for the receipt.
    let r = run(&store, request(t, false, true));
    assert!(!r.revoked && !r.already_revoked, "{r:?}");
    assert_eq!((r.purged_items, r.purged_bytes), (4, 3 + 4 + 4 + 2));
    assert_eq!(r.notices, 3, "a1, b1 and the self-sent one");
    assert_eq!(
        store.usage_target(&t).unwrap(),
        Usage {
            items: 1,
            bytes: store.pull(&t, 0, 10, u64::MAX).unwrap().items[0].wire.len() as u64
        }
    );
    let to_a = store.pull(&a, 0, 10, u64::MAX).unwrap().items;
    assert_eq!(to_a.len(), 1);
    assert_eq!(to_a[0].kind, ItemKind::Expired);
    assert_eq!(to_a[0].item_id, "expired:a1:0");
    assert_eq!(
        store.pull(&b, 0, 10, u64::MAX).unwrap().items.len(),
        2,
        "a1 itself and b1's notice"
    );
    assert!(store
        .enrolment(&t)
        .unwrap()
        .unwrap()
        .revoked_at_ms
        .is_none());
    // Dedup tombstones stay: the same push again is a duplicate, not a new item.
    let again = insert(&store, a, "a1", &[(t, b"one"), (b, b"one")]);
    assert!(stored_seqs(&again).iter().all(|s| s.duplicate), "{again:?}");
    assert_eq!(store.ops(1).unwrap()[0].kind, "purge");

    // Revoke + purge: the notice for its own mail is not queued for a revoked key.
    let r = run(&store, request(t, true, true));
    assert!(r.revoked, "{r:?}");
    assert_eq!((r.purged_items, r.notices), (1, 0));
    assert_eq!(store.usage_target(&t).unwrap(), Usage::default());
    check_invariants(&store);
}

#[test]
fn an_unknown_key_is_refused_and_nothing_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    enrol(&store, key(1), "t");
    let ops_before = store.ops(1000).unwrap().len();
    let out = store
        .revoke_key(request(key(77), true, true), notice_fn(key(RELAY)))
        .wait()
        .unwrap();
    assert_eq!(out, RevokeOutcome::UnknownKey);
    assert_eq!(store.ops(1000).unwrap().len(), ops_before);
}

#[test]
fn a_fingerprint_prefix_finds_every_matching_enrolment() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    for n in 0..50 {
        enrol(&store, key(n), &format!("h{n}"));
    }
    let fp = fingerprint(&key(7));
    let one = store.enrolments_by_fingerprint(&fp, 10).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].host_pubkey, key(7));
    let upper = store
        .enrolments_by_fingerprint(&fp.replace('-', "").to_uppercase()[..6], 10)
        .unwrap();
    assert!(upper.iter().any(|e| e.host_pubkey == key(7)));
    // One hex digit matches about a sixteenth of the keys; the limit bounds the answer.
    let many = store.enrolments_by_fingerprint(&fp[..1], 2).unwrap();
    assert_eq!(many.len(), 2);
}

/// A `/proc/self/status` figure in KiB (Linux; `None` elsewhere), for the printed measurement.
fn proc_status_kib(field: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The bound: a queue at the default `--max-queue-items` (10,000 items, here 1 KiB each from
/// 100 senders) is deleted, with its 10,000 notices, in one batch. Prints the time taken.
#[test]
fn purging_a_full_queue_is_one_bounded_batch() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    let t = key(1);
    enrol(&store, t, "t");
    let senders: Vec<Key32> = (0..100).map(|n| key(1_000 + n)).collect();
    for (n, s) in senders.iter().enumerate() {
        enrol(&store, *s, &format!("s{n}"));
    }
    let wire = vec![0x5a; 1024];
    let mut pending = Vec::new();
    for i in 0..10_000usize {
        let s = senders[i % senders.len()];
        pending.push(store.insert(req(item(s, &format!("m{i}"), &[(t, &wire)]), big_quotas())));
        if pending.len() == 500 {
            for p in pending.drain(..) {
                p.wait().unwrap();
            }
        }
    }
    for p in pending.drain(..) {
        p.wait().unwrap();
    }
    assert_eq!(store.usage_target(&t).unwrap().items, 10_000);
    let (rss_before, peak_before) = (proc_status_kib("VmRSS"), proc_status_kib("VmHWM"));
    let started = Instant::now();
    let r = run(&store, request(t, true, true));
    let took = started.elapsed();
    eprintln!(
        "purged 10,000 items (10 MiB) with 10,000 notices in one batch: {took:?}; \
         RSS before {rss_before:?} KiB, peak before {peak_before:?} KiB, peak after {:?} KiB",
        proc_status_kib("VmHWM")
    );
    assert_eq!((r.purged_items, r.notices), (10_000, 10_000));
    assert_eq!(store.usage_target(&t).unwrap(), Usage::default());
    assert!(took.as_secs() < 60, "took {took:?}");
    assert_eq!(
        check_invariants(&store),
        10_000,
        "only the notices are queued"
    );
}
