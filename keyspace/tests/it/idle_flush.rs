//! A writer that goes idle after at least 1 MiB of writes hands the memtables to fjall's flush
//! workers (a relay at rest keeps its rows in tables, not in memory); after less it leaves them,
//! so sporadic traffic does not make tiny tables every idle second.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use relay_keyspace::*;

/// Table files of every partition (fjall's layout: `db/keyspaces/<id>/tables/<table id>`).
fn table_files(dir: &Path) -> usize {
    let Ok(parts) = std::fs::read_dir(dir.join("db").join("keyspaces")) else {
        return 0;
    };
    parts
        .flatten()
        .filter_map(|p| std::fs::read_dir(p.path().join("tables")).ok())
        .map(|tables| tables.flatten().count())
        .sum()
}

/// Queue `n` items of `bytes` wire bytes for one target, submitted together (group commit).
fn queue_items(store: &Store, n: usize, bytes: usize) {
    let target = key(1);
    let pending: Vec<_> = (0..n)
        .map(|i| {
            let wire = vec![(i % 251) as u8; bytes];
            store.insert(req(
                item(key(2), &format!("item-{i}"), &[(target, &wire)]),
                big_quotas(),
            ))
        })
        .collect();
    for p in pending {
        stored_seqs(&p.wait().unwrap());
    }
}

fn open(dir: &Path) -> Store {
    let store = open_with(dir, TestClock::new(1_000_000));
    enrol(&store, key(1), "target");
    enrol(&store, key(2), "sender");
    store
}

#[test]
fn an_idle_writer_flushes_the_memtables_after_a_mebibyte_of_writes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let before = table_files(dir.path());
    // 1,200 KiB of wire bytes: over the threshold, under every memtable's own size limit.
    queue_items(&store, 1_200, 1_024);
    assert_eq!(table_files(dir.path()), before, "no memtable was full yet");

    let deadline = Instant::now() + Duration::from_secs(10);
    while table_files(dir.path()) == before {
        assert!(
            Instant::now() < deadline,
            "the idle writer did not flush within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(check_invariants(&store), 1_200);
    store.close().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000_000));
    assert_eq!(check_invariants(&store), 1_200);
}

#[test]
fn a_little_traffic_leaves_the_memtables_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let before = table_files(dir.path());
    queue_items(&store, 100, 1_024);
    // Three idle periods of the writer (WRITER_IDLE is 1 s).
    std::thread::sleep(WRITER_IDLE * 3 + Duration::from_millis(200));
    assert_eq!(table_files(dir.path()), before);
    assert_eq!(check_invariants(&store), 100);
}
