//! A push in one round trip (`ops/insert_flight.rs`) is decided from a guess of its rows (what
//! this handle's last insert left) and guarded: whenever another process changed those rows, the
//! flight writes nothing and the push runs in two round trips. Each test makes the guess wrong
//! through a second handle on the same database (as a second relay process) in a way where the
//! guess would decide otherwise than the rows do, and checks the answer is the rows' answer.

use std::sync::Arc;

use relay_pgstore::{InsertPaths, PgStore};
use relay_store::{InsertOutcome, OpenOptions, QuotaKind, RelayStore};
use relay_testkit::cluster::PgCluster;

use crate::pg_store::{enrol_req, item};

fn open(url: &str) -> Arc<PgStore> {
    Arc::new(PgStore::open(url, OpenOptions::default()).expect("open the postgres store"))
}

/// Two handles on one fresh database with hosts 1 (sender) and 2 (target) enrolled; the first
/// handle has pushed once (in two round trips), so its next push to 2 is guessed.
fn two_processes(test: &str) -> Option<(PgCluster, Arc<PgStore>, Arc<PgStore>)> {
    let pg = PgCluster::start_or_skip(test)?;
    let url = pg.fresh_db();
    let (a, b) = (open(&url), open(&url));
    for k in [1, 2] {
        a.enrol(enrol_req(k)).wait().unwrap();
    }
    assert!(matches!(
        a.insert(item("first", 1, &[2], b"w")).wait().unwrap(),
        InsertOutcome::Stored { .. }
    ));
    assert_eq!(
        a.insert_paths(),
        InsertPaths {
            flights: 0,
            missed: 0,
            two_trips: 1
        },
        "nothing to guess from before the first push"
    );
    Some((pg, a, b))
}

fn bookkeeping_holds(s: &PgStore) {
    let errors = s.bookkeeping_errors_for_tests().unwrap();
    assert!(errors.is_empty(), "bookkeeping: {errors:?}");
}

fn seq_of(o: &InsertOutcome) -> (u64, bool) {
    match o {
        InsertOutcome::Stored { targets, .. } => (targets[0].seq, targets[0].duplicate),
        other => panic!("not stored: {other:?}"),
    }
}

#[test]
fn a_guess_holding_sends_the_push_in_one_flight_with_the_seq_two_trips_would_give() {
    let Some((_pg, a, _b)) = two_processes("pg_flight") else {
        return;
    };
    let first = a.pull(&[2; 32], 0, 10, u64::MAX).unwrap().items[0].seq;
    let out = a.insert(item("second", 1, &[2], b"ww")).wait().unwrap();
    assert_eq!(
        a.insert_paths(),
        InsertPaths {
            flights: 1,
            missed: 0,
            two_trips: 1
        }
    );
    let (seq, dup) = seq_of(&out);
    assert!(!dup && seq > first, "{seq} after {first}");
    let usage = a.usage_target(&[2; 32]).unwrap();
    assert_eq!((usage.items, usage.bytes), (2, 3));
    assert_eq!(a.usage_sender(&[1; 32], &[2; 32]).unwrap().items, 2);
    bookkeeping_holds(&a);
}

#[test]
fn a_full_queue_filled_by_another_process_refuses_the_guessed_push() {
    let Some((_pg, a, b)) = two_processes("pg_flight") else {
        return;
    };
    // The queue holds 3 (`quotas()`): a's guess says 1 queued; b fills it to 3.
    for id in ["b1", "b2"] {
        seq_of(&b.insert(item(id, 1, &[2], b"w")).wait().unwrap());
    }
    let out = a.insert(item("a2", 1, &[2], b"w")).wait().unwrap();
    assert_eq!(
        out,
        InsertOutcome::Quota {
            target: [2; 32],
            which: QuotaKind::QueueItems
        },
        "the guess (1 queued) would have stored a fourth item"
    );
    let paths = a.insert_paths();
    assert_eq!((paths.flights, paths.missed), (1, 1), "{paths:?}");
    assert_eq!(a.usage_target(&[2; 32]).unwrap().items, 3);
    bookkeeping_holds(&a);
}

#[test]
fn a_queue_emptied_by_another_process_stores_the_push_the_guess_would_refuse() {
    let Some((_pg, a, b)) = two_processes("pg_flight") else {
        return;
    };
    for id in ["a2", "a3"] {
        seq_of(&a.insert(item(id, 1, &[2], b"w")).wait().unwrap());
    }
    // a's guess: the queue is full. b acks it all.
    let head = b.cursor(&[2; 32]).unwrap().head_seq;
    b.ack(&[2; 32], head).wait().unwrap();
    let out = a.insert(item("a4", 1, &[2], b"w")).wait().unwrap();
    let (seq, dup) = seq_of(&out);
    assert!(!dup && seq > head);
    let paths = a.insert_paths();
    assert!(
        paths.missed >= 1,
        "the full-queue guess was not used: {paths:?}"
    );
    assert_eq!(a.usage_target(&[2; 32]).unwrap().items, 1);
    bookkeeping_holds(&a);
}

#[test]
fn an_item_another_process_stored_is_a_conflict_or_duplicate_never_stored_twice() {
    let Some((_pg, a, b)) = two_processes("pg_flight") else {
        return;
    };
    let theirs = seq_of(&b.insert(item("x", 1, &[2], b"bytes-1")).wait().unwrap());
    // a guesses no dedup row for "x": with other bytes it must be a conflict...
    let out = a.insert(item("x", 1, &[2], b"bytes-2")).wait().unwrap();
    assert_eq!(out, InsertOutcome::Conflict { target: [2; 32] });
    // ... and with the same bytes a duplicate of b's seq.
    let again = seq_of(&a.insert(item("x", 1, &[2], b"bytes-1")).wait().unwrap());
    assert_eq!(again, (theirs.0, true));
    let paths = a.insert_paths();
    assert_eq!((paths.flights, paths.missed), (2, 2), "{paths:?}");
    assert_eq!(a.usage_target(&[2; 32]).unwrap().items, 2);
    bookkeeping_holds(&a);
}

#[test]
fn a_target_revoked_by_another_process_refuses_the_guessed_push() {
    let Some((_pg, a, b)) = two_processes("pg_flight") else {
        return;
    };
    let revoke = relay_store::RevokeRequest {
        key: [2; 32],
        revoke: true,
        purge: false,
        quotas: relay_store::Quotas::all(100),
        retention_ms: 60_000,
        admin_uid: 0,
        reason: "test".into(),
    };
    b.revoke_key(revoke, Box::new(|_, _| None)).wait().unwrap();
    let out = a.insert(item("a2", 1, &[2], b"w")).wait().unwrap();
    assert_eq!(out, InsertOutcome::TargetNotEnrolled { target: [2; 32] });
    let paths = a.insert_paths();
    assert_eq!((paths.flights, paths.missed), (1, 1), "{paths:?}");
    assert_eq!(a.usage_target(&[2; 32]).unwrap().items, 1);
    bookkeeping_holds(&a);
}

#[test]
fn two_processes_racing_the_same_items_store_each_once_with_one_seq() {
    let Some((_pg, a, b)) = two_processes("pg_flight") else {
        return;
    };
    const IDS: usize = 60;
    let mut big = crate::pg_store::item("", 1, &[2], b"").quotas;
    big.max_queue_items = 1_000_000;
    // Each process pushes every id (the same bytes, or for every third id its own bytes),
    // one at a time and in batches, so guesses go stale under it all the time.
    let push = |s: Arc<PgStore>, own: &'static [u8]| {
        std::thread::spawn(move || {
            let mut out = Vec::new();
            for n in 0..IDS {
                let wire: &[u8] = if n % 3 == 0 { own } else { b"same" };
                let mut r = item(&format!("r{n}"), 1, &[2], wire);
                r.quotas = big;
                if n % 4 == 0 {
                    let mut twice = r.clone();
                    twice.item.item_id = format!("r{n}b");
                    let got = s.insert_many(vec![r, twice]).wait().unwrap();
                    out.push((n, got[0].clone()));
                } else {
                    out.push((n, s.insert(r).wait().unwrap()));
                }
            }
            out
        })
    };
    let (ta, tb) = (
        push(Arc::clone(&a), b"mine-a"),
        push(Arc::clone(&b), b"mine-b"),
    );
    let (oa, ob) = (ta.join().unwrap(), tb.join().unwrap());
    let page = a.pull(&[2; 32], 0, 10_000, u64::MAX).unwrap();
    let extra = (0..IDS).filter(|n| n % 4 == 0).count();
    assert_eq!(
        page.items.len(),
        1 + IDS + extra,
        "each id stored exactly once"
    );
    let mut seqs: Vec<u64> = page.items.iter().map(|i| i.seq).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), page.items.len(), "a seq handed out twice");
    for ((n, x), (_, y)) in oa.iter().zip(&ob) {
        match (x, y) {
            (InsertOutcome::Stored { .. }, InsertOutcome::Stored { .. }) => {
                let (sx, sy) = (seq_of(x), seq_of(y));
                assert_eq!(sx.0, sy.0, "r{n}: one item, one seq");
                assert!(
                    sx.1 != sy.1,
                    "r{n}: exactly one of the two stored it: {sx:?} {sy:?}"
                );
                assert!(n % 3 != 0, "r{n}: two different byte strings both stored");
            }
            (InsertOutcome::Conflict { .. }, InsertOutcome::Stored { .. })
            | (InsertOutcome::Stored { .. }, InsertOutcome::Conflict { .. }) => {
                assert_eq!(n % 3, 0, "r{n}: a conflict for the same bytes");
            }
            other => panic!("r{n}: {other:?}"),
        }
    }
    let paths = (a.insert_paths(), b.insert_paths());
    assert!(
        paths.0.flights + paths.1.flights > 0,
        "the race never took the single flight: {paths:?}"
    );
    assert_eq!(
        a.usage_target(&[2; 32]).unwrap().items,
        page.items.len() as u64
    );
    bookkeeping_holds(&a);
}

/// One handle alone (no other process writing): its concurrent pushes to one target run as
/// groups, and a group's flight guesses from the group before it; sent at once, the later
/// flight could take the queue row lock first and miss. Flights of one handle go one at a
/// time (`combine`), so nothing this handle does alone makes a guess miss.
#[test]
fn one_process_alone_never_misses_its_own_guess() {
    let Some((_pg, a, _b)) = two_processes("pg_flight") else {
        return;
    };
    const THREADS: usize = 16;
    const EACH: usize = 12;
    let pushers: Vec<_> = (0..THREADS)
        .map(|t| {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                for n in 0..EACH {
                    let mut r = item(&format!("c{t}-{n}"), 1, &[2], b"w");
                    r.quotas.max_queue_items = 1_000_000;
                    r.quotas.max_sender_items = 1_000_000;
                    let out = a.insert(r).wait();
                    assert!(matches!(out, Ok(InsertOutcome::Stored { .. })), "{out:?}");
                }
            })
        })
        .collect();
    for p in pushers {
        p.join().unwrap();
    }
    let paths = a.insert_paths();
    assert!(paths.flights > 0, "{paths:?}");
    assert_eq!(
        paths.missed, 0,
        "a guess of this handle's own rows missed: {paths:?}"
    );
    let page = a.pull(&[2; 32], 0, 10_000, u64::MAX).unwrap();
    assert_eq!(page.items.len(), 1 + THREADS * EACH);
    bookkeeping_holds(&a);
}
