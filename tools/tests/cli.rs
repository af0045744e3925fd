//! The `relay-tool` binary as a user runs it: offline commands that need no relay.
//!
//! Being an integration test of this package, it also makes `cargo test --workspace` build the
//! `relay-tool` binary itself (`target/<profile>/relay-tool`), which the root package's
//! end-to-end tests (`tests/it/tool_admin.rs`, the host restore drill) run next to `mbx-relay`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

use std::process::Command;

fn tool(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_relay-tool"))
        .args(args)
        .output()
        .expect("relay-tool runs")
}

#[test]
fn verify_of_a_missing_file_exits_1_and_names_the_file() {
    let out = tool(&["verify", "/nonexistent-dir/backup.mbxbak"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("relay-tool: "), "{err}");
    assert!(err.contains("/nonexistent-dir/backup.mbxbak"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn keygen_prints_a_seed_whose_fingerprint_and_public_key_match() {
    let out = tool(&["keygen"]);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} missing in {text}"))
            .trim()
            .to_string()
    };
    let key = relay_wire::keys::SigningKey::from_seed_b64(&field("seed:")).expect("seed");
    assert_eq!(field("public:"), key.public_b64());
    assert_eq!(
        field("fingerprint:"),
        relay_wire::keys::fingerprint(&key.public())
    );
    // Two runs never print the same key.
    let again = tool(&["keygen"]);
    assert_ne!(out.stdout, again.stdout);
}

#[test]
fn unknown_commands_are_usage_errors() {
    let out = tool(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_store_command_without_a_store_is_a_usage_error_naming_both_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_relay-tool"))
        .args(["stats"])
        .env_remove("MBX_RELAY_STORE")
        .env_remove("MBX_RELAY_STORE_DIR")
        .output()
        .expect("relay-tool runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--store-dir") && err.contains("--store DIR|postgres://URL"),
        "{err}"
    );
}

#[test]
fn an_unreachable_postgres_store_is_named_without_its_password() {
    let secret = "n0t-shown-Pw";
    let url = format!("postgres://relay:{secret}@127.0.0.1:1/relaydb?sslmode=disable");
    for args in [
        vec!["stats", "--store", url.as_str()],
        vec!["hosts", "--store", url.as_str()],
        vec!["verify", "--store", url.as_str()],
        vec!["rotate-epoch", "--store", url.as_str()],
    ] {
        let out = tool(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("postgres://127.0.0.1:1/relaydb"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains(secret),
            "{args:?} printed the password: {err}"
        );
        assert!(!String::from_utf8_lossy(&out.stdout).contains(secret));
    }
}

/// A fresh directory store made by the library the relay uses (opened and closed: a stopped
/// relay's store).
fn offline_store(dir: &std::path::Path) {
    let spec = mbx_relay::store_open::StoreSpec::Dir(dir.to_path_buf());
    let store = mbx_relay::store_open::open_store(&spec, relay_store::OpenOptions::default())
        .expect("store opens");
    store.close().expect("store closes");
}

fn ok(args: &[&str]) -> String {
    let out = tool(args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn backup_refuses_to_overwrite_a_file_without_force() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    offline_store(&store);
    let s = store.to_str().unwrap();
    let file = work.path().join("relay.mbxbak");
    let f = file.to_str().unwrap();
    std::fs::write(&file, "yesterday's backup").unwrap();
    let out = tool(&["backup", "--store-dir", s, f]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a file in the way is a usage error"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--force") && err.contains(f), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"yesterday's backup");
    assert!(!work.path().join("relay.mbxbak.tmp").exists());
    ok(&["backup", "--store-dir", s, f, "--force"]);
    ok(&["verify", f]);
}

#[test]
fn every_command_prints_json_that_parses_with_json() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    offline_store(&store);
    let s = store.to_str().unwrap();
    let file = work.path().join("b.mbxbak");
    let f = file.to_str().unwrap();
    let restored = work.path().join("restored");
    let r = restored.to_str().unwrap();
    let one = |args: &[&str]| -> serde_json::Value {
        let out = ok(args);
        serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
    };
    let v = one(&["backup", "--store-dir", s, f, "--json"]);
    assert_eq!(v["file"], f, "{v}");
    assert!(v["checksum"].is_string(), "{v}");
    let v = one(&["verify", f, "--json"]);
    assert_eq!(v["ok"], true, "{v}");
    let v = one(&["verify", "--store-dir", s, "--json"]);
    assert_eq!(v["ok"], true, "{v}");
    let v = one(&["keygen", "--json"]);
    assert!(v["seed"].is_string() && v["fingerprint"].is_string(), "{v}");
    let v = one(&["stats", "--store-dir", s, "--json"]);
    assert!(v.is_object(), "{v}");
    let v = one(&["rotate-epoch", "--store-dir", s, "--json"]);
    assert_ne!(v["old_epoch"], v["new_epoch"], "{v}");
    let v = one(&["restore", "--store-dir", r, f, "--json"]);
    assert!(v["new_epoch"].is_string(), "{v}");
    // Listings are JSON lines: each line parses.
    for args in [
        &["log", "--store-dir", s, "--json"][..],
        &["hosts", "--store-dir", s, "--json"],
        &["dump", "--store-dir", s, "--json"],
        &["log", "--verify", "--store-dir", s, "--json"],
    ] {
        for line in ok(args).lines().filter(|l| !l.trim().is_empty()) {
            let _: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{args:?}: {e}: {line}"));
        }
    }
}

#[test]
fn completions_and_man_pages_come_from_the_command_tree() {
    let bash = ok(&["completions", "bash"]);
    assert!(bash.contains("--accept-other-key"), "{bash}");
    let dir = tempfile::tempdir().unwrap();
    ok(&["man", "--dir", dir.path().to_str().unwrap()]);
    let page = std::fs::read_to_string(dir.path().join("relay-tool-backup.1")).expect("page");
    assert!(page.contains("force"), "{page}");
    let help = ok(&["--help"]);
    assert!(
        help.contains("EXIT CODES (mbx-relay and relay-tool)"),
        "{help}"
    );
}
