//! Local files against other users of the machine (issue 19 item 7), with real processes: under
//! a permissive umask (022) the relay's store directory and every file in it (the storage
//! engine's included) are owner-only, and so are relay-tool's backups and restored stores; a
//! relay key or store directory that other users can reach is refused at start-up with the
//! `chmod` that fixes it; a backup's temporary file is never written through a planted link.
use crate::common;

use common::relay_tool as tool;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use common::{envelope_item, modes, reachable_by_others, Host, Relay, RelayOpts, GENEROUS};

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// The permissive umask most systems start processes with, given to the relay and relay-tool
/// children (the test process's own mask is shared by every test of the binary).
const PERMISSIVE_UMASK: u32 = 0o022;

/// `relay-tool` under [`PERMISSIVE_UMASK`].
fn tool_022(args: &[&str]) -> std::process::Output {
    common::relay_tool_umask(args, PERMISSIVE_UMASK)
}

/// Stops the relay cleanly (SIGTERM: the store is closed, exit code 0).
fn stop(relay: &mut Relay) {
    assert_eq!(relay.terminate(Duration::from_secs(30)), Some(0));
}

fn mode_of(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn store_files_backups_and_restored_stores_are_owner_only_under_a_022_umask() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = Relay::launch(
        RelayOpts::args(GENEROUS)
            .store(&store)
            .umask(PERMISSIVE_UMASK),
    )
    .expect("relay starts");
    let (a, b) = (
        Host::enrolled(&relay, "files-a"),
        Host::enrolled(&relay, "files-b"),
    );
    for _ in 0..50 {
        let r = a.push_one(&relay, &envelope_item(&a, &[&b]));
        assert_eq!(r["status"], "accepted", "{r}");
    }
    stop(&mut relay);
    let all = modes(&store);
    let files = all.iter().filter(|(p, _)| p.is_file()).count();
    assert!(files >= 5, "the engine wrote its files: {files} in {all:?}");
    assert_eq!(
        reachable_by_others(&store),
        vec![],
        "store entries other users can reach"
    );
    assert_eq!(mode_of(&store), 0o700);
    assert_eq!(mode_of(&store.join("relay.key")), 0o600);

    // relay-tool under the same umask: the backup and every file of the restored store.
    let backup = work.path().join("store.bak");
    let out = tool_022(&["backup", "--store-dir", s(&store), s(&backup)]);
    assert!(out.status.success(), "backup: {out:?}");
    assert_eq!(mode_of(&backup), 0o600);
    let restored = work.path().join("restored");
    let out = tool_022(&["restore", "--store-dir", s(&restored), s(&backup)]);
    assert!(out.status.success(), "restore: {out:?}");
    assert!(modes(&restored).iter().filter(|(p, _)| p.is_file()).count() >= 3);
    assert_eq!(
        reachable_by_others(&restored),
        vec![],
        "restored store entries other users can reach"
    );
    // The relay starts on what relay-tool wrote (with its key: restore into a fresh directory
    // has no relay.key to copy).
    let seed = std::fs::read_to_string(store.join("relay.key")).unwrap();
    let relay = Relay::launch(
        RelayOpts::args(GENEROUS)
            .store(&restored)
            .umask(PERMISSIVE_UMASK)
            .env("MBX_RELAY_KEY", seed.trim()),
    )
    .expect("restored store serves");
    relay.assert_alive();
}

#[test]
fn a_key_file_or_store_directory_others_can_reach_is_refused_naming_the_chmod() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = Relay::launch(RelayOpts::default().store(&store)).expect("relay starts");
    stop(&mut relay);
    let key = store.join("relay.key");
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    };

    chmod(&key, 0o644);
    let e = Relay::launch(RelayOpts::default().store(&store))
        .err()
        .expect("a world-readable key is refused");
    assert!(e.contains(&format!("chmod 600 {}", key.display())), "{e}");
    chmod(&key, 0o640);
    let e = Relay::launch(RelayOpts::default().store(&store))
        .err()
        .expect("a group-readable key is refused");
    assert!(e.contains(&format!("chmod 600 {}", key.display())), "{e}");
    chmod(&key, 0o600);

    chmod(&store, 0o755);
    let e = Relay::launch(RelayOpts::default().store(&store))
        .err()
        .expect("a world-readable store directory is refused");
    assert!(e.contains(&format!("chmod 700 {}", store.display())), "{e}");
    assert_eq!(mode_of(&store), 0o755, "the operator's mode is not changed");
    chmod(&store, 0o700);

    // Fixed as the message says: the relay starts with its key.
    let relay = Relay::launch(RelayOpts::default().store(&store)).expect("starts once fixed");
    relay.assert_alive();
}

#[test]
fn a_backup_never_writes_through_a_planted_temporary_file() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = Relay::launch(RelayOpts::default().store(&store)).expect("relay starts");
    stop(&mut relay);

    // Another user (in a shared directory) links FILE.tmp to a file of ours, or to a path the
    // backup would then create for them.
    let shared = work.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let victim = work.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let file = shared.join("relay.bak");
    std::os::unix::fs::symlink(&victim, shared.join("relay.bak.tmp")).unwrap();
    let out = tool(&["backup", "--store-dir", s(&store), s(&file)]);
    assert!(!out.status.success(), "backup through a link: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("relay.bak.tmp"), "names the path: {err}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"keep", "victim untouched");
    assert!(!file.exists());

    let created = work.path().join("created-for-them");
    std::fs::remove_file(shared.join("relay.bak.tmp")).unwrap();
    std::os::unix::fs::symlink(&created, shared.join("relay.bak.tmp")).unwrap();
    let out = tool(&["backup", "--store-dir", s(&store), s(&file)]);
    assert!(
        !out.status.success(),
        "backup through a dangling link: {out:?}"
    );
    assert!(!created.exists(), "a dangling link was followed");

    // A plain file left there is not truncated either.
    std::fs::remove_file(shared.join("relay.bak.tmp")).unwrap();
    std::fs::write(shared.join("relay.bak.tmp"), "theirs").unwrap();
    let out = tool(&["backup", "--store-dir", s(&store), s(&file)]);
    assert!(
        !out.status.success(),
        "backup over an existing tmp: {out:?}"
    );
    assert_eq!(
        std::fs::read(shared.join("relay.bak.tmp")).unwrap(),
        b"theirs"
    );
    // Once the path is free, the backup is made.
    std::fs::remove_file(shared.join("relay.bak.tmp")).unwrap();
    let out = tool(&["backup", "--store-dir", s(&store), s(&file)]);
    assert!(out.status.success(), "backup: {out:?}");
    assert_eq!(mode_of(&file), 0o600);
}
