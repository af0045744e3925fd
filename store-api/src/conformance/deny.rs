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
