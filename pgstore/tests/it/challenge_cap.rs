//! The challenge cap holds across processes issuing at the same moment: issuers serialise on
//! a row lock (the `meta` row), the portable form of the table lock it replaced.

use std::sync::Arc;

use relay_pgstore::PgStore;
use relay_store::{ChallengeIssue, OpenOptions, RelayStore};
use relay_testkit::cluster::PgCluster;

#[test]
fn concurrent_issuers_on_two_handles_never_pass_the_challenge_cap() {
    let Some(pg) = PgCluster::start_or_skip("challenge_cap") else {
        return;
    };
    let url = pg.fresh_db();
    let handles: Vec<Arc<dyn RelayStore>> = (0..2)
        .map(|_| {
            Arc::new(PgStore::open(&url, OpenOptions::default()).expect("open"))
                as Arc<dyn RelayStore>
        })
        .collect();
    const CAP: u64 = 5;
    const ISSUERS: u8 = 24;
    let start = Arc::new(std::sync::Barrier::new(usize::from(ISSUERS)));
    let threads: Vec<_> = (0..ISSUERS)
        .map(|k| {
            let book = handles[usize::from(k % 2)]
                .shared_challenges()
                .expect("a shared book");
            let start = start.clone();
            std::thread::spawn(move || {
                start.wait();
                book.issue([k; 32], format!("c{k}"), 1_000, 60_000, CAP)
                    .wait()
                    .expect("issue")
            })
        })
        .collect();
    let issued = threads
        .into_iter()
        .map(|t| t.join().expect("issuer thread"))
        .filter(|o| *o == ChallengeIssue::Issued)
        .count();
    assert_eq!(issued as u64, CAP, "exactly the cap is issued");
    for h in handles {
        h.close().expect("close");
    }
}
