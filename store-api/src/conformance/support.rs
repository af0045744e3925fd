//! Builders the checks (and a backend's own tests) share: a clock moved by hand, keys,
//! enrolment and insert requests, a notice builder.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sha2::Digest;

use crate::{
    Clock, EnrolOutcome, EnrolRequest, ExpiredItem, InsertOutcome, InsertRequest, ItemKind, Key32,
    NewItem, NewTarget, NoticeFn, Quotas, RelayStore, TargetSeq,
};

/// A clock tests move by hand.
#[derive(Debug)]
pub struct TestClock(pub AtomicU64);

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl TestClock {
    /// A clock standing at `ms`, shared with the store under test.
    pub fn new(ms: u64) -> Arc<TestClock> {
        Arc::new(TestClock(AtomicU64::new(ms)))
    }
    /// Move the clock to `ms` (backwards too: a check of what a step back must not do).
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    /// Move the clock `ms` forward (past a retention, a horizon, a day).
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

/// A distinct test key for each `n`.
pub fn key(n: u64) -> Key32 {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&n.to_be_bytes());
    k[31] = 0xAB;
    k
}

/// An enrolment request; `rank > 0` is a strong ("token") authority.
pub fn enrol_req(pk: Key32, name: &str, account: Option<&str>, rank: u8) -> EnrolRequest {
    EnrolRequest {
        host_pubkey: pk,
        host_name: name.into(),
        owner_fp: "owner".into(),
        account: account.map(str::to_string),
        authorized_by: if rank > 0 {
            "token".into()
        } else {
            "host-key".into()
        },
        authority_rank: rank,
        max_live: 1_000_000,
        invite: crate::InviteClaim::NotNeeded,
        org: None,
        client_id: None,
        denied_if: Vec::new(),
    }
}

/// Enrol `pk` as `name` (asserts it is enrolled now).
pub fn enrol(store: &dyn RelayStore, pk: Key32, name: &str) {
    let out = store
        .enrol(enrol_req(pk, name, None, 0))
        .wait()
        .expect("enrol");
    assert!(
        matches!(out, EnrolOutcome::Enrolled | EnrolOutcome::AlreadyEnrolled),
        "{out:?}"
    );
}

/// No quota binds.
pub fn big_quotas() -> Quotas {
    Quotas {
        max_queue_items: u64::MAX,
        max_queue_bytes: u64::MAX,
        max_sender_items: u64::MAX,
        max_sender_bytes: u64::MAX,
        max_account_items: u64::MAX,
        max_account_bytes: u64::MAX,
    }
}

/// SHA-256, as wire hashes are.
pub fn hash(b: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(b).into()
}

/// An envelope from `sender` to each `(target, wire)`.
pub fn item(sender: Key32, id: &str, targets: &[(Key32, &[u8])]) -> NewItem {
    NewItem {
        kind: ItemKind::Envelope,
        item_id: id.into(),
        sender,
        targets: targets
            .iter()
            .map(|(t, w)| NewTarget {
                target: *t,
                wire: w.to_vec(),
                wire_hash: hash(w),
            })
            .collect(),
    }
}

/// A notice builder for sweeps and purges: one notice per expired envelope, to its sender, with
/// item id `expired:<item_id>:<first byte of the target>` (receipts and notices go silently).
pub fn notice_fn(relay: Key32) -> NoticeFn {
    Box::new(move |x: &ExpiredItem, now| {
        if x.kind != ItemKind::Envelope {
            return None;
        }
        let id = format!("expired:{}:{}", x.item_id, x.target[0]);
        let wire = format!("notice {id} {now}").into_bytes();
        Some(NewItem {
            kind: ItemKind::Expired,
            item_id: id,
            sender: relay,
            targets: vec![NewTarget {
                target: x.sender,
                wire_hash: hash(&wire),
                wire,
            }],
        })
    })
}

/// An insert request with 14 days' retention.
pub fn req(item: NewItem, quotas: Quotas) -> InsertRequest {
    InsertRequest {
        item,
        quotas,
        retention_ms: 14 * 24 * 3600 * 1000,
        require_live_sender: false,
    }
}

/// Insert without quotas.
pub fn insert(
    store: &dyn RelayStore,
    sender: Key32,
    id: &str,
    targets: &[(Key32, &[u8])],
) -> InsertOutcome {
    store
        .insert(req(item(sender, id, targets), big_quotas()))
        .wait()
        .expect("insert")
}

/// The seqs of a `Stored` outcome (panics on any other).
pub fn stored_seqs(out: &InsertOutcome) -> Vec<TargetSeq> {
    match out {
        InsertOutcome::Stored { targets, .. } => targets.clone(),
        other => panic!("expected Stored, got {other:?}"),
    }
}

/// Every enrolment row, `max` per call, until the scan reaches the end: (expired, calls).
pub fn expire_idle_all(store: &dyn RelayStore, now: u64, idle_ms: u64, max: usize) -> (u64, u64) {
    let (mut expired, mut calls, mut after) = (0, 0, None);
    loop {
        let r = store.expire_idle(now, idle_ms, after, max).wait().unwrap();
        assert!(r.scanned <= max as u64, "a call looks at most `max` rows");
        expired += r.expired;
        calls += 1;
        after = r.next;
        if after.is_none() {
            return (expired, calls);
        }
    }
}
