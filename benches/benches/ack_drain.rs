//! Insert and ack cost on the store alone: fill 8 queues with 1,000-byte items (`insert_many`,
//! groups of 1,000), then drain them on one thread (pull a page of 500, ack it durably); prints
//! wall time and process CPU (all threads, from `/proc/self/stat`) per item for both phases.
//!
//! Run: `cargo bench -p relay-bench --bench ack_drain`; `MBX_BENCH_ITEMS` sets the items (default 100,000).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark: a panic aborts the measurement, nothing to recover"
)]

use std::time::Instant;

use relay_keyspace::*;
use sha2::Digest;

fn key(n: u64) -> Key32 {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&n.to_be_bytes());
    k[31] = 0xAB;
    k
}

/// utime + stime of this process in clock ticks (1/100 s).
fn cpu_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

fn main() {
    // `cargo bench` passes `--bench`; the size comes from the environment.
    let n: u64 = std::env::var("MBX_BENCH_ITEMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let tmp = tempfile::tempdir().unwrap();
    let store = Store::open(&tmp.path().join("s"), OpenOptions::default()).unwrap();
    let targets: Vec<Key32> = (0..8).map(|i| key(100 + i)).collect();
    for (i, t) in targets.iter().chain([key(1)].iter()).enumerate() {
        store
            .enrol(EnrolRequest {
                host_pubkey: *t,
                host_name: format!("h{i}"),
                owner_fp: "o".into(),
                account: None,
                authorized_by: "host-key".into(),
                authority_rank: 0,
                max_live: 1_000_000,
                invite: relay_keyspace::InviteClaim::NotNeeded,
                org: None,
                client_id: None,
                denied_if: Vec::new(),
            })
            .wait()
            .unwrap();
    }
    let q = Quotas {
        max_queue_items: u64::MAX,
        max_queue_bytes: u64::MAX,
        max_sender_items: u64::MAX,
        max_sender_bytes: u64::MAX,
        max_account_items: u64::MAX,
        max_account_bytes: u64::MAX,
    };
    let (f0, fc0) = (Instant::now(), cpu_ticks());
    let mut i = 0u64;
    while i < n {
        let reqs: Vec<InsertRequest> = (i..(i + 1000).min(n))
            .map(|j| {
                let wire: Vec<u8> = (0..1000u64)
                    .map(|b| (b.wrapping_mul(j + 7) >> 3) as u8)
                    .collect();
                let wire_hash: [u8; 32] = sha2::Sha256::digest(&wire).into();
                InsertRequest {
                    item: NewItem {
                        kind: ItemKind::Envelope,
                        item_id: format!("01ARZ3NDEKTSV4RRFFQ{j:08}"),
                        sender: key(1),
                        targets: vec![NewTarget {
                            target: targets[(j % 8) as usize],
                            wire,
                            wire_hash,
                        }],
                    },
                    quotas: q,
                    retention_ms: 14 * 86_400_000,
                    require_live_sender: false,
                }
            })
            .collect();
        store.insert_many(reqs).wait().unwrap();
        i += 1000;
    }
    let fill_cpu = (cpu_ticks() - fc0) as f64 / 100.0;
    print!(
        "filled in {:.2} s, process CPU {:.2} us/item; ",
        f0.elapsed().as_secs_f64(),
        fill_cpu * 1e6 / n as f64
    );
    let (t0, c0) = (Instant::now(), cpu_ticks());
    let mut drained = 0u64;
    for t in &targets {
        let mut after = 0;
        loop {
            let page = store.pull(t, after, 500, 8 << 20).unwrap();
            let Some(last) = page.items.last() else { break };
            after = last.seq;
            drained += page.items.len() as u64;
            store.ack(t, after).wait().unwrap();
            if !page.more {
                break;
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = (cpu_ticks() - c0) as f64 / 100.0;
    println!(
        "drained {drained} in {wall:.2} s ({:.0} items/s); process CPU {cpu:.2} s = {:.2} us/item",
        drained as f64 / wall,
        cpu * 1e6 / drained as f64
    );
    store.close().unwrap();
}
