//! The `relay-tool` binary as a user runs it: offline commands that need no relay.
//!
//! Being an integration test of this package, it also makes `cargo test --workspace` build the
//! `relay-tool` binary itself (`target/<profile>/relay-tool`), which the root package's
//! end-to-end tests (`tests/it/tool_admin.rs`, the host restore drill) run next to `mbx-relay`.

use std::process::Command;

fn tool(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_relay-tool"))
        .args(args)
        .output()
        .expect("relay-tool runs")
}

#[test]
fn verify_of_a_missing_file_exits_2_and_names_the_file() {
    let out = tool(&["verify", "/nonexistent-dir/backup.mbxbak"]);
    assert_eq!(out.status.code(), Some(2));
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
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_store_command_without_a_store_is_a_usage_error_naming_both_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_relay-tool"))
        .args(["stats"])
        .env_remove("MBX_RELAY_STORE")
        .env_remove("MBX_RELAY_STORE_DIR")
        .output()
        .expect("relay-tool runs");
    assert_eq!(out.status.code(), Some(1));
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
        assert_eq!(out.status.code(), Some(2), "{args:?}");
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
