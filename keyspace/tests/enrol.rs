//! Enrolment rules.

mod common;

use common::*;
use relay_keyspace::*;

#[test]
fn enrol_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(5));
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
    let store = open_with(dir.path(), TestClock::new(6));
    assert_eq!(store.live_enrolment_count().unwrap(), 5);
}
