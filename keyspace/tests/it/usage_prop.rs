//! Property: after any sequence of inserts, pulls, acks, deletes, rotations and sweeps, the
//! usage counters equal a full recount and every queued item has its dedup and expiry rows.
//! (Pulls leave hints that later acks count by instead of the items' records.)

use crate::common;

use common::*;
use proptest::prelude::*;
use relay_keyspace::*;

#[derive(Debug, Clone)]
enum Op {
    Insert {
        sender: u8,
        id: u8,
        targets: Vec<u8>,
        wire: u8,
        retention: u16,
    },
    Pull {
        target: u8,
        limit: u8,
    },
    Ack {
        target: u8,
        back: u8,
    },
    Delete {
        target: u8,
        back: u8,
    },
    Rebind {
        old: u8,
        new: u8,
    },
    Sweep {
        advance: u16,
        max: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3u8, 0..6u8, prop::collection::vec(0..5u8, 1..3), 0..3u8, 1..2000u16)
            .prop_map(|(sender, id, targets, wire, retention)| Op::Insert { sender, id, targets, wire, retention }),
        2 => (0..5u8, 1..6u8).prop_map(|(target, limit)| Op::Pull { target, limit }),
        2 => (0..5u8, 0..3u8).prop_map(|(target, back)| Op::Ack { target, back }),
        1 => (0..5u8, 0..3u8).prop_map(|(target, back)| Op::Delete { target, back }),
        1 => (0..5u8, 5..8u8).prop_map(|(old, new)| Op::Rebind { old, new }),
        1 => (0..3000u16, 1..5u8).prop_map(|(advance, max)| Op::Sweep { advance, max }),
    ]
}

fn quotas() -> Quotas {
    Quotas {
        max_queue_items: 6,
        max_queue_bytes: 40,
        max_sender_items: 4,
        max_sender_bytes: 30,
        max_account_items: 8,
        max_account_bytes: 60,
    }
}

fn tkey(n: u8) -> Key32 {
    key(1_000 + u64::from(n))
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    for n in 0..8u8 {
        let account = (n % 2 == 0).then_some("acct");
        store
            .enrol(enrol_req(tkey(n), &format!("h{n}"), account, 2))
            .wait()
            .unwrap();
    }
    // Senders are enrolled too, so sweeps can queue notices for them.
    for s in 0..3u8 {
        enrol(&store, key(u64::from(s)), &format!("s{s}"));
    }
    // Ops are submitted without waiting and settled every few steps, so groups mix
    // inserts, acks, rotations and sweeps (in-group reads of earlier in-group writes).
    let mut waits: Vec<Box<dyn FnOnce() -> Result<()>>> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        if i % 6 == 5 {
            for w in waits.drain(..) {
                w().unwrap();
            }
        }
        match op {
            Op::Insert {
                sender,
                id,
                targets,
                wire,
                retention,
            } => {
                let wires: Vec<Vec<u8>> = targets
                    .iter()
                    .map(|_| vec![wire; 3 + usize::from(wire) * 4])
                    .collect();
                let ts: Vec<(Key32, &[u8])> = targets
                    .iter()
                    .zip(&wires)
                    .map(|(t, w)| (tkey(*t), w.as_slice()))
                    .collect();
                let mut r = req(
                    item(key(u64::from(sender)), &format!("i{id}"), &ts),
                    quotas(),
                );
                r.retention_ms = u64::from(retention);
                let p = store.insert(r);
                waits.push(Box::new(move || p.wait().map(|_| ())));
            }
            Op::Pull { target, limit } => {
                // Reads the last durable snapshot: ops still in flight are not in it.
                store
                    .pull(&tkey(target), 0, usize::from(limit), u64::MAX)
                    .unwrap();
            }
            Op::Ack { target, back } => {
                let c = store.cursor(&tkey(target)).unwrap();
                let p = store.ack(&tkey(target), c.head_seq.saturating_sub(u64::from(back)));
                waits.push(Box::new(move || p.wait().map(|_| ())));
            }
            Op::Delete { target, back } => {
                let c = store.cursor(&tkey(target)).unwrap();
                let p =
                    store.delete_item(&tkey(target), c.head_seq.saturating_sub(u64::from(back)));
                waits.push(Box::new(move || p.wait().map(|_| ())));
            }
            Op::Rebind { old, new } => {
                let p = store.rebind(tkey(old), tkey(new));
                waits.push(Box::new(move || p.wait().map(|_| ())));
            }
            Op::Sweep { advance, max } => {
                clock.advance(u64::from(advance));
                let now = clock.now_ms();
                let relay = key(99);
                let notice: NoticeFn = Box::new(move |x: &ExpiredItem, _| {
                    Some(item(
                        relay,
                        &format!("expired:{}:{}", x.item_id, x.seq),
                        &[(x.sender, b"n")],
                    ))
                });
                let p = store.sweep(
                    now,
                    now.saturating_sub(500),
                    quotas(),
                    1_000,
                    usize::from(max),
                    notice,
                );
                waits.push(Box::new(move || p.wait().map(|_| ())));
            }
        }
        clock.advance(1);
    }
    for w in waits {
        w().unwrap();
    }
    check_invariants(&store);
    store.close().unwrap();
    // And after a reopen.
    let store = open_with(dir.path(), clock);
    check_invariants(&store);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 6, max_shrink_iters: 200, ..ProptestConfig::default() })]
    #[test]
    fn usage_equals_recount(ops in prop::collection::vec(op(), 60..200)) {
        run(ops);
    }
}
