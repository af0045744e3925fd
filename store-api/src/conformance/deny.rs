//! Deny-list rules (spec §8 "Revocation"): an entry refuses its subject until its expiry, is
//! kept at least the longest token lifetime, survives a reopen, and adding one prunes the
//! expired and caps the unexpired.

use super::support::*;
use super::Backend;
use crate::rules::deny::MIN_DENY_MS;
use crate::*;

fn entry(subject: DenySubject, added_ms: u64, expires_ms: u64) -> DenyEntry {
    DenyEntry {
        subject,
        added_ms,
        expires_ms,
        note: "revoked by accounts".into(),
    }
}

fn client(id: &str) -> DenySubject {
    DenySubject::Client(id.into())
}

pub fn a_deny_entry_refuses_its_subject_until_it_expires_and_survives_a_reopen(
    backend: &dyn Backend,
) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let put = |e: DenyEntry| store.put_deny(e, 10).wait().unwrap();
    let host = DenySubject::Host(key(1));
    assert!(!store.denied(&[host.clone(), client("c1")], 1_000).unwrap());
    // Asked for 1 s: kept the longest token lifetime.
    assert_eq!(put(entry(host.clone(), 1_000, 2_000)), DenyOutcome::Added);
    let long = 1_000 + 10 * MIN_DENY_MS;
    assert_eq!(put(entry(client("c1"), 1_000, long)), DenyOutcome::Added);
    assert!(store.denied(std::slice::from_ref(&host), 2_000).unwrap());
    assert!(store
        .denied(&[DenySubject::Host(key(2)), client("c1")], 2_000)
        .unwrap());
    assert!(!store
        .denied(&[DenySubject::Host(key(2)), client("c2")], 2_000)
        .unwrap());
    assert!(!store
        .denied(std::slice::from_ref(&host), 1_000 + MIN_DENY_MS)
        .unwrap());
    assert!(store.denied(&[client("c1")], long - 1).unwrap());
    assert!(!store.denied(&[client("c1")], long).unwrap());
    let kinds: Vec<String> = store.ops(10).unwrap().into_iter().map(|o| o.kind).collect();
    assert_eq!(
        kinds.iter().filter(|k| *k == "deny").count(),
        2,
        "{kinds:?}"
    );
    store.close().unwrap();
    drop(store);
    let store = backend.open(clock);
    assert!(store.denied(&[host], 2_000).unwrap(), "durable");
    backend.check_invariants(&*store);
}

pub fn adding_a_deny_entry_prunes_the_expired_and_caps_the_unexpired(backend: &dyn Backend) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let put = |e: DenyEntry| store.put_deny(e, 2).wait().unwrap();
    let t = 1_000 + MIN_DENY_MS;
    assert_eq!(put(entry(client("a"), 1_000, t)), DenyOutcome::Added);
    assert_eq!(put(entry(client("b"), 1_000, t + 5)), DenyOutcome::Added);
    assert_eq!(put(entry(client("c"), 1_000, t)), DenyOutcome::Full);
    // Renewing a stored subject replaces it and is not counted twice.
    assert_eq!(put(entry(client("b"), 1_000, t + 9)), DenyOutcome::Added);
    clock.set(t);
    // "a" expired: pruned by this add, which then fits.
    assert_eq!(
        put(entry(client("c"), t, t + MIN_DENY_MS)),
        DenyOutcome::Added
    );
    assert!(store.denied(&[client("b")], t + 8).unwrap());
    assert!(store.denied(&[client("c")], t).unwrap());
    backend.check_invariants(&*store);
}

/// A token enrolment of `pk` for `client` (account "acct", org "org").
fn token_req(pk: Key32, client: &str) -> EnrolRequest {
    EnrolRequest {
        org: Some("org".into()),
        client_id: Some(client.into()),
        denied_if: vec![DenySubject::Host(pk), self::client(client)],
        ..enrol_req(pk, &format!("h{}", pk[7]), Some("acct"), 2)
    }
}

pub fn an_enrolment_records_its_client_and_a_deny_entry_refuses_it_in_its_commit(
    backend: &dyn Backend,
) {
    let clock = TestClock::new(1_000);
    let store = backend.open(clock.clone());
    let enrol = |r: EnrolRequest| store.enrol(r).wait().unwrap();
    for (k, c) in [(1, "c1"), (2, "c1"), (3, "c2")] {
        assert_eq!(enrol(token_req(key(k), c)), EnrolOutcome::Enrolled);
    }
    let e = store.enrolment(&key(1)).unwrap().unwrap();
    assert_eq!(
        (
            e.account.as_deref(),
            e.org.as_deref(),
            e.client_id.as_deref()
        ),
        (Some("acct"), Some("org"), Some("c1"))
    );
    assert_eq!(e.authorized_by, "token");
    let by_client = |c: &str, limit: usize| -> Vec<Key32> {
        let found = store.live_enrolments_by_client(c, limit).unwrap();
        found.iter().map(|e| e.host_pubkey).collect()
    };
    assert_eq!(by_client("c1", 10), vec![key(1), key(2)]);
    assert_eq!(by_client("c1", 1), vec![key(1)]);
    assert_eq!(by_client("c2", 10), vec![key(3)]);
    assert!(by_client("c3", 10).is_empty());
    // An entry for the client refuses a new key of it, and a known one's re-enrolment, in the
    // enrolment's commit: nothing is written.
    let long = 1_000 + 2 * MIN_DENY_MS;
    let added = store.put_deny(entry(client("c1"), 1_000, long), 10);
    assert_eq!(added.wait().unwrap(), DenyOutcome::Added);
    let live = store.live_enrolment_count().unwrap();
    assert_eq!(enrol(token_req(key(4), "c1")), EnrolOutcome::Denied);
    let renamed = EnrolRequest {
        host_name: "renamed".into(),
        ..token_req(key(2), "c1")
    };
    assert_eq!(enrol(renamed), EnrolOutcome::Denied);
    assert_eq!(store.enrolment(&key(4)).unwrap(), None);
    assert_eq!(store.enrolment(&key(2)).unwrap().unwrap().host_name, "h2");
    assert_eq!(store.live_enrolment_count().unwrap(), live);
    assert_eq!(enrol(token_req(key(5), "c2")), EnrolOutcome::Enrolled);
    // A revoked host is no longer a live one of its client.
    let revoke = RevokeRequest {
        key: key(1),
        revoke: true,
        purge: false,
        quotas: big_quotas(),
        retention_ms: 1,
        admin_uid: 1,
        reason: "deny list".into(),
    };
    let done = store.revoke_key(revoke, notice_fn(key(99))).wait().unwrap();
    assert!(matches!(done, RevokeOutcome::Done(r) if r.revoked));
    assert_eq!(by_client("c1", 10), vec![key(2)]);
    store.close().unwrap();
    drop(store);
    let store = backend.open(clock);
    let e = store.enrolment(&key(2)).unwrap().unwrap();
    assert_eq!(
        (e.org.as_deref(), e.client_id.as_deref()),
        (Some("org"), Some("c1")),
        "durable"
    );
    backend.check_invariants(&*store);
}
