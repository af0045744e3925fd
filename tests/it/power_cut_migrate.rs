//! Schema migrations cut by a power loss (issue 26). A relay opening an older store migrates it
//! at start-up; with the store on `powercut`, the relay is stopped at seeded points of the
//! migration (its failpoints, and SIGKILL at random delays) and the power is cut right after.
//! After every cut the store is either still at its old version (the next start migrates it
//! again) or fully migrated, row for row; every completed migration left exactly one `migrate`
//! entry in the relay log, and every item accepted before is pullable with its seq and bytes.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::powercut::Powercut;
use common::{envelope_item, Host, Relay, RelayOpts, GENEROUS};
use rand::{Rng as _, SeedableRng as _};
use relay_keyspace::testing;
use serde_json::{json, Value};

/// The mount's and the kill delays' seed (printed on failure, for a replay).
const SEED: u64 = 26;

/// Partitions a migration must leave exactly as a schema-5 relay wrote them (`meta` and the
/// relay log `ops` change by design: heartbeat, the `migrate` entry).
const COMPARED: [&str; 11] = [
    "enrolments",
    "enc_ads",
    "sender_lists",
    "items",
    "dedup",
    "seqs",
    "acked",
    "usage",
    "expiry",
    "dedup_expiry",
    "sender_index",
];

type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// The store's schema version and the rows of [`COMPARED`], read in one open of the closed store.
fn layout(store: &Path) -> (u32, Vec<Rows>) {
    let mut names = vec!["meta"];
    names.extend(COMPARED);
    let mut all = testing::raw_partitions(store, &names).expect("read the store's rows");
    let meta = all.remove(0);
    let version = meta
        .iter()
        .find(|(k, _)| k == b"schema_version")
        .map(|(_, v)| {
            assert_eq!(v.len(), 1, "a schema version below 128 is one varint byte");
            u32::from(v[0])
        })
        .expect("the store records its schema version");
    (version, all)
}

fn downgrade(store: &Path, to: u32) {
    match to {
        1 => testing::downgrade_to_schema_1(store).map(drop),
        2 => testing::downgrade_to_schema_2(store).map(drop),
        3 => testing::downgrade_to_schema_3(store).map(drop),
        4 => testing::downgrade_to_schema_4(store).map(drop),
        _ => unreachable!("no schema {to}"),
    }
    .expect("downgrade the closed store");
}

/// The `migrate` entries of the relay log, oldest first (their details).
fn migrate_entries(store: &Path) -> Vec<String> {
    let out = common::relay_tool(&["log", "--store-dir", store.to_str().unwrap(), "--json"]);
    assert!(
        out.status.success(),
        "relay-tool log: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut found: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON log line"))
        .filter(|e| e["kind"] == json!("migrate"))
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    found.reverse();
    found
}

/// A store with enrolments, allowlists and multi-target items, written by a relay on `pc`;
/// returns the relay (stopped), the targets and what each of them had queued.
fn written_store(pc: &Powercut) -> (Relay, Vec<Host>, Vec<Vec<Value>>) {
    let mut relay = Relay::launch(RelayOpts::args(GENEROUS).store(&pc.path().join("store")))
        .expect("relay on the mount");
    let a = Host::enrolled(&relay, "alice");
    let targets: Vec<Host> = (0..12)
        .map(|i| Host::enrolled(&relay, &format!("t{i}")))
        .collect();
    for t in &targets {
        t.publish_senders(&relay, &[a.pubkey()], common::now_ms())
            .ok();
    }
    let refs: Vec<&Host> = targets.iter().collect();
    let items: Vec<Value> = (0..120).map(|_| envelope_item(&a, &refs)).collect();
    for chunk in items.chunks(60) {
        for r in a.push_results(&relay, chunk) {
            assert_eq!(r["status"], json!("accepted"), "{r}");
        }
    }
    let queued = targets.iter().map(|t| t.pull_all(&relay, 0)).collect();
    assert_eq!(relay.terminate(Duration::from_secs(20)), Some(0));
    (relay, targets, queued)
}

/// Each migration (from schema 1, 2, 3 and 4) stopped at its failpoints and at seeded random
/// moments, each stop followed by a power cut.
#[cfg(feature = "failpoints")]
#[test]
fn a_migration_cut_at_seeded_points_comes_back_old_or_new_and_finishes_once() {
    let mut pc = common::powercut_mount(&["--torn", "--seed", &SEED.to_string()]);
    let (mut relay, targets, queued) = written_store(&pc);
    let store = relay.store_dir().to_path_buf();
    let (v, want) = layout(&store);
    assert_eq!(v, relay_keyspace::SCHEMA_VERSION);
    let mut stops: Vec<String> = Vec::new();
    let mut completed: Vec<u32> = Vec::new();
    let started = Instant::now();
    // How long a migrating start takes here (the random kills land within it); it answers, then
    // the power is cut: migrated once reported.
    downgrade(&store, 1);
    let t0 = Instant::now();
    relay.start_again().expect("the relay migrates");
    let start = t0.elapsed();
    relay.kill9();
    pc.cut();
    stops.push("schema 1: cut after listening".into());
    let (v, rows) = layout(&store);
    assert_eq!(v, relay_keyspace::SCHEMA_VERSION, "after {stops:?}");
    assert!(rows == want, "migrated but not fully after {stops:?}");
    completed.push(1);

    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    for from in 1..relay_keyspace::SCHEMA_VERSION {
        downgrade(&store, from);
        pc.cut();
        assert_eq!(layout(&store).0, from, "the downgrade was durable");
        let mut stopped = Vec::new();
        for fp in ["migrate-after-batch", "migrate-before-last-batch"] {
            let err = Relay::launch(
                RelayOpts::args(GENEROUS)
                    .store(&store)
                    .env("MBX_FAILPOINT", fp),
            )
            .err()
            .expect("the relay stops at its failpoint");
            assert!(err.contains(&format!("failpoint {fp}")), "{err}");
            stopped.push(fp.to_string());
        }
        for _ in 0..2 {
            let after = start.mul_f64(rng.gen_range(0.0..1.2));
            let listening = relay.start_killed_after(after);
            stopped.push(format!("kill after {after:?} (listening: {listening})"));
        }
        let mut migrated = false;
        for stop in stopped {
            pc.cut();
            stops.push(format!("schema {from}: {stop}"));
            let (v, rows) = layout(&store);
            if v == relay_keyspace::SCHEMA_VERSION {
                assert!(rows == want, "migrated but not fully after {stops:?}");
                if !migrated {
                    completed.push(from);
                    migrated = true;
                }
            } else {
                assert_eq!(
                    v, from,
                    "neither the old nor the new version after {stops:?}"
                );
                assert!(
                    !migrated,
                    "a migrated store went back to {v} after {stops:?}"
                );
            }
        }
        if !migrated {
            // A start that answers, then a cut: migrated once reported.
            relay.start_again().expect("the relay migrates");
            relay.kill9();
            pc.cut();
            stops.push(format!("schema {from}: cut after listening"));
            let (v, rows) = layout(&store);
            assert_eq!(v, relay_keyspace::SCHEMA_VERSION, "after {stops:?}");
            assert!(rows == want, "migrated but not fully after {stops:?}");
            completed.push(from);
        }
    }
    let entries = migrate_entries(&store);
    let wanted: Vec<String> = completed
        .iter()
        .map(|f| format!("schema {f} -> {}", relay_keyspace::SCHEMA_VERSION))
        .collect();
    assert_eq!(entries.len(), wanted.len(), "{entries:?} after {stops:?}");
    for (e, w) in entries.iter().zip(&wanted) {
        assert!(e.starts_with(w.as_str()), "{e:?} is not {w:?}");
    }
    eprintln!(
        "migrations cut: {} stops in {:.1} s (start {:?}): {stops:?}",
        stops.len(),
        started.elapsed().as_secs_f64(),
        start
    );

    // Every queued item is there with its seq and bytes.
    relay.start_again().expect("serves the migrated store");
    for (t, before) in targets.iter().zip(&queued) {
        let after = t.pull_all(&relay, 0);
        assert_eq!(after.len(), before.len(), "{}", t.name);
        for (x, y) in after.iter().zip(before) {
            assert_eq!(
                (&x["item_id"], &x["seq"], &x["wire_b64"]),
                (&y["item_id"], &y["seq"], &y["wire_b64"])
            );
        }
    }
}
