//! The fuzz seed corpora (fuzz/src/seeds.rs) are what they claim: a real backup that verifies,
//! and valid inputs the relay accepts for the modes meant to start on accepted paths. With
//! `MBX_WRITE_FUZZ_SEEDS=1` this also rewrites `fuzz/corpus/` (how the committed seeds were made
//! without a second, non-fuzzing build of the fuzz crate).
#[allow(dead_code)]
#[allow(
    unreachable_pub,
    reason = "the fuzz crate's root: its `pub` is that crate's API"
)]
#[path = "../../fuzz/src/lib.rs"]
mod mbx_relay_fuzz;

use std::path::Path;

use relay_keyspace::verify_backup;
use relay_wire::envelope::check_envelope_wire;
use serde_json::Value;

fn seed(root: &Path, target: &str, name: &str) -> Vec<u8> {
    std::fs::read(root.join(target).join(name)).unwrap_or_else(|e| panic!("{target}/{name}: {e}"))
}

#[test]
fn seeds_include_a_verifiable_backup_and_valid_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let backup = mbx_relay_fuzz::seeds::write_all(dir.path());
    let root = dir.path();

    // The backup seed (mode byte + file) verifies and holds the state the fixture made.
    let bak = seed(root, "backup", "seed-0-real-backup");
    assert_eq!(&bak[1..], &backup[..]);
    let file = dir.path().join("seed.bak");
    std::fs::write(&file, &backup).unwrap();
    let summary = verify_backup(&file).expect("the backup seed verifies");
    let records: u64 = summary.counts.iter().map(|(_, n)| n).sum();
    assert!(
        records >= 8,
        "backup holds enrolments, ads, lists and items: {summary:?}"
    );

    // The envelope seeds pass the relay's wire check.
    let env = seed(root, "shapes", "seed-00-envelope");
    let id = serde_json::from_slice::<Value>(&env[1..]).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    check_envelope_wire(&env[1..], &id).expect("envelope seed is valid");
    let body = seed(root, "bodies", "seed-10-mode10");
    assert_eq!(body[0], 10);
    check_envelope_wire(&body[1..], &id).expect("push seed wire is valid");

    // Every target has seeds.
    for t in ["bodies", "hop", "shapes", "canonical", "backup"] {
        let n = std::fs::read_dir(root.join(t)).unwrap().count();
        assert!(n >= 3, "{t}: {n} seeds");
    }

    if std::env::var("MBX_WRITE_FUZZ_SEEDS").as_deref() == Ok("1") {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
        mbx_relay_fuzz::seeds::write_all(&corpus);
    }
}
