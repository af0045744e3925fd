//! An admin's revocation and purge (`Store::revoke_key`): revoked exactly as a rotation revokes,
//! the queue deleted with one notice per envelope in the same batch as its counters, dedup
//! tombstones kept, an unknown key refused, a full queue purged in one bounded batch.

use crate::common;

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
    let _memory = process_memory();
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
