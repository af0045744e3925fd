//! A fixed store workload for instruction counts (`valgrind --tool=callgrind`): single inserts
//! from one thread (one job per group commit, so the count does not depend on scheduling),
//! batches of 100, then a pull + ack drain of everything. Figures in docs/performance-history.md
//! ("Issue 30", "The store path").
//!
//! `cargo build --release -p relay-keyspace --example insert_workload`, then
//! `valgrind --tool=callgrind target/release/examples/insert_workload single|batch|drain N DIR`.

use relay_keyspace::RelayStore;
use std::error::Error;

use relay_keyspace::{
    EnrolRequest, InsertOutcome, InsertRequest, ItemKind, Key32, NewItem, NewTarget, OpenOptions,
    Quotas, Store,
};
use sha2::Digest;

const TARGETS: u64 = 8;
const SENDERS: u64 = 8;
const WIRE: usize = 1_400;

fn key(n: u64) -> Key32 {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&n.to_be_bytes());
    k[8] = 0x5A;
    k
}

/// Pseudo-random wire bytes, like a sealed envelope.
fn wire(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..WIRE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn request(n: u64) -> InsertRequest {
    let bytes = wire(n);
    let hash: [u8; 32] = sha2::Sha256::digest(&bytes).into();
    InsertRequest {
        item: NewItem {
            kind: ItemKind::Envelope,
            item_id: format!("item-{n}"),
            sender: key(n % SENDERS),
            targets: vec![NewTarget {
                target: key(1_000 + n % TARGETS),
                wire: bytes,
                wire_hash: hash,
            }],
        },
        quotas: Quotas {
            max_queue_items: 1 << 40,
            max_queue_bytes: 1 << 50,
            max_sender_items: 1 << 40,
            max_sender_bytes: 1 << 50,
            max_account_items: 1 << 40,
            max_account_bytes: 1 << 50,
        },
        retention_ms: 14 * 86_400_000,
        require_live_sender: true,
    }
}

fn enrol_all(store: &Store) -> Result<(), Box<dyn Error>> {
    for n in (0..SENDERS).chain((0..TARGETS).map(|t| 1_000 + t)) {
        store
            .enrol(EnrolRequest {
                host_pubkey: key(n),
                host_name: format!("h{n}"),
                owner_fp: String::new(),
                account: None,
                authorized_by: "host-key".into(),
                authority_rank: 0,
                max_live: u64::MAX,
                invite: relay_store::InviteClaim::NotNeeded,
                org: None,
                client_id: None,
                denied_if: Vec::new(),
            })
            .wait()?;
    }
    Ok(())
}

fn stored(outcomes: &[InsertOutcome]) -> Result<(), Box<dyn Error>> {
    match outcomes
        .iter()
        .find(|o| !matches!(o, InsertOutcome::Stored { .. }))
    {
        Some(o) => Err(format!("insert not stored: {o:?}").into()),
        None => Ok(()),
    }
}

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(mode), Some(n), Some(dir)) = (args.get(1), args.get(2), args.get(3)) else {
        return Err("usage: insert_workload single|batch|drain N DIR".into());
    };
    let n: u64 = n.parse()?;
    let store = Store::open(std::path::Path::new(dir), OpenOptions::default())?;
    enrol_all(&store)?;
    match mode.as_str() {
        "single" => {
            for i in 0..n {
                stored(&[store.insert(request(i)).wait()?])?;
            }
        }
        "batch" => {
            for start in (0..n).step_by(100) {
                let reqs = (start..(start + 100).min(n)).map(request).collect();
                stored(&store.insert_many(reqs).wait()?)?;
            }
        }
        "drain" => {
            for start in (0..n).step_by(100) {
                let reqs = (start..(start + 100).min(n)).map(request).collect();
                stored(&store.insert_many(reqs).wait()?)?;
            }
            drain(&store)?;
        }
        other => return Err(format!("unknown mode {other}").into()),
    }
    store.close()?;
    Ok(())
}

/// Pull pages of 100 from each target's acked cursor and ack each page, until every queue is
/// empty.
fn drain(store: &Store) -> Result<(), Box<dyn Error>> {
    for t in 0..TARGETS {
        let target = key(1_000 + t);
        let mut after = store.cursor(&target)?.acked_through;
        loop {
            let page = store.pull(&target, after, 100, 8 << 20)?;
            let Some(last) = page.items.last() else { break };
            after = last.seq;
            store.ack(&target, after).wait()?;
            if !page.more {
                break;
            }
        }
    }
    Ok(())
}
