//! Backup while writers run, verify, restore (new epoch, ops entry, seq floor), and refusal of
//! damaged files without touching the restore target.

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use relay_keyspace::*;
use sha2::Digest;

fn small_store(dir: &std::path::Path) -> Store {
    let store = open_with(dir, TestClock::new(1_000));
    enrol(&store, key(2), "t");
    for i in 0..5 {
        insert(
            &store,
            key(1),
            &format!("i{i}"),
            &[(key(2), format!("wire {i}").as_bytes())],
        );
    }
    store
}

fn write_backup(store: &Store, path: &std::path::Path) -> BackupSummary {
    let mut f = std::fs::File::create(path).unwrap();
    let mut last = 0;
    let s = store.backup_to(&mut f, &mut |n| last = n).unwrap();
    assert_eq!(last, s.file_bytes);
    assert_eq!(std::fs::metadata(path).unwrap().len(), s.file_bytes);
    s
}

#[test]
fn backup_while_writers_run_restores_consistently() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000_000);
    let store = open_with(&dir.path().join("live"), clock.clone());
    let targets: Vec<Key32> = (10..14).map(key).collect();
    for (i, t) in targets.iter().enumerate() {
        enrol(&store, *t, &format!("t{i}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let acked_before = Arc::new(std::sync::Mutex::new(Vec::new()));
    let writers: Vec<_> = (0..4u64)
        .map(|w| {
            let (store, stop, targets, acked) = (
                store.clone(),
                stop.clone(),
                targets.clone(),
                acked_before.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::SeqCst) && n < 2_000 {
                    let t = targets[(n % 4) as usize];
                    let id = format!("w{w}-{n}");
                    let out = store
                        .insert(req(item(key(w), &id, &[(t, id.as_bytes())]), big_quotas()))
                        .wait()
                        .unwrap();
                    acked
                        .lock()
                        .unwrap()
                        .push((t, key(w), id, stored_seqs(&out)[0].seq));
                    if n % 7 == 3 {
                        let c = store.cursor(&t).unwrap();
                        store.ack(&t, c.head_seq.saturating_sub(3)).wait().unwrap();
                    }
                    n += 1;
                }
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(150));
    let confirmed_before: Vec<_> = acked_before.lock().unwrap().clone();
    let file = dir.path().join("b.mbxbak");
    let summary = write_backup(&store, &file);
    std::thread::sleep(std::time::Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    for w in writers {
        w.join().unwrap();
    }
    assert!(
        confirmed_before.len() > 10,
        "writers made no progress before the backup"
    );
    let verified = verify_backup(&file).unwrap();
    assert_eq!(verified, summary);
    assert_eq!(
        summary.counts.len(),
        relay_keyspace::backup::RecordKind::ALL.len(),
        "format 5: counts per record kind"
    );

    let restored_dir = dir.path().join("restored");
    let (rs, epoch) = restore_backup(&file, &restored_dir).unwrap();
    assert_eq!(rs, summary);
    let live_epoch = store.meta().unwrap().epoch;
    let handed: u64 = targets
        .iter()
        .map(|t| store.cursor(t).unwrap().head_seq)
        .max()
        .unwrap();
    store.close().unwrap();
    clock.set(handed + 1); // the wall clock has moved past every seq handed out before
    let r = open_with(&restored_dir, clock.clone());
    let m = r.meta().unwrap();
    assert_eq!(m.epoch, epoch);
    assert_ne!(m.epoch, live_epoch, "a restore must rotate the epoch");
    assert_eq!(r.ops(1).unwrap()[0].kind, "restore");
    let queued = check_invariants(&r);
    assert!(queued > 0);
    // Every insert confirmed before the backup started is there: queued, or acked (cursor past it).
    for (t, s, id, seq) in &confirmed_before {
        let row = r.dedup(s, id, t).unwrap();
        assert_eq!(
            row.map(|x| x.seq),
            Some(*seq),
            "confirmed insert {id} missing from the backup"
        );
    }
    // The seq floor: new items land above every seq the old store handed out.
    for t in &targets {
        let out = r
            .insert(req(item(key(50), "after", &[(*t, b"x")]), big_quotas()))
            .wait()
            .unwrap();
        assert!(
            stored_seqs(&out)[0].seq > handed,
            "restored store reused a seq"
        );
    }
}

#[test]
fn every_flipped_byte_and_truncation_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = small_store(&dir.path().join("s"));
    let file = dir.path().join("b");
    write_backup(&store, &file);
    let good = std::fs::read(&file).unwrap();
    let bad = dir.path().join("bad");
    let target = dir.path().join("restore-here");
    // Every byte of the header, the first records and the trailer; every third byte between.
    let probe = |i: usize| i < 300 || i + 200 > good.len() || i.is_multiple_of(3);
    for i in (0..good.len()).filter(|i| probe(*i)) {
        let mut b = good.clone();
        b[i] ^= 0x01;
        std::fs::write(&bad, &b).unwrap();
        match verify_backup(&bad) {
            Err(BackupError::BadMagic) if i < 8 => {}
            Err(BackupError::Damaged { offset, .. }) if i >= 8 => {
                assert!(offset <= i as u64, "damage at {i} reported at {offset}");
            }
            other => panic!("flip at {i}: {other:?}"),
        }
    }
    for len in (0..good.len()).filter(|i| probe(*i)) {
        std::fs::write(&bad, &good[..len]).unwrap();
        match verify_backup(&bad) {
            Err(BackupError::BadMagic) if len == 0 => {}
            Err(BackupError::Truncated { offset }) if len > 0 => assert_eq!(offset, len as u64),
            other => panic!("truncated to {len}: {other:?}"),
        }
        if len % 97 == 0 {
            assert!(restore_backup(&bad, &target).is_err());
            assert!(
                !target.exists(),
                "restore touched the target for a bad file"
            );
        }
    }
    // Restore refuses an existing target and leaves it alone.
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("keep"), b"mine").unwrap();
    assert!(restore_backup(&file, &target).is_err());
    assert_eq!(std::fs::read(target.join("keep")).unwrap(), b"mine");
}

#[test]
fn wrong_magic_newer_format_count_mismatch_and_huge_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let store = small_store(&dir.path().join("s"));
    let file = dir.path().join("b");
    write_backup(&store, &file);
    let good = std::fs::read(&file).unwrap();
    let bad = dir.path().join("bad");
    let target = dir.path().join("t");
    let check = |bytes: &[u8]| {
        std::fs::write(&bad, bytes).unwrap();
        let e = verify_backup(&bad).expect_err("a bad file verified");
        assert!(restore_backup(&bad, &target).is_err());
        assert!(!target.exists());
        e
    };
    // Another kind of file.
    let e = check(b"SQLite format 3\0 and more bytes follow here");
    assert!(matches!(e, BackupError::BadMagic), "{e:?}");
    assert!(e.to_string().contains("magic"));
    // A newer format (valid checksum over the new version).
    let mut b = good.clone();
    b[8..12].copy_from_slice(&7u32.to_le_bytes());
    let crc = crc32fast::hash(&b[..12]);
    b[12..16].copy_from_slice(&crc.to_le_bytes());
    let e = check(&b);
    assert!(
        matches!(
            e,
            BackupError::NewerFormat {
                found: 7,
                supported: BACKUP_FORMAT_VERSION
            }
        ),
        "{e:?}"
    );
    // Trailer counts that disagree with the records, with a valid whole-file checksum.
    let mut b = good.clone();
    let n = b.len();
    let counts_end = n - 32;
    let kinds = relay_keyspace::backup::RecordKind::ALL.len();
    let items_count_at =
        counts_end - 8 * kinds + 8 * relay_keyspace::backup::RecordKind::Item as usize;
    b[items_count_at] ^= 0x02;
    let sum: [u8; 32] = sha2::Sha256::digest(&b[..counts_end]).into();
    b[counts_end..].copy_from_slice(&sum);
    let e = check(&b);
    assert!(
        matches!(e, BackupError::CountMismatch { ref partition, .. } if partition == "items"),
        "{e:?}"
    );
    // A record claiming 4 GiB: refused without allocating it (format 5's frame head: tag,
    // kind, length, then its crc).
    let mut b = good.clone();
    let hlen = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let first_record = 16 + 4 + hlen + 4;
    assert_eq!(b[first_record], 0x01);
    b[first_record + 2..first_record + 6].copy_from_slice(&u32::MAX.to_le_bytes());
    let head_crc = crc32fast::hash(&b[first_record..first_record + 6]);
    b[first_record + 6..first_record + 10].copy_from_slice(&head_crc.to_le_bytes());
    let e = check(&b);
    assert!(
        matches!(e, BackupError::Damaged { offset, .. } if offset == first_record as u64),
        "{e:?}"
    );
    // Bytes after the trailer.
    let mut b = good.clone();
    b.push(0);
    assert!(matches!(check(&b), BackupError::Damaged { .. }));
}

/// A backup written by the schema-1 relay (backup format 1, eleven partitions; made by
/// `relay-tool backup` at commit 839d0e3 after a bench pushed 30 items from 2 senders to 3
/// targets) verifies, restores and migrates: the dedup prune index ends up in
/// `dedup_expiry`, and the restored rows deduplicate and prune as their own would.
#[test]
fn a_format_1_backup_of_a_schema_1_store_restores_and_migrates() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schema1-format1.mbxbak");
    let summary = verify_backup(&file).unwrap();
    assert_eq!((summary.format_version, summary.schema_version), (1, 1));
    let count = |name: &str| summary.counts.iter().find(|(n, _)| n == name).map(|c| c.1);
    assert_eq!(summary.counts.len(), 11);
    assert_eq!((count("items"), count("dedup")), (Some(30), Some(30)));
    assert_eq!(count("expiry"), Some(60), "item and dedup index rows");
    assert_eq!(count("dedup_expiry"), None);

    let dir = tempfile::tempdir().unwrap();
    let restored = dir.path().join("r");
    restore_backup(&file, &restored).unwrap();
    let clock = TestClock::new(summary.created_ms + 1_000);
    let store = open_with(&restored, clock.clone());
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    let in_part = |p: &str| rows_of(&store, p).len();
    // Schema 5: the dedup rows of queued items have no prune-index row until their ack.
    assert_eq!((in_part("expiry"), in_part("dedup_expiry")), (30, 0));
    assert_eq!(check_invariants(&store), 30);

    // Ack every queue; then every dedup row is past a far horizon and no longer queued.
    let targets: Vec<Key32> = store
        .stats()
        .unwrap()
        .top_targets
        .iter()
        .map(|t| t.0)
        .collect();
    assert_eq!(targets.len(), 3);
    for t in &targets {
        let head = store.cursor(t).unwrap().head_seq;
        store.ack(t, head).wait().unwrap();
    }
    let r = store
        .sweep(
            clock.now_ms(),
            u64::MAX,
            big_quotas(),
            u64::MAX / 4,
            1_000,
            Box::new(|_: &ExpiredItem, _| None),
        )
        .wait()
        .unwrap();
    assert_eq!((r.expired, r.dedup_pruned), (0, 30), "{r:?}");
    assert_eq!(store.stats().unwrap().dedup_rows, 0);
}

/// A format-1 file holds only the eleven schema-1 partitions: a record claiming the twelfth
/// (`dedup_expiry`, id 11; head checksum valid) is damage at that record, not data.
#[test]
fn a_format_1_backup_cannot_name_a_schema_2_partition() {
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/schema1-format1.mbxbak");
    let mut b = std::fs::read(fixture).unwrap();
    let hlen = u32::from_le_bytes(b[16..20].try_into().unwrap()) as usize;
    let first = 16 + 4 + hlen + 4;
    assert_eq!((b[first], b[first + 1]), (0x01, 0), "first record: meta");
    b[first + 1] = 11;
    let head_crc = crc32fast::hash(&b[first..first + 10]);
    b[first + 10..first + 14].copy_from_slice(&head_crc.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad");
    std::fs::write(&bad, &b).unwrap();
    match verify_backup(&bad) {
        Err(BackupError::Damaged { offset, ref why }) => {
            assert_eq!(offset, first as u64);
            assert!(why.contains("unknown partition 11"), "{why}");
        }
        other => panic!("expected damage at the record, got {other:?}"),
    }
}
