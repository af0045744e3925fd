//! `relay-tool hosts` against a real `mbx-relay serve` process: the listing online (admin
//! socket) and offline (stopped store) agree, its filters, and last seen after a hop and a push.

use crate::common;

use common::relay_tool as tool;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{envelope_item, Host, Relay, RelayOpts, GENEROUS};
use relay_wire::keys::fingerprint;
use relay_wire::keys::parse_pubkey;
use serde_json::Value;

/// `relay-tool hosts --store-dir DIR --json EXTRA...`: the rows, by name.
fn hosts_json(dir: &Path, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["hosts", "--store-dir", dir.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = tool(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

fn by_name<'a>(rows: &'a [Value], name: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {rows:?}"))
}

/// The fields that do not move with the clock.
fn stable(rows: &[Value]) -> Vec<Value> {
    rows.iter()
        .map(|r| {
            let mut r = r.clone();
            r.as_object_mut().unwrap().remove("enc_ad_age_ms");
            r
        })
        .collect()
}

#[test]
fn hosts_lists_enrolments_online_and_offline_with_last_seen_after_a_hop_and_a_push() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = Relay::launch(RelayOpts::args(GENEROUS).store(&store)).expect("relay starts");
    let alpha = Host::enrolled(&relay, "Alpha");
    let beta = Host::enrolled(&relay, "beta");
    let gamma = Host::enrolled(&relay, "gamma");

    let rows = hosts_json(&store, &[]);
    assert_eq!(rows.len(), 3, "{rows:?}");
    for r in &rows {
        assert_eq!(r["last_seen_recorded"], false, "nobody seen yet: {r}");
        assert_eq!(r["last_seen_ms"], r["enrolled_ms"]);
    }

    // alpha makes hops (many on one day: one last-seen write) and pushes to beta.
    for _ in 0..5 {
        alpha.pull(&relay, "?after=0").ok();
    }
    let r = alpha.push_one(&relay, &envelope_item(&alpha, &[&beta]));
    assert_eq!(r["status"], "accepted", "{r}");

    // Sightings are written within a few seconds (batched, not per request).
    let deadline = Instant::now() + Duration::from_secs(20);
    let rows = loop {
        let rows = hosts_json(&store, &[]);
        let seen = |n: &str| by_name(&rows, n)["last_seen_recorded"] == true;
        if seen("Alpha") && seen("beta") {
            break rows;
        }
        assert!(Instant::now() < deadline, "last seen not written: {rows:?}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(
        by_name(&rows, "gamma")["last_seen_recorded"],
        false,
        "gamma did nothing"
    );
    let b = by_name(&rows, "beta");
    assert_eq!(b["queue_items"], 1);
    assert!(b["queue_bytes"].as_u64().unwrap() > 0);
    assert_eq!(b["account"], Value::Null);
    assert_eq!(b["revoked_ms"], Value::Null);
    let pk = parse_pubkey(b["host_pubkey"].as_str().unwrap()).unwrap();
    assert_eq!(b["fingerprint"], fingerprint(&pk));
    let today = common::now_ms() as u64 / 86_400_000 * 86_400_000;
    let alpha_seen = by_name(&rows, "Alpha")["last_seen_ms"].as_u64().unwrap();
    assert!(alpha_seen >= today, "seen today: {alpha_seen} < {today}");

    // Filters, online.
    let named = hosts_json(&store, &["--name", "ALPHA"]);
    assert_eq!(named.len(), 1);
    assert_eq!(named[0]["name"], "Alpha");
    assert!(hosts_json(&store, &["--revoked"]).is_empty());
    assert!(
        hosts_json(&store, &["--idle-for", "1d"]).is_empty(),
        "all seen or enrolled today"
    );
    assert_eq!(hosts_json(&store, &["--idle-for", "0s"]).len(), 3);
    let bad = tool(&[
        "hosts",
        "--store-dir",
        store.to_str().unwrap(),
        "--name",
        "no spaces",
    ]);
    assert_eq!(bad.status.code(), Some(2), "a bad --name is a usage error");

    // The readable form: a header, then one line per host.
    let out = tool(&["hosts", "--store-dir", store.to_str().unwrap()]);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("FINGERPRINT"), "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(text.contains(b["fingerprint"].as_str().unwrap()), "{text}");
    assert!(text.contains("1 items/"), "{text}");

    // Offline, on the stopped store: the same rows.
    let online = stable(&hosts_json(&store, &[]));
    assert_eq!(relay.terminate(Duration::from_secs(30)), Some(0));
    let offline = stable(&hosts_json(&store, &[]));
    assert_eq!(online, offline);
    assert_eq!(
        stable(&hosts_json(&store, &["--name", "beta"])),
        vec![stable(std::slice::from_ref(b))[0].clone()]
    );
    drop(gamma);
}
