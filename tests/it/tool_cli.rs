//! The three binaries' shared command-line conventions as an operator meets them (issue 39,
//! items 4-6): a closed stdout ends a command quietly (killed by SIGPIPE as `cat` is, never a
//! panic with exit 101); `--json` failures print one JSON object `{"error","exit_code"}` on
//! stdout; `keygen --json` is the same in mbx-relay and relay-tool; relay-bench exits 1 when a
//! request of its run failed.

use crate::common;

use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Output, Stdio};

use common::{relay_bench, relay_bin, relay_tool, relay_tool_command, Relay};
use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run `cmd` with its stdout a pipe whose reading end is already closed (a `jq` that failed).
fn into_closed_pipe(mut cmd: Command) -> Output {
    use std::os::fd::FromRawFd as _;
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills the two descriptors of `fds`, which this function then owns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    // SAFETY: both descriptors are fresh and owned here: the reading end is closed at once,
    // the writing end moves into the child's stdout.
    let writer = unsafe {
        libc::close(fds[0]);
        std::os::fd::OwnedFd::from_raw_fd(fds[1])
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run")
}

fn assert_quiet_on_a_closed_pipe(what: &str, out: &Output) {
    let err = text(&out.stderr);
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert_ne!(out.status.code(), Some(101), "{what}: {err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{what}: {err}");
}

#[test]
fn a_closed_stdout_ends_each_binary_quietly() {
    let mut relay = Command::new(relay_bin());
    relay.arg("keygen");
    assert_quiet_on_a_closed_pipe("mbx-relay keygen", &into_closed_pipe(relay));
    assert_quiet_on_a_closed_pipe(
        "relay-tool keygen",
        &into_closed_pipe(relay_tool_command(&["keygen"], &[])),
    );
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join("host");
    let mut host = Command::new(relay_bin());
    host.args(["host", "--dir"])
        .arg(&dir)
        .args(["init", "--name", "alpha"]);
    assert_quiet_on_a_closed_pipe("mbx-relay host init", &into_closed_pipe(host));
}

#[test]
fn keygen_json_is_the_same_object_in_both_binaries() {
    let relay = Command::new(relay_bin())
        .args(["keygen", "--json"])
        .output()
        .unwrap();
    let tool = relay_tool(&["keygen", "--json"]);
    for out in [&relay, &tool] {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["fingerprint", "public", "seed"], "{v}");
    }
}

#[test]
fn a_json_failure_prints_the_error_and_exit_code_as_json() {
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("no-store");
    let out = relay_tool(&["stats", "--json", "--store-dir", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["exit_code"], 1, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("does not exist"),
        "{v}"
    );

    // A usage error found by relay-tool itself: `revoke 1` (exit 2).
    let out = relay_tool(&[
        "revoke",
        "--json",
        "--store-dir",
        missing.to_str().unwrap(),
        "1",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["exit_code"], 2, "{v}");

    // The host commands: the same shape.
    let out = Command::new(relay_bin())
        .args(["host", "--json", "--dir"])
        .arg(&missing)
        .arg("status")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(
        v["exit_code"].as_i64(),
        out.status.code().map(i64::from),
        "{v}"
    );
    assert!(v["error"].is_string(), "{v}");
}

/// Issue 39 item 4: a run where requests failed (pushes over the relay's rate limit) prints
/// its report and exits 1, never 0.
#[test]
fn relay_bench_fails_when_a_request_failed() {
    let relay = Relay::start(&["--pushes-per-minute", "2"]);
    let url = format!("http://{}", relay.addr());
    let out = relay_bench(&[
        "--url",
        &url,
        "--senders",
        "1",
        "--targets",
        "1",
        "--items",
        "6",
        "--batch",
        "1",
        "--json",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("failed"), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("the report is printed");
    let errors = &report["points"][0]["push"]["errors"];
    assert!(
        errors.as_object().is_some_and(|e| !e.is_empty()),
        "{report}"
    );
}

/// Issue 39 item 8: `relay-tool backup -` streams the backup to stdout (online through the
/// running relay, and offline), the summary on stderr; no file named `-` is written, and what
/// came out verifies.
#[test]
fn backup_dash_streams_to_stdout_and_the_stream_verifies() {
    let work = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(&[]);
    let dir = relay.store_dir().to_str().unwrap().to_string();
    for (n, how) in ["online", "offline"].into_iter().enumerate() {
        if how == "offline" {
            relay.terminate(std::time::Duration::from_secs(30));
        }
        let out = relay_tool_command(&["backup", "--store-dir", &dir, "-"], &[])
            .current_dir(work.path())
            .output()
            .unwrap();
        let err = text(&out.stderr);
        assert!(out.status.success(), "{how}: {err}");
        assert!(err.contains("backup written to stdout"), "{how}: {err}");
        assert!(
            !work.path().join("-").exists(),
            "{how}: a file named - was written"
        );
        let file = work.path().join(format!("streamed-{n}.mbxbak"));
        std::fs::write(&file, &out.stdout).unwrap();
        let out = relay_tool(&["verify", file.to_str().unwrap()]);
        assert!(out.status.success(), "{how}: {}", text(&out.stderr));
    }
}

/// Issue 39 item 10: `--version` names the commit the binary was built from.
#[test]
fn version_names_the_commit() {
    for out in [
        Command::new(relay_bin()).arg("--version").output().unwrap(),
        relay_tool(&["--version"]),
    ] {
        let said = text(&out.stdout);
        assert!(out.status.success(), "{said}");
        assert!(said.contains("(commit "), "{said}");
    }
}
