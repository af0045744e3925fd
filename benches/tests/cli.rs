//! The `relay-bench` command line, through the real binary: bad flags are refused with exit
//! code 2 (the usage code of mbx-relay and relay-tool) and one line naming the flag, before any
//! connection is made; an unreachable relay is a failure, exit 1. (Being this package's
//! integration test also makes `cargo test --workspace` build the binary the relay's TLS test
//! drives.)

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_relay-bench"))
        .args(args)
        .output()
        .expect("run relay-bench")
}

#[test]
fn out_of_range_flags_exit_2_naming_the_flag() {
    // Port 1 on loopback: nothing listens, so a run that got past the checks would fail with 1.
    let url = "http://127.0.0.1:1";
    for (args, flag) in [
        (&["--senders", "0"][..], "--senders"),
        (&["--targets", "0"][..], "--targets"),
        (&["--items", "0"][..], "--items"),
        (&["--batch", "0"][..], "--batch"),
        (&["--ca", "ca.pem"][..], "--ca"),
    ] {
        let out = bench(&[&["--url", url][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with(&format!("relay-bench: {flag}")),
            "{args:?}: {err}"
        );
    }
    let out = bench(&["--url", "ftp://127.0.0.1:1"]);
    assert_eq!(out.status.code(), Some(2));
    let out = bench(&["--url", url, "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A run against loopback port 1 (nothing listens there) with `extra` flags.
fn unreachable(extra: &[&str]) -> Output {
    let base = [
        "--url",
        "http://127.0.0.1:1",
        "--items",
        "1",
        "--timeout",
        "2",
    ];
    bench(&[&base[..], extra].concat())
}

#[test]
fn an_unreachable_relay_exits_1() {
    let out = unreachable(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("relay-bench: "), "{err}");
    // With --json the failure is also the shared JSON object on stdout.
    let out = unreachable(&["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["exit_code"], 1, "{v}");
    assert!(v["error"].is_string(), "{v}");
}
