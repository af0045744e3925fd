//! Meta rules: epoch, heartbeat, the pinned relay key, the relay log and its chain, leases and
//! a shared challenge book.

use super::support::*;
use super::Backend;
use crate::*;

pub fn meta_epoch_heartbeat_and_the_pinned_relay_key(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(77));
    let store = &*store;
    let m = store.meta().unwrap();
    assert_eq!(m.schema_version, backend.schema_version());
    assert_eq!(m.created_ms, 77);
    assert_eq!(m.epoch.len(), 36);
    store.heartbeat(123).wait().unwrap();
    assert_eq!(store.meta().unwrap().heartbeat_ms, Some(123));
    let e2 = store.rotate_epoch("test").wait().unwrap();
    assert_ne!(e2, m.epoch);
    assert_eq!(store.meta().unwrap().epoch, e2);
    assert_eq!(store.ops(10).unwrap()[0].kind, "epoch-rotate");
    store.pin_relay_pubkey(key(9)).wait().unwrap();
    store.pin_relay_pubkey(key(9)).wait().unwrap();
    match store.pin_relay_pubkey(key(8)).wait() {
        Err(StoreError::RelayKeyMismatch {
            stored_fp,
            given_fp,
        }) => {
            assert_eq!(stored_fp, fingerprint(&key(9)));
            assert_eq!(given_fp.len(), 19);
            assert_ne!(stored_fp, given_fp);
        }
        other => panic!("expected a key mismatch, got {other:?}"),
    }
    assert_eq!(store.meta().unwrap().relay_pubkey, Some(key(9)));
    store.close().unwrap();
    // Epoch survives a reopen.
    let store = backend.open(TestClock::new(78));
    let store = &*store;
    assert_eq!(store.meta().unwrap().epoch, e2);
}

pub fn the_relay_log_lists_newest_first_and_its_chain_verifies(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let pending: Vec<_> = (0..1_005)
        .map(|i| store.log_op("test", &format!("entry {i}")))
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
    let log = store.ops(5_000).unwrap();
    assert_eq!(
        log.len(),
        1_005,
        "the log is bounded by age and a 200,000 cap, not 1,000"
    );
    assert_eq!(log[0].detail, "entry 1004", "newest first");
    assert_eq!((log[0].seq, log[1_004].seq), (1_004, 0));
    assert_eq!(store.ops(3).unwrap().len(), 3);
    // Each entry chains to the one before: recomputed from the entries, and by the store.
    let mut prev = [0u8; 32];
    for e in log.iter().rev() {
        let want = crate::rules::log::chain_hash(&prev, e.seq, e.at_ms, &e.kind, &e.detail);
        assert_eq!(e.hash, want, "entry {} does not chain", e.seq);
        prev = e.hash;
    }
    assert_eq!(
        store.verify_log().unwrap(),
        LogVerdict::Intact {
            entries: 1_005,
            checkpoint: None
        }
    );
}

/// The newest entry of a kind is found however many entries of other kinds followed it, and
/// a kind never logged is `None`.
pub fn the_newest_entry_of_a_kind_is_found_however_deep_in_the_log(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    assert_eq!(store.newest_op_of("backup").unwrap(), None);
    store.log_op("backup", "first").wait().unwrap();
    store.log_op("backup", "second").wait().unwrap();
    let pending: Vec<_> = (0..2_000)
        .map(|i| store.log_op("enrol", &format!("entry {i}")))
        .collect();
    for p in pending {
        p.wait().unwrap();
    }
    let found = store
        .newest_op_of("backup")
        .unwrap()
        .expect("a backup entry");
    assert_eq!((found.seq, found.detail.as_str()), (1, "second"));
    assert_eq!(store.newest_op_of("enrol").unwrap().unwrap().seq, 2_001);
    assert_eq!(store.newest_op_of("restore").unwrap(), None);
}

/// A holder renews its own lease; on a store several processes share (one with a shared
/// challenge book) another holder is refused until the lease lapses.
pub fn a_lease_holder_keeps_its_lease(backend: &dyn Backend) {
    let clock = TestClock::new(1_000_000);
    let store = backend.open(clock.clone());
    let store = &*store;
    assert!(store.try_lease("background", "one", 90_000).wait().unwrap());
    assert!(store.try_lease("background", "one", 90_000).wait().unwrap());
    if store.shared_challenges().is_some() {
        assert!(!store.try_lease("background", "two", 90_000).wait().unwrap());
        assert!(
            store.try_lease("other-work", "two", 90_000).wait().unwrap(),
            "leases are by name"
        );
        clock.advance(90_001);
        assert!(
            store.try_lease("background", "two", 90_000).wait().unwrap(),
            "a lapsed lease goes to the next asker"
        );
        assert!(!store.try_lease("background", "one", 90_000).wait().unwrap());
    }
}

/// A store's shared challenge book (when it has one) keeps one open challenge per key, caps
/// how many are open, expires them and consumes each once. A store without one passes: the
/// relay's in-memory book is tested with the relay.
pub fn a_shared_challenge_book_is_bounded_expiring_and_single_use(backend: &dyn Backend) {
    let store = backend.open(TestClock::new(1));
    let store = &*store;
    let Some(book) = store.shared_challenges() else {
        return;
    };
    let issue = |k: u64, c: &str, now: u64| {
        book.issue(key(k), c.to_string(), now, 1_000, 2)
            .wait()
            .unwrap()
    };
    let pending = |k: u64, now: u64| book.pending(&key(k), now).wait().unwrap();
    assert_eq!(issue(1, "a", 0), ChallengeIssue::Issued);
    assert_eq!(issue(1, "a2", 10), ChallengeIssue::Issued);
    assert_eq!(
        pending(1, 20).as_deref(),
        Some("a2"),
        "a new challenge replaces the open one"
    );
    assert_eq!(pending(1, 1_010), None, "expired");
    book.consume(&key(1), "a").wait().unwrap();
    assert!(
        pending(1, 20).is_some(),
        "an old challenge does not consume the new"
    );
    assert_eq!(issue(2, "b", 10), ChallengeIssue::Issued);
    assert_eq!(issue(3, "c", 10), ChallengeIssue::Full);
    assert_eq!(
        issue(1, "a3", 10),
        ChallengeIssue::Issued,
        "replacing is always allowed"
    );
    assert_eq!(
        issue(3, "c", 1_011),
        ChallengeIssue::Issued,
        "expired ones make room"
    );
    book.consume(&key(3), "c").wait().unwrap();
    assert_eq!(pending(3, 1_012), None, "single use");
}

/// Issue 24 item 8: every new key's enrolment is a relay-log entry, and anyone may enrol, so
/// enrolment entries have a budget of their own (half the count cap): a flood of them never
/// pushes out a revocation or an epoch rotation logged before it. The enrolments stay
/// recorded in their rows; other entries still leave the log by age and by count.
pub fn enrolment_churn_never_pushes_other_entries_out_of_the_relay_log(backend: &dyn Backend) {
    let keep = LogRetention {
        max_age_ms: 400 * 24 * 3600 * 1000,
        max_entries: 40,
    };
    let budget = crate::rules::log::enrolment_budget(keep) as usize;
    assert_eq!(budget, 20);
    let clock = TestClock::new(SystemClock.now_ms());
    let s = backend.open_keeping(clock.clone(), keep);
    enrol(&*s, key(1), "early-a");
    enrol(&*s, key(2), "early-b");
    let revoked = s
        .revoke_key(
            RevokeRequest {
                key: key(2),
                revoke: true,
                purge: false,
                quotas: big_quotas(),
                retention_ms: 14 * 24 * 3600 * 1000,
                admin_uid: 1,
                reason: "test".into(),
            },
            notice_fn(key(900)),
        )
        .wait()
        .expect("revoke");
    assert!(matches!(revoked, RevokeOutcome::Done(r) if r.revoked));
    let revoke_entry = s.ops(1).expect("ops").remove(0);
    s.log_op("epoch-rotate", "a -> b: test")
        .wait()
        .expect("log");
    let rotate_entry = s.ops(1).expect("ops").remove(0);
    let churn = 300u64;
    for i in 0..churn {
        enrol(&*s, key(1_000 + i), &format!("churn-{i}"));
    }
    let log = s.ops(1_000).expect("ops");
    let enrolments = log
        .iter()
        .filter(|e| crate::rules::log::is_enrolment_entry(&e.kind))
        .count();
    assert!(
        enrolments > 0 && enrolments <= budget,
        "{enrolments} enrolment entries with a budget of {budget}"
    );
    assert!(log.len() <= 40, "{} entries", log.len());
    for kept in [&revoke_entry, &rotate_entry] {
        assert!(
            log.contains(kept),
            "enrolment churn pushed out {} ({}): {:?}",
            kept.kind,
            kept.detail,
            log.iter().map(|e| &e.kind).collect::<Vec<_>>()
        );
    }
    assert!(matches!(
        s.verify_log().expect("verify"),
        LogVerdict::Intact { .. }
    ));
    assert_eq!(s.live_enrolment_count().expect("count"), churn + 1);
    backend.check_invariants(&*s);
    // The count cap still holds for every entry: 40 newer entries of other kinds push both out.
    for i in 0..40 {
        s.log_op("note", &format!("note {i}")).wait().expect("log");
    }
    let log = s.ops(1_000).expect("ops");
    assert_eq!(log.len(), 40);
    assert!(log.iter().all(|e| e.kind == "note"));
    assert!(matches!(
        s.verify_log().expect("verify"),
        LogVerdict::Intact { .. }
    ));
    backend.check_invariants(&*s);
    s.close().expect("close");
}
