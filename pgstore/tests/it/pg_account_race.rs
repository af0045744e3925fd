//! The account quota holds when pushes through several handles (relay processes) reach an
//! account together: the usage row of an account that has none yet is created and locked
//! before it is read, so the second push waits for the first and sees its items.

use std::sync::{Arc, Barrier};

use relay_pgstore::PgStore;
use relay_store::{InsertOutcome, OpenOptions, RelayStore};
use relay_testkit::cluster::PgCluster;

use crate::pg_store::{enrol_req, item};

/// Handles racing on one account per round (each its own pool, as processes are).
const HANDLES: usize = 6;
/// Rounds, each on an account nobody has pushed to yet.
const ROUNDS: u8 = 8;

#[test]
fn the_first_pushes_to_an_account_through_several_processes_never_pass_its_item_quota() {
    let Some(pg) = PgCluster::start_or_skip("pg_account_race") else {
        return;
    };
    let url = pg.fresh_db();
    let handles: Vec<Arc<dyn RelayStore>> = (0..HANDLES)
        .map(|_| {
            Arc::new(PgStore::open(&url, OpenOptions::default()).expect("open"))
                as Arc<dyn RelayStore>
        })
        .collect();
    let sender = 200u8;
    handles[0].enrol(enrol_req(sender)).wait().unwrap();
    let mut over = Vec::new();
    for round in 0..ROUNDS {
        let account = format!("acct{round}");
        // HANDLES targets of one account, one per handle.
        let targets: Vec<u8> = (0..HANDLES as u8).map(|h| round * 20 + h + 1).collect();
        for &t in &targets {
            let mut e = enrol_req(t);
            e.account = Some(account.clone());
            handles[0].enrol(e).wait().unwrap();
        }
        let barrier = Arc::new(Barrier::new(HANDLES));
        let threads: Vec<_> = handles
            .iter()
            .zip(&targets)
            .map(|(h, &t)| {
                let (h, barrier) = (h.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut r = item(&format!("r{round}"), sender, &[t], b"w");
                    r.quotas.max_account_items = 1;
                    barrier.wait();
                    h.insert(r).wait().unwrap()
                })
            })
            .collect();
        let stored = threads
            .into_iter()
            .map(|t| t.join().unwrap())
            .filter(|o| matches!(o, InsertOutcome::Stored { .. }))
            .count();
        let usage = handles[0].usage_account(&account).unwrap();
        assert_eq!(usage.items, stored as u64, "usage counts what was stored");
        if stored != 1 {
            over.push((round, stored));
        }
    }
    assert!(
        over.is_empty(),
        "rounds (round, items stored) where an account quota of 1 let more in: {over:?}"
    );
}
