//! The host client and the load generator over TLS, through the real binaries: two hosts exchange mail
//! through a TLS relay they reach with `relay set https://... --ca FILE` (and cannot without the
//! CA), plain http to a non-loopback relay is refused unless `--insecure-http`, and
//! `relay-bench --url https://... --ca FILE` pushes; the daemon (its watcher too), `rotate`
//! and `doctor` trust the stored CA exactly as `sync` does (issue 24 item 10): live delivery in
//! milliseconds, a rotation that succeeds, a doctor that passes, a host left mid-rotation by the
//! old bug finished by its next sync, and the watcher's failures logged with their cause.

use crate::common;
use crate::daemon_util;
use crate::host_util;
use crate::tls_util;

use std::path::Path;
use std::time::Duration;

use common::Relay;
use daemon_util::{delivery_latencies, wait_until, Daemon};
use host_util::{sync_until, HostCli};
use serde_json::Value;
use tls_util::Ca;

/// A TLS relay (generous rate limits) with a fresh CA; the CA file is `dir/ca.pem`.
fn tls_relay(dir: &Path) -> (Relay, String, String) {
    let ca = Ca::new("hosts test CA");
    let ca_file = ca.write(dir, "ca.pem");
    let (cert, key) = ca.leaf(7).write(dir);
    let relay = Relay::start_generous(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let url = format!("https://127.0.0.1:{}", relay.addr().port());
    (relay, url, ca_file.to_str().unwrap().to_string())
}

#[test]
fn two_hosts_exchange_mail_over_tls_with_the_relay_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, url, ca) = tls_relay(dir.path());
    let a = HostCli::init(dir.path(), "alpha");
    let b = HostCli::init(dir.path(), "beta");
    let (apk, bpk) = (a.pubkey(), b.pubkey());
    a.ok(&["peer", "add", "beta", &bpk]);
    b.ok(&["peer", "add", "alpha", &apk]);

    // Without the CA the relay's certificate is not trusted (bundled web roots only).
    let e = a.run(&["relay", "set", &url]).unwrap_err();
    assert!(
        e.contains("relay unreachable") && e.contains("--ca FILE"),
        "{e}"
    );
    assert!(a.status()["relay"].is_null(), "nothing pinned");

    a.ok(&["relay", "set", &url, "--ca", &ca]);
    b.ok(&["relay", "set", &url, "--ca", &ca]);
    let id = a.send("beta", "over tls", "hello through TLS");
    assert!(
        sync_until(&[&a, &b], 10, || b.inbox_ids().contains(&id)),
        "beta did not receive the message"
    );
    // alpha's sync also took beta's receipt: the CA stayed in use for later syncs.
    assert!(
        sync_until(&[&a, &b], 10, || a.count("envelope_done") == 1),
        "alpha saw no delivery receipt: {}",
        a.status()
    );
}

/// Two hosts that pinned each other and the TLS relay (with its CA), each having synced once.
fn tls_pair(root: &Path, url: &str, ca: &str) -> (HostCli, HostCli) {
    let a = HostCli::init(root, "alpha");
    let b = HostCli::init(root, "beta");
    let (apk, bpk) = (a.pubkey(), b.pubkey());
    a.ok(&["peer", "add", "beta", &bpk]);
    b.ok(&["peer", "add", "alpha", &apk]);
    a.ok(&["relay", "set", url, "--ca", ca]);
    b.ok(&["relay", "set", url, "--ca", ca]);
    b.sync();
    a.sync();
    (a, b)
}

/// `host doctor --json` (exit code and report).
fn doctor(h: &HostCli) -> (Option<i32>, Value) {
    let out = h.run_fp(&["doctor"], None);
    let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code(), v)
}

#[test]
fn doctor_rotate_and_daemons_use_the_relay_ca_and_deliver_live() {
    let dir = tempfile::tempdir().unwrap();
    let (mut relay, url, ca) = tls_relay(dir.path());
    let (a, b) = tls_pair(dir.path(), &url, &ca);

    // doctor reaches the relay as sync does (it failed "relay reachable" with UnknownIssuer).
    let (code, report) = doctor(&a);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["ok"], true, "{report}");

    // rotate posts to the relay with the CA (it failed after recording the rotation).
    let rotated = a.ok(&["rotate"]);
    let new_key = rotated["new_pubkey"].as_str().unwrap();
    b.ok(&["peer", "rotate", "alpha", new_key]);
    b.sync();
    a.sync();
    assert_eq!(a.pubkey(), new_key);

    // Both daemons receive live through their watchers' held pulls over TLS.
    let log = dir.path().join("beta-daemon.log");
    let _da = Daemon::start(&a, &[]);
    let _db = Daemon::start_logged(&b, &[], &log);
    std::thread::sleep(Duration::from_millis(500));
    let n = 12;
    for i in 0..n {
        a.send("beta", "live", &format!("a{i}"));
        b.send("alpha", "live", &format!("b{i}"));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        wait_until(Duration::from_secs(60), || {
            b.inbox_ids().len() == n && a.inbox_ids().len() == n
        }),
        "not delivered:\nalpha {}\nbeta {}",
        a.status(),
        b.status()
    );
    let (to_b, to_a) = (delivery_latencies(&b), delivery_latencies(&a));
    eprintln!("over TLS with a private CA: to beta {to_b:?} ms, to alpha {to_a:?} ms");
    for lat in [&to_b, &to_a] {
        let (p50, max) = (lat[lat.len() / 2], lat[lat.len() - 1]);
        assert!(
            p50 < 500 && max < 2_000,
            "p50 {p50} ms max {max} ms: not live delivery ({lat:?})"
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("watcher:"), "the watcher failed:\n{text}");

    // A watcher that cannot reach the relay says why (it was silent).
    relay.kill9();
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&log)
                .unwrap()
                .contains("host daemon: watcher: pull failed, retrying: relay unreachable")
        }),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
}

#[cfg(feature = "failpoints")]
#[test]
fn a_rotation_left_before_its_post_to_a_private_ca_relay_is_finished_by_the_next_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, url, ca) = tls_relay(dir.path());
    let (a, b) = tls_pair(dir.path(), &url, &ca);
    let old_key = a.pubkey();
    // The state the old bug left: the rotation recorded, its post to the relay never made.
    a.crash_at(&["rotate"], "host-rotate-after-intent");
    let v = a.sync();
    let new_key = v["rotation_finished"]["new_pubkey"].as_str().unwrap();
    assert_ne!(new_key, old_key);
    assert_eq!(a.pubkey(), new_key);
    b.ok(&["peer", "rotate", "alpha", new_key]);
    let id = a.send("beta", "after rotation", "still delivered");
    assert!(
        sync_until(&[&b, &a], 10, || b.inbox_ids().contains(&id)),
        "beta did not receive: {}",
        a.status()
    );
    let (code, report) = doctor(&a);
    assert_eq!(code, Some(0), "{report}");
}

#[test]
fn relay_set_refuses_plain_http_to_a_non_loopback_host_unless_insecure_http() {
    let dir = tempfile::tempdir().unwrap();
    let a = HostCli::init(dir.path(), "alpha");
    let out = a.run_fp(&["relay", "set", "http://example.com"], None);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        e.contains("not signed") && e.contains("--insecure-http") && e.contains("https://"),
        "{e}"
    );
    let e = a
        .run(&["relay", "set", "http://10.0.0.1:8787", "--ca", "x.pem"])
        .unwrap_err();
    assert!(e.contains("--ca applies to https://"), "{e}");

    // Loopback stays allowed over plain http.
    let relay = Relay::start(&[]);
    let url = format!("http://127.0.0.1:{}", relay.addr().port());
    a.ok(&["relay", "set", &url]);
    let url = format!("http://localhost:{}", relay.addr().port());
    a.ok(&["relay", "set", &url]);
}

#[test]
fn relay_bench_pushes_over_https_with_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, url, ca) = tls_relay(dir.path());
    let args = [
        "--url",
        &url,
        "--senders",
        "1",
        "--targets",
        "1",
        "--items",
        "20",
        "--batch",
        "1",
        "--json",
    ];
    let mut with_ca = args.to_vec();
    with_ca.extend_from_slice(&["--ca", &ca]);
    let out = common::relay_bench(&with_ca);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let push = &report["points"][0]["push"];
    assert_eq!(push["items"], 20, "{report}");
    assert_eq!(push["requests"], 20, "{report}");

    // Without the CA: the certificate is not trusted.
    let out = common::relay_bench(&args);
    assert!(!out.status.success());
}

/// Issue 39 item 3: `mbx-relay health` checks a TLS relay on a private CA with `--ca`, and
/// without it says in words why the certificate was refused (no rustls debug text).
#[test]
fn health_checks_a_tls_relay_with_its_ca_and_says_why_without() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, url, ca) = tls_relay(dir.path());
    let health = format!("{url}/health");
    let out = common::relay_exits(&["health", "--url", &health, "--ca", &ca], &[]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");

    let out = common::relay_exits(&["health", "--url", &health], &[]);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not signed by a trusted CA"), "{err}");
    assert!(err.contains("--ca"), "{err}");
    assert!(!err.contains("UnknownIssuer"), "{err}");

    // --ca on plain http is a usage error.
    let out = common::relay_exits(
        &["health", "--url", "http://127.0.0.1:1/health", "--ca", &ca],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
}
