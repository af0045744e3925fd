//! The host client and the load generator over TLS, through the real binaries: two hosts exchange mail
//! through a TLS relay they reach with `relay set https://... --ca FILE` (and cannot without the
//! CA), plain http to a non-loopback relay is refused unless `--insecure-http`, and
//! `relay-bench --url https://... --ca FILE` pushes.

use crate::common;
use crate::host_util;
use crate::tls_util;

use std::path::Path;

use common::Relay;
use host_util::{sync_until, HostCli};
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
