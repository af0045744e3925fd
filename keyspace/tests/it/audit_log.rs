//! The relay log as an audit trail: every mutation that is not mail is recorded, each entry
//! hash-chained to the one before; `verify_log` (and backup verification) names the first entry
//! that an edit, a deletion or a reordering broke; the log is bounded by age and by count with
//! the chain kept from a checkpoint; the schema 3 -> 4 migration chains an old log in one step
//! (safe to kill) and old backups restore with their log chained.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::*;
use relay_keyspace::*;

const DAY: u64 = 86_400_000;

fn open_keeping(dir: &Path, clock: Arc<TestClock>, keep: LogRetention) -> Store {
    Store::open(
        dir,
        OpenOptions {
            clock,
            log_retention: keep,
            ..OpenOptions::default()
        },
    )
    .expect("open store")
}

fn intact(store: &Store) -> (u64, Option<LogCheckpoint>) {
    match store.verify_log().unwrap() {
        LogVerdict::Intact {
            entries,
            checkpoint,
        } => (entries, checkpoint),
        other => panic!("log does not verify: {other:?}"),
    }
}

fn broken(store: &Store) -> (u64, String) {
    match store.verify_log().unwrap() {
        LogVerdict::Broken { seq, why } => (seq, why),
        other => panic!("tampering not detected: {other:?}"),
    }
}

fn kinds(store: &Store) -> Vec<String> {
    let mut k: Vec<String> = store
        .ops(1_000)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    k.reverse();
    k
}

/// A store with a few logged operations of each kind the keyspace records itself; closed.
fn logged_store(dir: &Path) -> u64 {
    let store = open_with(dir, TestClock::new(1_000));
    enrol(&store, key(1), "alpha");
    enrol(&store, key(2), "beta");
    enrol(&store, key(1), "alpha"); // unchanged: not logged
    let renamed = EnrolRequest {
        host_name: "alpha-2".into(),
        ..enrol_req(key(1), "alpha", None, 0)
    };
    store.enrol(renamed).wait().unwrap();
    store.rebind(key(2), key(3)).wait().unwrap();
    store.rotate_epoch("test").wait().unwrap();
    store.log_op("backup", "offline backup").wait().unwrap();
    let (n, _) = intact(&store);
    store.close().unwrap();
    n
}

#[test]
fn enrol_re_enrol_with_a_change_rotation_epoch_rotation_and_backup_are_logged_and_chained() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(logged_store(dir.path()), 6);
    let store = open_with(dir.path(), TestClock::new(2_000));
    assert_eq!(
        kinds(&store),
        [
            "enrol",
            "enrol",
            "re-enrol",
            "rotate-key",
            "epoch-rotate",
            "backup"
        ]
    );
    let log = store.ops(10).unwrap();
    let re = &log[3];
    assert!(
        re.detail.contains("name \"alpha\" -> \"alpha-2\""),
        "{}",
        re.detail
    );
    assert!(
        re.detail.starts_with(&fingerprint(&key(1))),
        "{}",
        re.detail
    );
    assert!(
        log[5].detail.contains("name \"alpha\""),
        "{}",
        log[5].detail
    );
    // Each stored hash is SHA-256(previous hash ++ canonical bytes).
    use sha2::Digest;
    let mut prev = [0u8; 32];
    for e in log.iter().rev() {
        let mut c = Vec::new();
        c.extend_from_slice(&e.seq.to_be_bytes());
        c.extend_from_slice(&e.at_ms.to_be_bytes());
        for s in [&e.kind, &e.detail] {
            c.extend_from_slice(&(s.len() as u32).to_be_bytes());
            c.extend_from_slice(s.as_bytes());
        }
        let h: [u8; 32] = sha2::Sha256::new()
            .chain_update(prev)
            .chain_update(&c)
            .finalize()
            .into();
        assert_eq!(h, e.hash, "entry {}", e.seq);
        prev = h;
    }
}

/// Rewrite one stored entry's detail (keeping its old hash), as a hand edit of the store would.
fn edit_entry(dir: &Path, seq: u64) {
    let rows = testing::raw_rows(dir, "ops").unwrap();
    let (k, v) = rows
        .iter()
        .find(|(k, _)| k[..] == seq.to_be_bytes())
        .unwrap();
    // postcard: at_ms varint, kind, detail, hash. Flip one byte of the detail text.
    let mut v = v.clone();
    let at = v.len() - 32 - 3;
    v[at] ^= 0x20;
    testing::put_raw_row(dir, "ops", k, &v).unwrap();
}

#[test]
fn verify_names_an_edited_entry() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path());
    edit_entry(dir.path(), 2);
    let store = open_with(dir.path(), TestClock::new(2_000));
    let (seq, why) = broken(&store);
    assert_eq!(seq, 2, "{why}");
    assert!(why.contains("does not match its hash"), "{why}");
}

#[test]
fn verify_names_where_an_entry_was_deleted() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path());
    testing::remove_raw_row(dir.path(), "ops", &3u64.to_be_bytes()).unwrap();
    let store = open_with(dir.path(), TestClock::new(2_000));
    let (seq, why) = broken(&store);
    assert_eq!(seq, 3, "{why}");
    assert!(why.contains("entry 3 is missing"), "{why}");
}

#[test]
fn verify_names_a_deleted_newest_entry_and_a_deleted_oldest_one() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path());
    testing::remove_raw_row(dir.path(), "ops", &5u64.to_be_bytes()).unwrap();
    let store = open_with(dir.path(), TestClock::new(2_000));
    let (seq, why) = broken(&store);
    assert_eq!(seq, 5, "{why}");
    store.close().unwrap();

    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path());
    testing::remove_raw_row(dir.path(), "ops", &0u64.to_be_bytes()).unwrap();
    let store = open_with(dir.path(), TestClock::new(2_000));
    assert_eq!(broken(&store).0, 0);
}

#[test]
fn verify_names_the_first_of_two_reordered_entries() {
    let dir = tempfile::tempdir().unwrap();
    logged_store(dir.path());
    let rows = testing::raw_rows(dir.path(), "ops").unwrap();
    let (k1, v1) = &rows[1];
    let (k4, v4) = &rows[4];
    testing::put_raw_row(dir.path(), "ops", k1, v4).unwrap();
    testing::put_raw_row(dir.path(), "ops", k4, v1).unwrap();
    let store = open_with(dir.path(), TestClock::new(2_000));
    let (seq, why) = broken(&store);
    assert_eq!(seq, 1, "{why}");
}

/// Entries older than the retention go as new ones arrive; the chain then verifies from the
/// checkpoint (the last dropped entry), and keeps doing so as the log grows.
#[test]
fn age_retention_drops_old_entries_and_verify_passes_from_the_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let keep = LogRetention {
        max_age_ms: 10 * DAY,
        max_entries: 1_000,
    };
    let store = open_keeping(dir.path(), clock.clone(), keep);
    for i in 0..20 {
        store.log_op("old", &format!("entry {i}")).wait().unwrap();
    }
    clock.advance(5 * DAY);
    for i in 0..5 {
        store.log_op("mid", &format!("entry {i}")).wait().unwrap();
    }
    assert_eq!(intact(&store), (25, None));
    clock.advance(6 * DAY); // the first 20 are now 11 days old
    store.log_op("new", "entry").wait().unwrap();
    let log = store.ops(1_000).unwrap();
    assert_eq!(log.len(), 6, "{log:?}");
    assert!(log.iter().all(|e| e.kind != "old"));
    let (entries, cp) = intact(&store);
    assert_eq!(entries, 6);
    let cp = cp.expect("a checkpoint");
    assert_eq!(cp.seq, 19, "the last dropped entry");
    store.close().unwrap();
    let store = open_keeping(dir.path(), clock.clone(), keep);
    assert_eq!(intact(&store).0, 6);
    // A tampered checkpoint breaks the chain at the first kept entry.
    store.close().unwrap();
    testing::put_raw_row(
        dir.path(),
        "meta",
        b"ops_checkpoint",
        &[&[19u8][..], &[7u8; 32][..]].concat(),
    )
    .unwrap();
    let store = open_keeping(dir.path(), clock, keep);
    assert_eq!(broken(&store).0, 20);
}

/// A flood of first enrolments (each one logged) never holds more than the enrolment budget
/// (half the cap, `relay_store::rules::log::enrolment_budget`); the oldest go, whatever their age,
/// and the chain verifies from the checkpoint.
#[test]
fn the_count_cap_holds_under_an_enrolment_flood() {
    let dir = tempfile::tempdir().unwrap();
    let keep = LogRetention {
        max_age_ms: 400 * DAY,
        max_entries: 100,
    };
    let store = open_keeping(dir.path(), TestClock::new(1_000), keep);
    let pending: Vec<_> = (0..1_000)
        .map(|i| store.enrol(enrol_req(key(10_000 + i), &format!("h{i}"), None, 0)))
        .collect();
    for p in pending {
        assert_eq!(p.wait().unwrap(), EnrolOutcome::Enrolled);
    }
    let log = store.ops(1_000).unwrap();
    assert_eq!(log.len(), 50);
    assert!(log.iter().all(|e| e.kind == "enrol"));
    assert_eq!((log[0].seq, log[49].seq), (999, 950));
    let (entries, cp) = intact(&store);
    assert_eq!((entries, cp.map(|c| c.seq)), (50, Some(949)));
    // The partition itself holds no more than the budget.
    store.close().unwrap();
    assert_eq!(testing::raw_rows(dir.path(), "ops").unwrap().len(), 50);
}

/// A store written before the enrolment budget has no count of its log's enrolment entries:
/// the open counts them, so the budget holds from the first append (without the count, the
/// five enrolments below would all be logged beside the ten before them).
#[test]
fn a_store_without_its_enrolment_entry_count_counts_them_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let keep = LogRetention {
        max_age_ms: 400 * DAY,
        max_entries: 20,
    };
    let store = open_keeping(dir.path(), TestClock::new(1_000), keep);
    for i in 0..10 {
        let out = store.enrol(enrol_req(key(20_000 + i), &format!("h{i}"), None, 0));
        assert_eq!(out.wait().unwrap(), EnrolOutcome::Enrolled);
    }
    store.close().unwrap();
    testing::remove_raw_row(dir.path(), "meta", b"ops_enrol_held").unwrap();
    let store = open_keeping(dir.path(), TestClock::new(2_000), keep);
    for i in 10..15 {
        let out = store.enrol(enrol_req(key(20_000 + i), &format!("h{i}"), None, 0));
        assert_eq!(out.wait().unwrap(), EnrolOutcome::Enrolled);
    }
    let log = store.ops(1_000).unwrap();
    assert_eq!(log.len(), 10, "{log:?}");
    assert_eq!((log[0].seq, log[9].seq), (14, 5));
    assert_eq!(intact(&store).0, 10);
}

/// A schema-3 store (entries without hashes) gets its log chained at open, in order, with the
/// migration logged on the chain.
#[test]
fn a_schema_3_log_is_chained_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let n = logged_store(dir.path());
    assert_eq!(testing::downgrade_to_schema_3(dir.path()).unwrap(), n);
    let store = open_with(dir.path(), TestClock::new(5_000));
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    assert_eq!(intact(&store), (n + 1, None));
    let newest = &store.ops(1).unwrap()[0];
    assert_eq!(newest.kind, "migrate");
    assert_eq!(
        newest.detail,
        format!("schema 3 -> {SCHEMA_VERSION} (relay log chained: {n} earlier entries)")
    );
}

/// A schema-3 log whose oldest entries were dropped (it kept the newest 1,000) chains from a
/// checkpoint just before its first kept entry.
#[test]
fn a_schema_3_log_missing_its_oldest_entries_chains_from_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    for i in 0..10 {
        store.log_op("test", &format!("entry {i}")).wait().unwrap();
    }
    store.close().unwrap();
    testing::downgrade_to_schema_3(dir.path()).unwrap();
    for seq in 0..4u64 {
        testing::remove_raw_row(dir.path(), "ops", &seq.to_be_bytes()).unwrap();
    }
    let store = open_with(dir.path(), TestClock::new(2_000));
    let (entries, cp) = intact(&store);
    assert_eq!(entries, 7);
    assert_eq!(
        cp,
        Some(LogCheckpoint {
            seq: 3,
            hash: [0; 32]
        })
    );
}

#[test]
#[ignore = "child process of a_log_chain_migration_killed_before_its_batch_finishes_at_the_next_open"]
fn chain_migrate_child() {
    open_child();
}

/// A process killed (abort, like `kill -9`) while migrating to schema 4, just before the batch
/// that chains the log, leaves the schema-3 store as it was; the next open chains it fully.
#[cfg(feature = "failpoints")]
#[test]
fn a_log_chain_migration_killed_before_its_batch_finishes_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let n = logged_store(dir.path());
    testing::downgrade_to_schema_3(dir.path()).unwrap();
    open_aborted_at(
        "audit_log::chain_migrate_child",
        dir.path(),
        "migrate-before-last-batch",
    );
    let store = open_with(dir.path(), TestClock::new(5_000));
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    assert_eq!(intact(&store), (n + 1, None));
    assert_eq!(
        kinds(&store).iter().filter(|k| *k == "migrate").count(),
        1,
        "the migration is logged once"
    );
}

fn backup(store: &Store, file: &Path) -> BackupSummary {
    let mut f = std::fs::File::create(file).unwrap();
    store.backup_to(&mut f, &mut |_| {}).unwrap()
}

/// A backup carries the log; verifying the file recomputes its chain (and catches a tampered
/// one); the restored store's log goes on from it with the restore entry.
#[test]
fn backups_carry_the_chained_log_and_verify_checks_it() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let n = logged_store(&live);
    let store = open_with(&live, TestClock::new(2_000));
    let file = dir.path().join("b.mbxbak");
    let s = backup(&store, &file);
    assert_eq!(
        s.log,
        LogVerdict::Intact {
            entries: n,
            checkpoint: None
        }
    );
    assert_eq!(verify_backup(&file).unwrap().log, s.log);
    restore_backup(&file, &dir.path().join("r")).unwrap();
    let restored = open_with(&dir.path().join("r"), TestClock::new(3_000));
    // Restore logs at the wall clock, which puts this test's entries (dated 1970) beyond the
    // 400-day retention: they are dropped and the chain goes on from the last of them.
    let (entries, cp) = intact(&restored);
    assert_eq!((entries, cp.map(|c| c.seq)), (1, Some(n - 1)));
    assert_eq!(restored.ops(1).unwrap()[0].kind, "restore");
    store.close().unwrap();

    // The same store with one entry edited: the backup file is sound, its log is not.
    edit_entry(&live, 4);
    let store = open_with(&live, TestClock::new(2_000));
    let tampered = dir.path().join("t.mbxbak");
    backup(&store, &tampered);
    match verify_backup(&tampered).unwrap().log {
        LogVerdict::Broken { seq, .. } => assert_eq!(seq, 4),
        other => panic!("{other:?}"),
    }
}

fn fixture(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Backups of formats 1 and 2 (schemas 1 and 2: unchained logs) verify as unchained, restore,
/// and come back with their log chained, the migration and the restore logged on it.
#[test]
fn old_backups_restore_with_their_log_chained() {
    for name in ["schema1-format1.mbxbak", "schema2-format2-lists.mbxbak"] {
        let file = fixture(name);
        let summary = verify_backup(&file).unwrap();
        assert_eq!(summary.log, LogVerdict::Unchained, "{name}");
        let old_entries = summary
            .counts
            .iter()
            .find(|(p, _)| p == "ops")
            .map_or(0, |c| c.1);
        let dir = tempfile::tempdir().unwrap();
        let restored = dir.path().join("r");
        restore_backup(&file, &restored).unwrap();
        let store = open_with(&restored, TestClock::new(summary.created_ms + 1_000));
        assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
        let (entries, _) = intact(&store);
        assert_eq!(entries, old_entries + 2, "{name}");
        let k = kinds(&store);
        assert_eq!(k[k.len() - 2..], ["migrate", "restore"], "{name}");
    }
}

/// A format-3 backup (a schema-3 store: entries without hashes) verifies as unchained,
/// restores, and comes back with its log chained: the old entries, then migrate and restore.
#[test]
fn a_format_3_backup_restores_with_its_log_chained() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let n = logged_store(&live);
    testing::downgrade_to_schema_3(&live).unwrap();
    let file = dir.path().join("f3.mbxbak");
    let mut f = std::fs::File::create(&file).unwrap();
    testing::backup_closed_store(&live, 3, &mut f).unwrap();
    drop(f);
    let summary = verify_backup(&file).unwrap();
    assert_eq!((summary.format_version, summary.schema_version), (3, 3));
    assert_eq!(summary.log, LogVerdict::Unchained);
    let restored = dir.path().join("r");
    restore_backup(&file, &restored).unwrap();
    let store = open_with(&restored, TestClock::new(5_000));
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    // The migration chains the old entries, then its own (wall-clock) entry drops them by age
    // (this test's entries are dated 1970): the chain goes on from the last of them.
    let (entries, cp) = intact(&store);
    let log = store.ops(10).unwrap();
    let kinds: Vec<&str> = log.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["restore", "migrate"]);
    assert!(log[1]
        .detail
        .ends_with(&format!("chained: {n} earlier entries)")));
    assert_eq!((entries, cp.map(|c| c.seq)), (2, Some(n - 1)));
}
