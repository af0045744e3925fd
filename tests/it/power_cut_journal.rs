//! fjall's removal of old journals and a power cut (issue 26). fjall deletes a journal once every
//! keyspace has flushed past it, with no fsync of the directory, so a cut before the directory's
//! next fsync brings the deleted journal back (powercut's own tests show an unsynced unlink
//! undone at a cut). A child process writes past fjall's 64,000,000-byte journal rotation,
//! flushes (fjall deletes the old journal), deletes the newest keys of that journal and compacts
//! them away (the tables' highest seqno falls below the deleted journal's), and is killed; the
//! deleted journal is then put back under its name, as the cut would (a hard link kept to its
//! inode: the same bytes, fsync'd by fjall when it sealed the journal). Recovery must resurrect
//! none of the deleted keys and lose none of the others. On an ordinary directory: 72 MB
//! through powercut took minutes.

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use fjall::{Database, KeyspaceCreateOptions, PersistMode};

/// Where the child keeps its database (set only for the child).
const CHILD_DIR: &str = "MBX_TEST_JOURNAL_DIR";
/// 1,100 values of 64 KiB: 72 MB of journal, past fjall's rotation at 64,000,000 bytes.
const KEYS: usize = 1_100;
const VALUE: usize = 64 * 1024;
/// The newest keys of the first journal, deleted in the second and compacted away.
const DELETED: std::ops::Range<usize> = 1_000..KEYS;

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// Incompressible bytes (fjall compresses its journal), the same for the same `i`.
fn value(i: usize) -> Vec<u8> {
    let mut x = (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..VALUE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The journal files in the database directory.
fn journals(db: &Path) -> BTreeSet<String> {
    std::fs::read_dir(db)
        .expect("the database directory")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".jnl"))
        .collect()
}

fn open(dir: &Path) -> (Database, fjall::Keyspace) {
    let db = Database::builder(dir)
        .worker_threads(1)
        .open()
        .expect("fjall opens");
    let ks = db
        .keyspace("k", KeyspaceCreateOptions::default)
        .expect("keyspace");
    (db, ks)
}

#[test]
#[ignore = "child process of a_journal_fjall_deleted_comes_back_at_a_cut_and_recovery_resurrects_nothing"]
fn journal_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let dir = Path::new(&dir);
    let (db, ks) = open(dir);
    for i in 0..KEYS {
        ks.insert(key(i), value(i)).unwrap();
    }
    db.persist(PersistMode::SyncAll).unwrap();
    // What the cut would bring back: the inode of the journal about to be deleted.
    std::fs::hard_link(dir.join("0.jnl"), dir.with_extension("kept-0.jnl")).unwrap();
    // The flush rotates the journal (over 64,000,000 bytes) and deletes the flushed one.
    ks.rotate_memtable_and_wait().unwrap();
    for i in DELETED {
        ks.remove(key(i)).unwrap();
    }
    db.persist(PersistMode::SyncAll).unwrap();
    ks.rotate_memtable_and_wait().unwrap();
    ks.major_compact().unwrap();
    println!(
        "ready {}",
        journals(dir).into_iter().collect::<Vec<_>>().join(",")
    );
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn a_journal_fjall_deleted_comes_back_at_a_cut_and_recovery_resurrects_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "power_cut_journal::journal_child",
            "--ignored",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(CHILD_DIR, &dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn the child");
    let ready = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // libtest prints "test NAME ... " before the line, on the same line.
        .find_map(|l| l.split_once("ready ").map(|(_, j)| j.to_string()));
    let _ = child.kill();
    let _ = child.wait();
    let left = ready.expect("the child wrote its database");
    assert!(
        !journals(&dir).contains("0.jnl"),
        "fjall did not delete the first journal ({left}): the check below would prove nothing"
    );
    // The cut: the unlink was never made durable, the journal is back under its name.
    std::fs::rename(dir.with_extension("kept-0.jnl"), dir.join("0.jnl")).unwrap();
    eprintln!(
        "journals left by fjall: {left}; after the cut: {:?}",
        journals(&dir)
    );

    for _ in 0..2 {
        let (db, ks) = open(&dir);
        for i in 0..KEYS {
            let got = ks.get(key(i)).unwrap();
            if DELETED.contains(&i) {
                assert!(
                    got.is_none(),
                    "deleted key {i} came back from the old journal"
                );
            } else {
                assert!(
                    got.is_some_and(|v| *v == *value(i)),
                    "key {i} lost or changed"
                );
            }
        }
        assert_eq!(ks.iter().count(), KEYS - DELETED.len());
        drop((ks, db));
    }
}
