//! The sender-list reverse index (`sender_index`, schema 3): every list write keeps it exact,
//! a rotation finds the lists naming the old key through it (its cost does not grow with the
//! lists stored), the schema 2 -> 3 migration builds it (in batches, safe to kill), and old
//! backups restore with it built.

use crate::common;

use std::collections::BTreeSet;
use std::time::Instant;

use common::*;
use relay_keyspace::*;

fn list(target: Key32, senders: Vec<Key32>, iat_ms: u64) -> SenderList {
    SenderList {
        target,
        senders,
        iat_ms,
        record: vec![],
        sig: String::new(),
    }
}

fn put(store: &Store, l: SenderList) {
    assert_eq!(
        store.put_sender_list(l).wait().unwrap(),
        SenderListOutcome::Stored
    );
}

fn hex(k: &Key32) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn every_list_write_keeps_the_sender_index_exact() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    let (old, new, a, b, c, d) = (key(1), key(2), key(3), key(4), key(5), key(6));
    enrol(&store, old, "host");
    enrol(&store, new, "host-new");
    put(&store, list(a, vec![old, b], 10));
    put(&store, list(b, vec![a, old, new], 10));
    put(&store, list(c, vec![a], 10));
    put(&store, list(old, vec![a, c, old], 10));
    put(&store, list(new, vec![d, old], 5));
    assert_eq!(assert_index_exact(&store), 11);
    // A newer list replaces the rows of the one before; an older one changes nothing.
    put(&store, list(c, vec![b, d], 11));
    assert_eq!(
        store.put_sender_list(list(c, vec![a], 11)).wait().unwrap(),
        SenderListOutcome::NotNewer
    );
    assert_eq!(assert_index_exact(&store), 12);
    // Rotation: the lists naming old now name new, old's (newer) list moved to new.
    assert!(matches!(
        store.rebind(old, new).wait().unwrap(),
        RebindOutcome::Moved { .. }
    ));
    assert_eq!(
        store.sender_list(&a).unwrap().unwrap().senders,
        vec![b, new]
    );
    assert_eq!(
        store.sender_list(&b).unwrap().unwrap().senders,
        vec![a, new],
        "new is listed once"
    );
    assert_eq!(
        store.sender_list(&new).unwrap().unwrap().senders,
        vec![a, c]
    );
    assert!(store.sender_list(&old).unwrap().is_none());
    assert_eq!(assert_index_exact(&store), 8);
    // The index is durable with the lists: the same after a reopen.
    store.close().unwrap();
    let store = open_with(dir.path(), TestClock::new(2_000));
    assert_eq!(assert_index_exact(&store), 8);
}

/// Peak resident set of this process, KiB (reset by [`reset_peak_rss`]).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn reset_peak_rss() {
    // "5" resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0).
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// What one rotation cost.
#[derive(Debug)]
struct RotationCost {
    rows_scanned: u64,
    micros: u128,
    peak_rss_growth_kib: u64,
}

/// A store with `lists` sender lists of 16 keys each (3 of them naming `old`), then rotate
/// `old`; checks the result and returns what the rotation cost.
fn rotate_among(lists: u64) -> RotationCost {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    let (old, new) = (key(1), key(2));
    enrol(&store, old, "host");
    let naming: Vec<u64> = [0, lists / 2, lists - 1]
        .into_iter()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let pending: Vec<_> = (0..lists)
        .map(|i| {
            let mut senders: Vec<Key32> = (0..16).map(|j| key(1_000_000 + i * 16 + j)).collect();
            if naming.contains(&i) {
                senders[7] = old;
            }
            store.put_sender_list(list(key(100 + i), senders, 10))
        })
        .collect();
    for p in pending {
        assert_eq!(p.wait().unwrap(), SenderListOutcome::Stored);
    }
    // Let the idle writer hand its memtables to the flush workers, and them finish, so the
    // figures printed are the rotation's own.
    std::thread::sleep(std::time::Duration::from_millis(2_500));
    let before = store.commit_stats().rows_scanned;
    reset_peak_rss();
    let rss = peak_rss_kib();
    let started = Instant::now();
    store.rebind(old, new).wait().unwrap();
    let micros = started.elapsed().as_micros();
    let cost = RotationCost {
        rows_scanned: store.commit_stats().rows_scanned - before,
        micros,
        peak_rss_growth_kib: peak_rss_kib().saturating_sub(rss),
    };
    for i in &naming {
        let l = store.sender_list(&key(100 + i)).unwrap().unwrap();
        assert!(l.senders.contains(&new) && !l.senders.contains(&old));
    }
    if lists <= 1_000 {
        assert_index_exact(&store);
    }
    cost
}

/// With 1 or 10,000 lists stored, a rotation whose old key is named by a few of them reads
/// about as many rows (the index rows naming it, plus the queue and dedup ranges of an empty
/// queue): without the index it read every list (>= 10,000 rows). Time and peak memory are
/// printed, not asserted (they are noisy on a shared machine); rows are asserted.
#[test]
fn rotation_reads_the_lists_naming_the_old_key_not_every_list() {
    let _memory = process_memory();
    let one = rotate_among(1);
    let many = rotate_among(10_000);
    for (n, c) in [(1, &one), (10_000, &many)] {
        println!(
            "rotation among {n} lists: {} rows scanned, {} us, peak RSS +{} KiB",
            c.rows_scanned, c.micros, c.peak_rss_growth_kib
        );
    }
    assert!(one.rows_scanned <= 16, "{one:?}");
    assert!(many.rows_scanned <= 16, "{many:?}");
}

/// A store of `lists` lists of 1,024 keys each (more index rows than one migration batch of
/// 10,000), given the schema-2 layout: no `sender_index`, version 2. Returns the index rows the
/// schema-3 store held.
fn schema_2_store(dir: &std::path::Path, lists: u64) -> usize {
    let store = open_with(dir, TestClock::new(1_000));
    for i in 0..lists {
        let senders: Vec<Key32> = (0..1_024).map(|j| key(1_000_000 + i * 512 + j)).collect();
        put(&store, list(key(100 + i), senders, 10));
    }
    let rows = assert_index_exact(&store);
    store.close().unwrap();
    assert_eq!(testing::downgrade_to_schema_2(dir).unwrap(), rows as u64);
    rows
}

fn open_migrated(dir: &std::path::Path, rows: usize) -> Store {
    let store = open_with(dir, TestClock::new(5_000));
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    assert!(store.ops(1).unwrap()[0]
        .detail
        .starts_with(&format!("schema 2 -> {SCHEMA_VERSION} ")));
    assert_eq!(assert_index_exact(&store), rows);
    store
}

/// Opening a schema-2 store builds the index of every stored list (in several batches), and
/// a rotation then finds the lists through it.
#[test]
fn a_schema_2_store_gets_its_sender_index_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let rows = schema_2_store(dir.path(), 12);
    assert!(rows > 10_000, "{rows}");
    let store = open_migrated(dir.path(), rows);
    let (named, new) = (key(1_000_000 + 512), key(9));
    enrol(&store, named, "n");
    store.rebind(named, new).wait().unwrap();
    for t in [key(100), key(101)] {
        let l = store.sender_list(&t).unwrap().unwrap();
        assert!(l.senders.contains(&new) && !l.senders.contains(&named));
    }
    assert_index_exact(&store);
}

#[test]
#[ignore = "child process of a_sender_index_migration_killed_after_its_first_batch_finishes_at_the_next_open"]
fn index_migrate_child() {
    open_child();
}

/// A process killed (abort, like `kill -9`) right after the index build's first batch leaves
/// a store that the next open migrates completely: every row there, none extra.
#[cfg(feature = "failpoints")]
#[test]
fn a_sender_index_migration_killed_after_its_first_batch_finishes_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let rows = schema_2_store(dir.path(), 12);
    open_aborted_at(
        "sender_index::index_migrate_child",
        dir.path(),
        "migrate-after-batch",
    );
    open_migrated(dir.path(), rows).close().unwrap();
}

/// Index rows left behind by an interrupted migration, which a schema-2 relay then did not
/// keep up (here: a stale row naming a key no list names), are not trusted: the next open
/// rebuilds the index from the lists.
#[test]
fn a_rerun_migration_drops_index_rows_no_list_backs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    put(&store, list(key(100), vec![key(3)], 10));
    put(&store, list(key(101), vec![key(4)], 10));
    // key(4) leaves key(101)'s list: its index row goes too.
    put(&store, list(key(101), vec![key(5)], 11));
    assert_eq!(assert_index_exact(&store), 2);
    store.close().unwrap();
    // Fake the layout of a half-migrated store a schema-2 relay wrote to afterwards: version 2,
    // the index as the schema-3 relay left it plus a row for a list that changed since.
    testing::set_schema_version(dir.path(), 2).unwrap();
    testing::put_raw_row(
        dir.path(),
        "sender_index",
        &[key(4), key(101)].concat(),
        &[],
    )
    .unwrap();
    let store = open_with(dir.path(), TestClock::new(2_000));
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    assert_eq!(assert_index_exact(&store), 2);
}

fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A backup written by the schema-2 relay (format 2, twelve partitions; made with
/// `mbx-relay serve` and `relay-tool backup` built at d174dcf: four hosts enrolled, three
/// posted their own lists naming 2, 1 and 3 keys, one item queued) verifies, restores, and the
/// first open builds the index of its lists; a rotation then rewrites the lists naming the key.
#[test]
fn a_format_2_backup_restores_with_its_sender_index_built() {
    let file = fixture("schema2-format2-lists.mbxbak");
    let summary = verify_backup(&file).unwrap();
    assert_eq!((summary.format_version, summary.schema_version), (2, 2));
    assert_eq!(summary.counts.len(), 12);
    let count = |name: &str| summary.counts.iter().find(|(n, _)| n == name).map(|c| c.1);
    assert_eq!(
        (count("sender_lists"), count("sender_index")),
        (Some(3), None)
    );

    let dir = tempfile::tempdir().unwrap();
    let restored = dir.path().join("r");
    restore_backup(&file, &restored).unwrap();
    let store = open_with(&restored, TestClock::new(summary.created_ms + 1_000));
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    assert_eq!(assert_index_exact(&store), 6);
    assert_eq!(check_invariants(&store), 1);

    // The key named by two lists rotates: both lists name the new key instead.
    let (named, _) = named_and_indexed(&store);
    let mut by_sender: std::collections::BTreeMap<String, usize> = Default::default();
    for (s, _) in &named {
        *by_sender.entry(s.clone()).or_default() += 1;
    }
    let twice: Vec<&String> = by_sender
        .iter()
        .filter(|(_, n)| **n == 2)
        .map(|(s, _)| s)
        .collect();
    let old = key_of_hex(twice[0]);
    assert!(store.enrolment(&old).unwrap().is_some());
    let new = key(77);
    store.rebind(old, new).wait().unwrap();
    let (named, _) = named_and_indexed(&store);
    assert_eq!(named.iter().filter(|(s, _)| *s == hex(&new)).count(), 2);
    assert!(named
        .iter()
        .all(|(s, t)| *s != hex(&old) && *t != hex(&old)));
    assert_index_exact(&store);
}

/// The key whose lowercase hex is `h`.
fn key_of_hex(h: &str) -> Key32 {
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// A backup (format 5) carries the lists, not the index: the restore rebuilds the index from
/// them, row for row.
#[test]
fn a_backup_restores_the_sender_index_from_its_lists() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(&dir.path().join("live"), TestClock::new(1_000));
    put(&store, list(key(100), vec![key(3), key(4)], 10));
    put(&store, list(key(101), vec![key(3)], 10));
    let file = dir.path().join("b.mbxbak");
    let mut f = std::fs::File::create(&file).unwrap();
    let s = store.backup_to(&mut f, &mut |_| {}).unwrap();
    assert_eq!(
        (s.format_version, s.schema_version),
        (BACKUP_FORMAT_VERSION, SCHEMA_VERSION)
    );
    let count = |name: &str| s.counts.iter().find(|(n, _)| n == name).map(|c| c.1);
    assert_eq!(
        (count("sender_lists"), count("sender_index")),
        (Some(2), None)
    );
    restore_backup(&file, &dir.path().join("r")).unwrap();
    let restored = open_with(&dir.path().join("r"), TestClock::new(2_000));
    assert_eq!(assert_index_exact(&restored), 3);
}

/// A format-2 file holds only the twelve schema-2 partitions: a record claiming the
/// thirteenth (`sender_index`, id 12; head checksum valid) is damage at that record.
#[test]
fn a_format_2_backup_cannot_name_a_schema_3_partition() {
    let mut b = std::fs::read(fixture("schema2-format2-lists.mbxbak")).unwrap();
    let hlen = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let first = 16 + 4 + hlen + 4;
    assert_eq!((b[first], b[first + 1]), (0x01, 0), "first record: meta");
    b[first + 1] = 12;
    let head_crc = crc32fast::hash(&b[first..first + 10]);
    b[first + 10..first + 14].copy_from_slice(&head_crc.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, &b).unwrap();
    match verify_backup(&bad) {
        Err(BackupError::Damaged { offset, ref why }) => {
            assert_eq!(offset, first as u64);
            assert!(why.contains("unknown partition 12"), "{why}");
        }
        other => panic!("expected damage at the record, got {other:?}"),
    }
}
