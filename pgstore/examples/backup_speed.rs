//! Backup and restore speed of the logical format 5 on both backends, and of the fjall raw
//! format 4 beside it (the figures in docs/operating.md, "Backups"). Fills a fjall store with N
//! queued items (1 KiB wire each, to 100 targets), then times, in one process:
//! fjall backup (format 5, format 4), fjall restore (5, 4), PostgreSQL restore (5) into a
//! throwaway cluster, PostgreSQL backup (5).
//!
//! `cargo run --release -p relay-pgstore --example backup_speed -- 200000`

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a measurement run: a panic aborts it, nothing to recover"
)]

use std::sync::Arc;
use std::time::Instant;

use relay_keyspace::{OpenOptions, RelayStore, Store};
use relay_pgstore::PgStore;
use relay_store::conformance::support::{big_quotas, enrol, item, key, req};
use relay_testkit::cluster::PgCluster;

fn mb(path: &std::path::Path) -> f64 {
    std::fs::metadata(path).map_or(0.0, |m| m.len() as f64 / 1e6)
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200_000);
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("fjall");
    let store = Store::open(&dir, OpenOptions::default()).expect("open");
    let targets: Vec<_> = (1..=100).map(key).collect();
    for (i, t) in targets.iter().enumerate() {
        enrol(&store, *t, &format!("host{i}"));
    }
    let wire = vec![0x5au8; 1024];
    let t = Instant::now();
    let mut done = 0u64;
    while done < n {
        let batch: Vec<_> = (done..(done + 500).min(n))
            .map(|i| {
                let target = targets[(i % 100) as usize];
                req(
                    item(key(1000), &format!("item-{i}"), &[(target, &wire)]),
                    big_quotas(),
                )
            })
            .collect();
        done += batch.len() as u64;
        store.insert_many(batch).wait().expect("insert");
    }
    println!("filled {n} items in {:.1} s", t.elapsed().as_secs_f64());

    let f5 = work.path().join("f5.mbxbak");
    let t = Instant::now();
    {
        let mut out = std::fs::File::create(&f5).expect("create");
        RelayStore::backup_to(&store, &mut out, &mut |_| {}).expect("backup 5");
        out.sync_all().expect("sync");
    }
    println!(
        "fjall backup, format 5: {:.2} s, {:.0} MB",
        t.elapsed().as_secs_f64(),
        mb(&f5)
    );
    store.close().expect("close");
    let f4 = work.path().join("f4.mbxbak");
    let t = Instant::now();
    {
        let mut out = std::fs::File::create(&f4).expect("create");
        relay_keyspace::testing::backup_closed_store(&dir, 4, &mut out).expect("backup 4");
        out.sync_all().expect("sync");
    }
    println!(
        "fjall backup, format 4: {:.2} s, {:.0} MB",
        t.elapsed().as_secs_f64(),
        mb(&f4)
    );
    for (name, f) in [("5", &f5), ("4", &f4)] {
        let to = work.path().join(format!("restored{name}"));
        let t = Instant::now();
        relay_keyspace::restore_backup(f, &to).expect("restore");
        println!(
            "fjall restore, format {name}: {:.2} s",
            t.elapsed().as_secs_f64()
        );
        std::fs::remove_dir_all(&to).expect("rm");
    }

    let Some(pg) = PgCluster::start_or_skip("backup_speed") else {
        println!("no PostgreSQL binaries: PostgreSQL figures skipped");
        return;
    };
    let url = pg.fresh_db();
    let t = Instant::now();
    PgStore::restore_backup(&url, &f5).expect("pg restore");
    println!(
        "PostgreSQL restore, format 5: {:.2} s",
        t.elapsed().as_secs_f64()
    );
    let s = Arc::new(PgStore::open(&url, OpenOptions::default()).expect("open pg"));
    let fp = work.path().join("pg.mbxbak");
    let t = Instant::now();
    {
        let mut out = std::fs::File::create(&fp).expect("create");
        RelayStore::backup_to(&*s, &mut out, &mut |_| {}).expect("pg backup");
        out.sync_all().expect("sync");
    }
    println!(
        "PostgreSQL backup, format 5: {:.2} s, {:.0} MB",
        t.elapsed().as_secs_f64(),
        mb(&fp)
    );
    RelayStore::close(&*s).expect("close");
}
