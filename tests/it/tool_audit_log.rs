//! The relay log as an audit trail, end to end: a real `mbx-relay serve` records enrolments,
//! a key rotation and backups on a hash-chained log; `relay-tool log --verify` recomputes the chain online
//! (admin socket) and offline, and names the first entry that an edit of the store broke
//! (exit 3); `relay-tool verify FILE` checks the chain a backup carries.

use crate::common;

use common::relay_tool;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::{rotation, Host, Relay, RelayOpts, GENEROUS};

/// Run `relay-tool` and require exit code `code`; returns (stdout, stderr).
fn tool(args: &[&str], code: i32) -> (String, String) {
    let out: Output = relay_tool(args);
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(
        out.status.code(),
        Some(code),
        "relay-tool {args:?}\nstdout:\n{so}\nstderr:\n{se}"
    );
    (so, se)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Flip one character of the detail text of ops entry `seq` in a stopped store, keeping its hash.
fn edit_entry(store: &Path, seq: u64) {
    let rows = relay_keyspace::testing::raw_rows(store, "ops").unwrap();
    let (k, v) = rows
        .iter()
        .find(|(k, _)| k[..] == seq.to_be_bytes())
        .expect("entry present");
    let mut v = v.clone();
    let at = v.len() - 32 - 2; // inside the detail, just before the 32-byte hash
    v[at] ^= 0x01;
    relay_keyspace::testing::put_raw_row(store, "ops", k, &v).unwrap();
}

#[test]
fn log_verify_online_and_offline_names_an_edited_entry_and_verify_checks_a_backups_chain() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut args = GENEROUS.to_vec();
    args.extend(["--log-retention", "30d"]);
    let mut relay = Relay::launch(RelayOpts::args(&args).store(&store)).expect("relay starts");
    let alpha = Host::enrolled(&relay, "alpha");
    Host::enrolled(&relay, "beta");
    alpha.enrol(&relay); // the same enrolment again: nothing changed, nothing logged
    let new = Host::new("alpha");
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("alpha", &alpha.key, &new.key, None, None),
    );
    assert_eq!(r.status, 200, "{}", r.text());

    // Online: through the admin socket of the running relay.
    let (log, _) = tool(&["log", "--store-dir", s(&store)], 0);
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(lines[0].contains("rotate-key"), "{log}");
    assert!(
        lines[1].contains("enrol") && lines[1].contains("\"beta\""),
        "{log}"
    );
    assert!(lines[2].contains("\"alpha\""), "{log}");
    let (ok, _) = tool(&["log", "--verify", "--store-dir", s(&store)], 0);
    assert_eq!(
        ok.trim(),
        "relay log OK: 3 entries verified, from its first entry"
    );

    // An online backup carries the chain (the backup entry itself follows the snapshot).
    let file = work.path().join("b.mbxbak");
    tool(&["backup", "--store-dir", s(&store), s(&file)], 0);
    let (verified, _) = tool(&["verify", s(&file)], 0);
    assert!(
        verified.contains("relay log       chain verified: 3 entries"),
        "{verified}"
    );
    let (json, _) = tool(&["log", "--verify", "--json", "--store-dir", s(&store)], 0);
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(
        (v["intact"].as_bool(), v["entries"].as_u64()),
        (Some(true), Some(4))
    );

    // Offline: the relay stopped, the store opened by relay-tool.
    assert_eq!(relay.terminate(Duration::from_secs(10)), Some(0));
    tool(&["log", "--verify", "--store-dir", s(&store)], 0);
    edit_entry(&store, 1);
    let (_, err) = tool(&["log", "--verify", "--store-dir", s(&store)], 3);
    assert!(
        err.starts_with("relay-tool: relay log does not verify: first bad entry 1: entry 1 (enrol"),
        "{err}"
    );

    // Online again: the running relay finds the same entry.
    relay.start_again().expect("relay restarts");
    let (_, err) = tool(&["log", "--verify", "--store-dir", s(&store)], 3);
    assert!(err.contains("first bad entry 1"), "{err}");

    // A backup of the edited store is a sound file whose log is not: verify exits 3.
    let tampered = work.path().join("t.mbxbak");
    let (out, _) = tool(&["backup", "--store-dir", s(&store), s(&tampered)], 0);
    assert!(out.contains("CHAIN BROKEN at entry 1"), "{out}");
    let (_, err) = tool(&["verify", s(&tampered)], 3);
    assert!(
        err.contains("relay log does not verify: first bad entry 1"),
        "{err}"
    );
    // The first backup, taken before the edit, still verifies.
    tool(&["verify", s(&file)], 0);
}
