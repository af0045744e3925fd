//! Key rules: enrolment, rotation (rebind), an admin's revoke and purge, enc ads, sender lists.

use super::support::*;
use super::Backend;
use crate::*;

pub fn enrolment_rules(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(5));
    let store = &*store;
    let e = |r: EnrolRequest| store.enrol(r).wait().unwrap();
    assert_eq!(
        e(enrol_req(key(1), "MacBook", None, 0)),
        EnrolOutcome::Enrolled
    );
    assert_eq!(
        e(enrol_req(key(1), "MacBook", None, 0)),
        EnrolOutcome::AlreadyEnrolled
    );
    // Names are labels without a proven account: two owners' macbooks coexist.
    assert_eq!(
        e(enrol_req(key(2), "macbook", None, 0)),
        EnrolOutcome::Enrolled
    );
    let by_name = store.live_enrolments_by_name("MACBOOK", 10).unwrap();
    assert_eq!(by_name.len(), 2);
    assert_eq!(
        store.live_enrolments_by_name("macbook", 1).unwrap().len(),
        1
    );
    assert!(store
        .live_enrolments_by_name("macboo", 10)
        .unwrap()
        .is_empty());
    // Inside a proven account, the name is unique among live keys.
    assert_eq!(
        e(enrol_req(key(3), "work", Some("acct"), 2)),
        EnrolOutcome::Enrolled
    );
    assert_eq!(
        e(enrol_req(key(4), "WORK", Some("acct"), 2)),
        EnrolOutcome::NameTaken
    );
    assert_eq!(
        e(enrol_req(key(4), "work", Some("other"), 2)),
        EnrolOutcome::Enrolled
    );
    // A weaker authority never overwrites the account a stronger one recorded.
    assert_eq!(
        e(enrol_req(key(3), "renamed", None, 0)),
        EnrolOutcome::AlreadyEnrolled
    );
    let rec = store.enrolment(&key(3)).unwrap().unwrap();
    assert_eq!(
        (
            rec.account.as_deref(),
            rec.authority_rank,
            rec.host_name.as_str()
        ),
        (Some("acct"), 2, "work")
    );
    assert_eq!(store.live_enrolment_count().unwrap(), 4);
    // Capacity counts live enrolments.
    let mut r = enrol_req(key(9), "x", None, 0);
    r.max_live = 4;
    assert_eq!(e(r.clone()), EnrolOutcome::Capacity);
    r.max_live = 5;
    assert_eq!(e(r), EnrolOutcome::Enrolled);
    // A revoked key stays revoked (rotation revokes).
    assert_eq!(
        store.rebind(key(9), key(10)).wait().unwrap(),
        RebindOutcome::Moved { moved: 0 }
    );
    assert_eq!(e(enrol_req(key(9), "x", None, 0)), EnrolOutcome::Revoked);
    assert_eq!(
        e(enrol_req(key(9), "x", Some("acct"), 9)),
        EnrolOutcome::Revoked
    );
    assert!(store
        .enrolment(&key(9))
        .unwrap()
        .unwrap()
        .revoked_at_ms
        .is_some());
    assert_eq!(store.live_enrolment_count().unwrap(), 5);
    assert_eq!(
        store.live_enrolments_by_name("x", 10).unwrap()[0].host_pubkey,
        key(10)
    );
    let stats = store.stats().unwrap();
    assert_eq!((stats.live_enrolments, stats.revoked_enrolments), (5, 1));
    // Counters survive a reopen.
    store.close().unwrap();
    let store = backend.open(TestClock::new(6));
    let store = &*store;
    assert_eq!(store.live_enrolment_count().unwrap(), 5);
}

pub fn a_rotation_moves_the_queue_after_the_new_keys_items(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (s, old, new, other) = (key(1), key(2), key(3), key(4));
    store
        .enrol(enrol_req(old, "host", Some("acct"), 2))
        .wait()
        .unwrap();
    enrol(store, new, "host-new");
    enrol(store, other, "other");
    for i in 0..4 {
        insert(
            store,
            s,
            &format!("o{i}"),
            &[(old, format!("w{i}").as_bytes())],
        );
    }
    store.ack(&old, 1_000).wait().unwrap(); // o0 acked: not moved
    insert(store, s, "n0", &[(new, b"mine")]);
    insert(store, s, "o3", &[(new, b"w3")]); // the new key has o3 already
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
    assert!(stored_seqs(&insert(store, s, "o1", &[(new, b"w1")]))[0].duplicate);
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
    backend.check_invariants(store);
}

const RELAY: u64 = 999;

fn invite(n: u8, created_ms: u64, expires_ms: u64) -> Invite {
    Invite {
        hash: [n; 32],
        created_ms,
        expires_ms,
        note: format!("invite {n}"),
    }
}

fn with_invite(pk: Key32, n: u8) -> EnrolRequest {
    EnrolRequest {
        invite: InviteClaim::Presented([n; 32]),
        ..enrol_req(pk, "guest", None, 1)
    }
}

pub fn an_invite_admits_one_new_key_once_before_it_expires(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let e = |r: EnrolRequest| store.enrol(r).wait().unwrap();
    let put = |i: Invite, max: u64| store.put_invite(i, max).wait().unwrap();
    assert_eq!(put(invite(1, 1_000, 2_000), 10), InviteOutcome::Issued);
    assert_eq!(put(invite(2, 1_000, 1_500), 10), InviteOutcome::Issued);
    // Never issued: refused, nothing stored.
    assert_eq!(e(with_invite(key(1), 9)), EnrolOutcome::InviteRefused);
    assert!(store.enrolment(&key(1)).unwrap().is_none());
    // A refusal for capacity does not use the invite up.
    let mut full = with_invite(key(1), 1);
    full.max_live = 0;
    assert_eq!(e(full), EnrolOutcome::Capacity);
    assert_eq!(e(with_invite(key(1), 1)), EnrolOutcome::Enrolled);
    // Single use: another key cannot take it; the key that took it re-enrols without one.
    assert_eq!(e(with_invite(key(2), 1)), EnrolOutcome::InviteRefused);
    assert_eq!(e(with_invite(key(1), 1)), EnrolOutcome::AlreadyEnrolled);
    let without = EnrolRequest {
        invite: InviteClaim::Missing,
        ..enrol_req(key(1), "guest", None, 1)
    };
    assert_eq!(e(without.clone()), EnrolOutcome::AlreadyEnrolled);
    let new_without = EnrolRequest {
        host_pubkey: key(3),
        ..without
    };
    assert_eq!(e(new_without), EnrolOutcome::InviteRefused);
    // Expired at its expiry time.
    clock.set(1_500);
    assert_eq!(e(with_invite(key(2), 2)), EnrolOutcome::InviteRefused);
    assert!(store.enrolment(&key(2)).unwrap().is_none());
    assert_eq!(store.live_enrolment_count().unwrap(), 1);
    let kinds: Vec<String> = store.ops(10).unwrap().into_iter().map(|o| o.kind).collect();
    assert!(kinds.contains(&"invite-redeemed".to_string()), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| *k == "invite").count(), 2);
    backend.check_invariants(store);
}

pub fn concurrent_enrolments_with_one_invite_admit_one_key(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    assert_eq!(
        store
            .put_invite(invite(5, 1_000, 9_000), 10)
            .wait()
            .unwrap(),
        InviteOutcome::Issued
    );
    // Submitted together (a backend runs them in one group, or on several connections).
    let pendings: Vec<_> = (10..30)
        .map(|n| store.enrol(with_invite(key(n), 5)))
        .collect();
    let outs: Vec<_> = pendings.into_iter().map(|p| p.wait().unwrap()).collect();
    let enrolled = outs
        .iter()
        .filter(|o| **o == EnrolOutcome::Enrolled)
        .count();
    assert_eq!(enrolled, 1, "{outs:?}");
    assert!(outs
        .iter()
        .all(|o| matches!(o, EnrolOutcome::Enrolled | EnrolOutcome::InviteRefused)));
    assert_eq!(store.live_enrolment_count().unwrap(), 1);
    backend.check_invariants(store);
}

pub fn issuing_an_invite_prunes_the_expired_and_caps_the_unexpired(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    let put = |i: Invite, max: u64| store.put_invite(i, max).wait().unwrap();
    assert_eq!(put(invite(1, 1_000, 1_100), 2), InviteOutcome::Issued);
    assert_eq!(put(invite(2, 1_000, 5_000), 2), InviteOutcome::Issued);
    assert_eq!(put(invite(3, 1_000, 5_000), 2), InviteOutcome::Full);
    // Re-issuing a stored hash replaces it and is not counted twice.
    assert_eq!(put(invite(2, 1_000, 6_000), 2), InviteOutcome::Issued);
    clock.set(1_100);
    // Invite 1 expired: pruned by this issue, which then fits.
    assert_eq!(put(invite(3, 1_100, 5_000), 2), InviteOutcome::Issued);
    assert_eq!(
        store.enrol(with_invite(key(1), 3)).wait().unwrap(),
        EnrolOutcome::Enrolled
    );
    assert_eq!(
        store.enrol(with_invite(key(2), 1)).wait().unwrap(),
        EnrolOutcome::InviteRefused
    );
    // The invites outlive a reopen.
    store.close().unwrap();
    let store = backend.open(clock);
    assert_eq!(
        store.enrol(with_invite(key(3), 2)).wait().unwrap(),
        EnrolOutcome::Enrolled
    );
    backend.check_invariants(&*store);
}

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

fn run(store: &dyn RelayStore, req: RevokeRequest) -> RevokeReport {
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

pub fn a_revoked_key_loses_its_enc_ads_lists_and_enrolment_as_in_a_rotation(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    let (t, a, b) = (key(1), key(2), key(3));
    for (k, n) in [(t, "t"), (a, "a"), (b, "b")] {
        enrol(store, k, n);
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

    let r = run(store, request(t, true, false));
    assert!(r.revoked && !r.already_revoked, "{r:?}");
    assert_eq!(r.lists_changed, 2);
    assert!(store.enc_ads(&t).unwrap().is_empty(), "both enc ads gone");
    assert!(
        store.sender_list(&t).unwrap().is_none(),
        "its own list gone"
    );
    assert_eq!(store.sender_list(&a).unwrap().unwrap().senders, vec![b]);
    assert!(store.sender_list(&b).unwrap().unwrap().senders.is_empty());
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
        insert(store, a, "late", &[(t, b"w")]),
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
    let again = run(store, request(t, true, false));
    assert!(again.already_revoked && !again.revoked, "{again:?}");
    assert_eq!(store.live_enrolment_count().unwrap(), 2);
    backend.check_invariants(store);
}

pub fn a_purge_deletes_the_queue_and_tells_each_envelope_sender_once(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    let (t, a, b) = (key(1), key(2), key(3));
    for (k, n) in [(t, "t"), (a, "a"), (b, "b")] {
        enrol(store, k, n);
    }
    insert(store, a, "a1", &[(t, b"one"), (b, b"one")]);
    insert(store, b, "b1", &[(t, b"two!")]);
    let receipt = NewItem {
        kind: ItemKind::Receipt,
        ..item(a, "r1", &[(t, b"rcpt")])
    };
    store.insert(req(receipt, big_quotas())).wait().unwrap();
    insert(store, t, "self", &[(t, b"me")]);

    // Purge only: the key stays live; its sender gets no notice for the receipt.
    let r = run(store, request(t, false, true));
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
    let again = insert(store, a, "a1", &[(t, b"one"), (b, b"one")]);
    assert!(stored_seqs(&again).iter().all(|s| s.duplicate), "{again:?}");
    assert_eq!(store.ops(1).unwrap()[0].kind, "purge");

    // Revoke + purge: the notice for its own mail is not queued for a revoked key.
    let r = run(store, request(t, true, true));
    assert!(r.revoked, "{r:?}");
    assert_eq!((r.purged_items, r.notices), (1, 0));
    assert_eq!(store.usage_target(&t).unwrap(), Usage::default());
    backend.check_invariants(store);
}

pub fn revoking_an_unknown_key_is_refused_and_changes_nothing(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    enrol(store, key(1), "t");
    let ops_before = store.ops(1000).unwrap().len();
    let out = store
        .revoke_key(request(key(77), true, true), notice_fn(key(RELAY)))
        .wait()
        .unwrap();
    assert_eq!(out, RevokeOutcome::UnknownKey);
    assert_eq!(store.ops(1000).unwrap().len(), ops_before);
}

pub fn a_fingerprint_prefix_finds_every_matching_enrolment(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    for n in 0..50 {
        enrol(store, key(n), &format!("h{n}"));
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

fn v1(pk: Key32, enc: &str) -> EncAd {
    EncAd {
        host_pubkey: pk,
        enc_pub: enc.into(),
        sig: format!("sig-{enc}"),
        at_ms: 5,
    }
}

fn v2(pk: Key32, record: &str, at_ms: u64) -> EncAdV2 {
    EncAdV2 {
        host_pubkey: pk,
        record: record.as_bytes().to_vec(),
        sig: format!("sig-{record}"),
        at_ms,
    }
}

fn put_v2(store: &dyn RelayStore, ad: EncAdV2) {
    assert!(store.put_enc_ad_v2(ad).wait().unwrap(), "stored");
}

pub fn v1_and_v2_ads_are_independent_and_the_last_write_wins(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    enrol(store, key(1), "h");
    assert!(store.enc_ads(&key(1)).unwrap().is_empty());
    put_v2(store, v2(key(1), "{\"n\":2}", 7));
    let ads = store.enc_ads(&key(1)).unwrap();
    assert_eq!((ads.v1, ads.v2), (None, Some(v2(key(1), "{\"n\":2}", 7))));
    // The v1 read path sees no v1 pair: the v2 row is not mistaken for one.
    assert_eq!(store.enc_ad(&key(1)).unwrap(), None);
    store.put_enc_ad(v1(key(1), "E1")).wait().unwrap();
    // An "older" record written later replaces the stored one: the store keeps no iat order.
    put_v2(store, v2(key(1), "{\"n\":1}", 8));
    let ads = store.enc_ads(&key(1)).unwrap();
    assert_eq!(ads.v1, Some(v1(key(1), "E1")));
    assert_eq!(ads.v2, Some(v2(key(1), "{\"n\":1}", 8)));
    store.put_enc_ad(v1(key(1), "E2")).wait().unwrap();
    assert_eq!(
        store.enc_ads(&key(1)).unwrap().v2,
        Some(v2(key(1), "{\"n\":1}", 8)),
        "a v1 publish leaves the v2 ad alone"
    );
    assert!(store.enc_ads(&key(2)).unwrap().is_empty());
}

pub fn a_v2_ad_of_a_key_not_live_at_commit_time_is_not_stored(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    assert!(!store.put_enc_ad_v2(v2(key(1), "{}", 1)).wait().unwrap());
    enrol(store, key(2), "h");
    store.rebind(key(2), key(3)).wait().unwrap(); // key(2) is revoked now
    assert!(!store.put_enc_ad_v2(v2(key(2), "{}", 1)).wait().unwrap());
    for k in [key(1), key(2)] {
        assert!(store.enc_ads(&k).unwrap().is_empty());
    }
    assert_eq!(store.stats().unwrap().enc_ads_v2, 0);
}

pub fn a_rotation_deletes_both_ads_of_the_old_key(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    let (old, new, other) = (key(1), key(2), key(3));
    enrol(store, old, "h");
    enrol(store, other, "o");
    for pk in [old, other] {
        store.put_enc_ad(v1(pk, "E")).wait().unwrap();
        put_v2(store, v2(pk, "{}", 1));
    }
    assert_eq!(
        store.rebind(old, new).wait().unwrap(),
        RebindOutcome::Moved { moved: 0 }
    );
    assert!(store.enc_ads(&old).unwrap().is_empty());
    assert!(
        store.enc_ads(&new).unwrap().is_empty(),
        "nothing carried over"
    );
    let kept = store.enc_ads(&other).unwrap();
    assert!(
        kept.v1.is_some() && kept.v2.is_some(),
        "other keys untouched"
    );
    let s = store.stats().unwrap();
    assert_eq!((s.enc_ads_v1, s.enc_ads_v2), (1, 1));
}

pub fn sender_lists_only_move_forward(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let ad = EncAd {
        host_pubkey: key(1),
        enc_pub: "E1".into(),
        sig: "S".into(),
        at_ms: 1,
    };
    store.put_enc_ad(ad.clone()).wait().unwrap();
    assert_eq!(store.enc_ad(&key(1)).unwrap(), Some(ad));
    assert_eq!(store.enc_ad(&key(2)).unwrap(), None);
    let list = |iat| SenderList {
        target: key(1),
        senders: vec![key(3)],
        iat_ms: iat,
        record: b"{}".to_vec(),
        sig: "s".into(),
    };
    assert_eq!(
        store.put_sender_list(list(10)).wait().unwrap(),
        SenderListOutcome::Stored
    );
    assert_eq!(
        store.put_sender_list(list(10)).wait().unwrap(),
        SenderListOutcome::NotNewer
    );
    assert_eq!(
        store.put_sender_list(list(9)).wait().unwrap(),
        SenderListOutcome::NotNewer
    );
    assert_eq!(
        store.put_sender_list(list(11)).wait().unwrap(),
        SenderListOutcome::Stored
    );
    assert_eq!(store.sender_list(&key(1)).unwrap().unwrap().iat_ms, 11);
}

/// The reads a push is admitted by agree with the single reads: `admission` (and
/// `admissions`, for many targets at once, in their order, repeats included) holds each
/// target's enrolment as `enrolment` reads it and, for a live one, its sender list as
/// `sender_list` reads it; an unknown key has neither. `enrolment_async` reads as `enrolment`.
pub fn an_admission_reads_what_the_enrolment_and_sender_list_reads_do(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    let (listed, open, revoked, unknown) = (key(1), key(2), key(3), key(4));
    for (k, n) in [(listed, "listed"), (open, "open"), (revoked, "revoked")] {
        enrol(store, k, n);
    }
    for target in [listed, revoked] {
        let list = SenderList {
            target,
            senders: vec![key(9), key(10)],
            iat_ms: 10,
            record: b"{}".to_vec(),
            sig: "s".into(),
        };
        assert_eq!(
            store.put_sender_list(list).wait().unwrap(),
            SenderListOutcome::Stored
        );
    }
    run(store, request(revoked, true, false));
    let check = |k: Key32, a: &Admission| {
        let enrolment = store.enrolment(&k).unwrap();
        let live = matches!(&enrolment, Some(e) if e.revoked_at_ms.is_none());
        assert_eq!(a.enrolment, enrolment, "enrolment of {k:?}");
        if live || a.senders.is_some() {
            assert_eq!(a.senders, store.sender_list(&k).unwrap(), "list of {k:?}");
        }
        assert_eq!(store.enrolment_async(&k).wait().unwrap(), enrolment);
    };
    for k in [listed, open, revoked, unknown] {
        check(k, &store.admission(&k).unwrap());
    }
    let listed_one = store.admission(&listed).unwrap();
    assert_eq!(
        listed_one.senders.map(|l| l.senders),
        Some(vec![key(9), key(10)])
    );
    assert_eq!(store.admission(&unknown).unwrap(), Admission::default());
    let keys = [listed, unknown, open, revoked, listed];
    let all = store.admissions(&keys).wait().unwrap();
    assert_eq!(all.len(), keys.len());
    for (k, a) in keys.iter().zip(&all) {
        check(*k, a);
    }
    assert!(store.admissions(&[]).wait().unwrap().is_empty());
}

/// A host's push (`require_live_sender`) whose sender was revoked, rotated away or never
/// enrolled is refused at the commit and stores nothing, also inside a batch with the same
/// sender; the relay's own notices (not required) and live senders are unaffected; and
/// `live_keys` names exactly the live keys.
pub fn a_push_commits_only_while_its_sender_is_live(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1_000));
    let store = &*store;
    let (s, t, r, stranger) = (key(1), key(2), key(3), key(4));
    for (k, n) in [(s, "s"), (t, "t"), (r, "r")] {
        enrol(store, k, n);
    }
    let push = |sender: Key32, id: &str| InsertRequest {
        require_live_sender: true,
        ..req(item(sender, id, &[(t, b"w")]), big_quotas())
    };
    assert!(matches!(
        store.insert(push(s, "live")).wait().unwrap(),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        store.insert(push(stranger, "never")).wait().unwrap(),
        InsertOutcome::SenderNotEnrolled
    );
    let mut live = store.live_keys(&[s, t, r, stranger]).unwrap();
    live.sort();
    assert_eq!(live, vec![s, t, r]);
    run(store, request(s, true, false));
    store.rebind(r, key(5)).wait().unwrap(); // r is rotated away (revoked)
    for sender in [s, r] {
        let outs = store
            .insert_many(vec![push(sender, "late-1"), push(sender, "late-2")])
            .wait()
            .unwrap();
        assert_eq!(outs, vec![InsertOutcome::SenderNotEnrolled; 2]);
    }
    let page = store.pull(&t, 0, 100, u64::MAX).unwrap();
    assert_eq!(page.items.len(), 1, "only the push before the revocation");
    // Not required (the relay's notices): the sender's enrolment is not asked.
    assert!(matches!(
        store
            .insert(req(item(s, "notice-like", &[(t, b"n")]), big_quotas()))
            .wait()
            .unwrap(),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        store.live_keys(&[s, r, stranger]).unwrap(),
        Vec::<Key32>::new()
    );
}

pub fn idle_expiry_takes_only_live_idle_keys_with_empty_queues(backend: &dyn Backend) {
    const T0: u64 = 1_700_000_000_000;
    const IDLE: u64 = 90 * DAY_MS;
    let clock = TestClock::new(T0);
    let store = backend.open(clock.clone());
    let store = &*store;
    let (idle, queued, recent, old, new, friend) = (key(1), key(2), key(3), key(4), key(5), key(6));
    for (pk, name) in [
        (idle, "idle"),
        (queued, "queued"),
        (recent, "recent"),
        (old, "old"),
        (friend, "friend"),
    ] {
        enrol(store, pk, name);
    }
    insert(store, friend, "m1", &[(queued, b"waiting")]);
    store
        .put_sender_list(list(idle, &[friend], T0))
        .wait()
        .unwrap();
    store
        .put_sender_list(list(friend, &[idle], T0))
        .wait()
        .unwrap();
    store.put_enc_ad(v1(idle, "e")).wait().unwrap();
    put_v2(store, v2(idle, "{}", T0));
    store.rebind(old, new).wait().unwrap(); // old: revoked, new: seen today
    clock.advance(IDLE + DAY_MS);
    let now = clock.now_ms();
    let today = utc_day(now);
    store
        .record_seen(vec![(recent, today), (new, today), (friend, today)])
        .wait()
        .unwrap();
    let live_before = store.live_enrolment_count().unwrap();

    let (expired, calls) = expire_idle_all(store, now, IDLE, 2);
    assert_eq!(expired, 1, "only `idle` is live, idle and without mail");
    assert!(
        calls >= 3,
        "six enrolment rows, two per call: {calls} calls"
    );
    assert_eq!(
        store.enrolment(&idle).unwrap(),
        None,
        "idle, empty queue: gone"
    );
    assert!(
        store.enc_ads(&idle).unwrap().is_empty(),
        "its v1 and v2 ads went"
    );
    assert_eq!(
        store.sender_list(&idle).unwrap(),
        None,
        "its allowlist went"
    );
    assert_eq!(
        store.sender_list(&friend).unwrap().unwrap().senders,
        vec![idle],
        "another key's list naming it is kept"
    );
    assert!(
        store.enrolment(&queued).unwrap().is_some(),
        "queued mail keeps it"
    );
    assert!(
        store.enrolment(&recent).unwrap().is_some(),
        "a recent hop keeps it"
    );
    let o = store.enrolment(&old).unwrap().expect("a revoked row stays");
    assert!(o.revoked_at_ms.is_some());
    assert_eq!(store.live_enrolment_count().unwrap(), live_before - 1);
    let log = store.ops(10).unwrap();
    assert_eq!(
        log.iter().filter(|e| e.kind == "expire-idle").count(),
        1,
        "one entry for the scan that expired something: {log:?}"
    );
    assert!(
        log[0].detail.starts_with("1 idle enrolments expired"),
        "{}",
        log[0].detail
    );
    backend.check_invariants(store);

    // A second pass expires nothing and logs nothing; the expired key may enrol again.
    assert_eq!(expire_idle_all(store, now, IDLE, 1000).0, 0);
    assert_eq!(
        store
            .ops(10)
            .unwrap()
            .iter()
            .filter(|e| e.kind == "expire-idle")
            .count(),
        1
    );
    enrol(store, idle, "idle");
    assert_eq!(store.live_enrolment_count().unwrap(), live_before);
    backend.check_invariants(store);
}

/// Sightings write each live key's latest day in one call, never a day back and never for a
/// revoked key; a key named twice keeps the later day, and each day written is counted.
pub fn sightings_write_each_live_keys_latest_day_and_never_move_one_back(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let (a, b, gone) = (key(1), key(2), key(3));
    enrol(store, a, "a");
    enrol(store, b, "b");
    enrol(store, gone, "gone");
    store.rebind(gone, key(9)).wait().unwrap(); // `gone` is revoked
    let day = |k: &Key32| {
        let mut found = None;
        store
            .hosts(&HostFilter::default(), &mut |r| {
                if r.enrolment.host_pubkey == *k {
                    found = r.last_seen_day;
                }
                Ok(())
            })
            .unwrap();
        found
    };
    // (The count of a call naming a key with a later and then an earlier day depends on the
    // order a store takes them in: PostgreSQL sorts them by key and day. Not asked here.)
    let written = store
        .record_seen(vec![(a, 10), (b, 12), (a, 11), (gone, 12)])
        .wait()
        .unwrap();
    assert_eq!(written, 3, "a twice, b once; `gone` is revoked");
    assert_eq!((day(&a), day(&b), day(&gone)), (Some(11), Some(12), None));
    let written = store
        .record_seen(vec![(a, 11), (b, 5), (a, 13)])
        .wait()
        .unwrap();
    assert_eq!(written, 1, "the same day is not written again");
    assert_eq!((day(&a), day(&b)), (Some(13), Some(12)));
    backend.check_invariants(store);
}
