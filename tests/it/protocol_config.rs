//! docs/protocol.md §7: every limit is a flag and an `MBX_RELAY_*` environment variable of
//! `mbx-relay serve`, and the flag wins over the variable.
use crate::common;

use std::time::Duration;

use common::*;
use relay_wire::keys::{b64, SigningKey};
use serde_json::json;

fn launch_env(args: &[&str], env: &[(&str, &str)]) -> Relay {
    let mut o = RelayOpts::args(args);
    for (k, v) in env {
        o = o.env(k, v);
    }
    Relay::launch(o).expect("relay starts")
}

#[test]
fn info_limits_by_environment() {
    let relay = launch_env(
        &[],
        &[
            ("MBX_RELAY_MAX_ITEM_BYTES", "1001"),
            ("MBX_RELAY_MAX_BATCH", "8"),
            ("MBX_RELAY_MAX_TARGETS", "4"),
            ("MBX_RELAY_MAX_PULL", "10"),
            ("MBX_RELAY_MAX_PULL_BYTES", "5001"),
            ("MBX_RELAY_RETENTION", "2h"),
            ("MBX_RELAY_MAX_QUEUE_ITEMS", "12"),
            ("MBX_RELAY_MAX_QUEUE_BYTES", "12001"),
            ("MBX_RELAY_MAX_SENDER_ITEMS", "6"),
            ("MBX_RELAY_MAX_SENDER_BYTES", "6001"),
            ("MBX_RELAY_MAX_ACCOUNT_ITEMS", "14"),
            ("MBX_RELAY_MAX_ACCOUNT_BYTES", "14001"),
        ],
    );
    let l = relay.info()["limits"].clone();
    let days = l["retention_days"].as_f64().unwrap();
    assert!((days - 2.0 / 24.0).abs() < 1e-12, "retention_days {days}");
    let mut l = l;
    l.as_object_mut().unwrap().remove("retention_days");
    assert_eq!(
        l,
        json!({
            "max_item_bytes": 1001, "max_batch": 8, "max_targets": 4, "max_pull": 10,
            "max_pull_bytes": 5001, "max_queue_items": 12, "max_queue_bytes": 12001,
            "max_sender_items": 6, "max_sender_bytes": 6001, "max_owner_items": 14,
            "max_owner_bytes": 14001,
        })
    );
}

#[test]
fn listen_and_store_dir_by_environment() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("from-env");
    let relay = Relay::launch(
        RelayOpts::default()
            .bare()
            .env("MBX_RELAY_LISTEN", "127.0.0.1:0")
            .env("MBX_RELAY_STORE_DIR", store.to_str().unwrap()),
    )
    .expect("relay starts from the environment alone");
    relay.assert_alive();
    assert!(
        store.join("relay.key").exists(),
        "relay.key generated in MBX_RELAY_STORE_DIR"
    );
}

#[test]
fn rate_and_capacity_limits_by_environment() {
    let r = launch_env(&[], &[("MBX_RELAY_MAX_CHALLENGES", "1")]);
    Host::new("c1").challenge(&r).ok();
    Host::new("c2").challenge(&r).assert_some_error(503);

    let r = launch_env(&[], &[("MBX_RELAY_ENROL_PER_MINUTE", "3")]);
    Host::enrolled(&r, "e1");
    Host::new("e2").challenge(&r).ok();
    Host::new("e3").challenge(&r).assert_some_error(429);

    let r = launch_env(&[], &[("MBX_RELAY_MAX_ENROLMENTS", "1")]);
    Host::enrolled(&r, "m1");
    Host::new("m2").try_enrol(&r, "").assert_some_error(503);

    let r = launch_env(&[], &[("MBX_RELAY_PUSHES_PER_MINUTE", "1")]);
    let s = Host::enrolled(&r, "p-s");
    let a = Host::enrolled(&r, "p-a");
    assert_eq!(
        s.push_one(&r, &envelope_item(&s, &[&a]))["status"],
        json!("accepted")
    );
    assert_rejected(&s.push_one(&r, &envelope_item(&s, &[&a])), "rate");
    // The flag wins over the variable.
    let r = launch_env(
        &["--pushes-per-minute", "3"],
        &[("MBX_RELAY_PUSHES_PER_MINUTE", "1")],
    );
    let s = Host::enrolled(&r, "p-s");
    let a = Host::enrolled(&r, "p-a");
    for _ in 0..3 {
        assert_eq!(
            s.push_one(&r, &envelope_item(&s, &[&a]))["status"],
            json!("accepted")
        );
    }

    let r = launch_env(&[], &[("MBX_RELAY_MAX_PER_NAME", "1")]);
    let d1 = Host::enrolled(&r, "dup");
    d1.call_v1(&r, "GET", "/v1/relay/messages?after=0", b"")
        .ok();
    Host::enrolled(&r, "dup");
    d1.call_v1(&r, "GET", "/v1/relay/messages?after=0", b"")
        .assert_error(401, "bad relay hop");
}

#[test]
fn sweep_interval_by_environment() {
    let r = launch_env(
        &[],
        &[
            ("MBX_RELAY_RETENTION", "1s"),
            ("MBX_RELAY_SWEEP_INTERVAL", "1s"),
        ],
    );
    let s = Host::enrolled(&r, "sw-s");
    let a = Host::enrolled(&r, "sw-a");
    assert_eq!(
        s.push_one(&r, &envelope_item(&s, &[&a]))["status"],
        json!("accepted")
    );
    let mut told = false;
    for _ in 0..100 {
        let mine = s.pull_all(&r, 0);
        if mine.iter().any(|i| i["kind"] == json!("expired")) {
            told = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        told,
        "the 1 s sweep from the environment expired the item and told the sender"
    );
}

#[test]
fn heartbeat_stale_by_environment() {
    let mut r = launch_env(&[], &[("MBX_RELAY_HEARTBEAT_STALE", "1s")]);
    let e1 = r.epoch();
    r.kill9();
    std::thread::sleep(Duration::from_millis(2500));
    r.start_again().expect("restart");
    assert_ne!(
        r.epoch(),
        e1,
        "a heartbeat older than MBX_RELAY_HEARTBEAT_STALE rotates the epoch"
    );
}

#[test]
fn logs_never_contain_key_material_or_wire_bytes() {
    let seed = SigningKey::generate();
    let seed_b64 = seed.seed_b64();
    let relay = launch_env(
        GENEROUS,
        &[("RUST_LOG", "debug"), ("MBX_RELAY_KEY", seed_b64.as_str())],
    );
    assert_eq!(
        relay.pubkey(),
        seed.public_b64(),
        "MBX_RELAY_KEY is the relay key"
    );
    let marker = format!("MARKER{}", ulid());
    let s = Host::enrolled(&relay, "log-s");
    let a = Host::enrolled(&relay, "log-a");
    let id = ulid();
    let mut env = sealed_envelope(&id, "agent@log-s", &["agent@log-a".to_string()]);
    env["subject"] = json!(marker);
    env["enc"]["body"] = json!(b64(marker.as_bytes()));
    let wire = serde_json::to_vec(&env).unwrap();
    let it = item("envelope", &id, &[(a.pubkey(), wire.clone())]);
    assert_eq!(s.push_one(&relay, &it)["status"], json!("accepted"));
    // A conflict and a bad envelope with the marker in them, too.
    let mut other = env.clone();
    other["subject"] = json!(format!("{marker}2"));
    let r = s.push_one(
        &relay,
        &item(
            "envelope",
            &id,
            &[(a.pubkey(), serde_json::to_vec(&other).unwrap())],
        ),
    );
    assert_rejected(&r, "conflict");
    let bad = item(
        "envelope",
        &marker,
        &[(a.pubkey(), marker.clone().into_bytes())],
    );
    s.push_one(&relay, &bad);
    a.pull(&relay, "?after=0").ok();
    a.publish_enc(&relay, &b64(&[7u8; 32])).ok();
    let log = relay.stderr_log();
    assert!(!log.is_empty(), "RUST_LOG=debug produces logs");
    for (what, needle) in [
        ("relay seed", seed_b64.clone()),
        ("marker from the envelope", marker.clone()),
        ("wire base64", b64(&wire)[..40].to_string()),
        ("sealed body", b64(marker.as_bytes())),
    ] {
        assert!(!log.contains(&needle), "stderr contains the {what}");
    }
}
