//! Epoch rotation cut by a power loss (issue 26), with the store on `powercut`: once
//! `relay-tool rotate-epoch` has printed the new epoch, a cut keeps it; a rotation killed at a
//! seeded random moment and cut comes back either not applied (the old epoch, no new log entry)
//! or wholly applied (the new epoch and its `epoch-rotate` entry naming old -> new); the
//! start-up rotation of a stale heartbeat, cut right after the relay answers, keeps the epoch it
//! served. Queued items keep their seqs throughout.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{envelope_item, Host, Relay, RelayOpts, GENEROUS};
use rand::{Rng as _, SeedableRng as _};
use serde_json::{json, Value};

/// The mount's and the kill delays' seed (printed on failure, for a replay).
const SEED: u64 = 27;

fn tool_ok(args: &[&str]) -> String {
    let out = common::relay_tool(args);
    assert!(
        out.status.success(),
        "relay-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The stored epoch and the relay log's `epoch-rotate` details, oldest first.
fn stored(store: &Path) -> (String, Vec<String>) {
    let dir = store.to_str().unwrap();
    let stats: Value =
        serde_json::from_str(&tool_ok(&["stats", "--store-dir", dir, "--json"])).unwrap();
    let mut rotations: Vec<String> = tool_ok(&["log", "--store-dir", dir, "--json"])
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("a JSON log line"))
        .filter(|e| e["kind"] == json!("epoch-rotate"))
        .map(|e| e["detail"].as_str().unwrap_or_default().to_string())
        .collect();
    rotations.reverse();
    (
        stats["epoch"].as_str().expect("epoch").to_string(),
        rotations,
    )
}

/// After a cut: the epoch is `old` with `rotations` entries, or a new one whose entry (one more)
/// names old -> new. Returns the epoch now stored.
fn not_half_applied(store: &Path, old: &str, rotations: &mut usize, after: &str) -> String {
    let (now, log) = stored(store);
    if now == old {
        assert_eq!(
            log.len(),
            *rotations,
            "a log entry without its epoch {after}"
        );
    } else {
        assert_eq!(
            log.len(),
            *rotations + 1,
            "an epoch without its entry {after}"
        );
        let newest = log.last().unwrap();
        assert!(
            newest.starts_with(&format!("{old} -> {now}")),
            "{newest:?} {after}"
        );
        *rotations += 1;
    }
    now
}

#[test]
fn an_epoch_rotation_is_durable_once_reported_and_never_half_applied() {
    let mut pc = common::powercut_mount(&["--torn", "--seed", &SEED.to_string()]);
    let store = pc.path().join("store");
    let mut relay = Relay::launch(RelayOpts::args(GENEROUS).store(&store)).unwrap();
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let items: Vec<Value> = (0..5).map(|_| envelope_item(&a, &[&b])).collect();
    for r in a.push_results(&relay, &items) {
        assert_eq!(r["status"], json!("accepted"));
    }
    let queued = b.pull_all(&relay, 0);
    relay.terminate(Duration::from_secs(20));
    let dir = store.to_str().unwrap();
    let (mut epoch, log) = stored(&store);
    let mut rotations = log.len();

    // Reported, then cut: the printed epoch is the stored one, with its entry.
    let mut took = Duration::ZERO;
    for _ in 0..1 {
        let t0 = Instant::now();
        let out = tool_ok(&["rotate-epoch", "--store-dir", dir]);
        took = took.max(t0.elapsed());
        let line = out.lines().next().unwrap_or_default();
        let (old, new) = line
            .strip_prefix("epoch rotated: ")
            .and_then(|r| r.split_once(" -> "))
            .map(|(o, n)| (o.to_string(), n.split(' ').next().unwrap().to_string()))
            .unwrap_or_else(|| panic!("no rotation line: {out}"));
        assert_eq!(old, epoch);
        pc.cut();
        let now = not_half_applied(&store, &epoch, &mut rotations, "after a reported rotation");
        assert_eq!(now, new, "the reported epoch was lost in the cut");
        epoch = now;
    }

    // Killed at seeded moments of its run, then cut.
    let mut rng = rand::rngs::StdRng::seed_from_u64(SEED);
    let mut stops = Vec::new();
    for _ in 0..3 {
        let after = took.mul_f64(rng.gen_range(0.0..1.2));
        let mut child = common::relay_tool_command(&["rotate-epoch", "--store-dir", dir], &[])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn relay-tool");
        std::thread::sleep(after);
        let _ = child.kill();
        let _ = child.wait();
        pc.cut();
        stops.push(after);
        epoch = not_half_applied(&store, &epoch, &mut rotations, &format!("{stops:?}"));
    }
    eprintln!(
        "rotate-epoch ({took:?} a run) killed and cut after {stops:?}: {rotations} rotations"
    );

    // A heartbeat from 1970 is stale: the start rotates; cut right after it answered.
    relay_keyspace::testing::put_raw_row(&store, "meta", b"heartbeat", &[0]).unwrap();
    relay.start_again().unwrap();
    let served = relay.epoch();
    assert_ne!(served, epoch, "a stale heartbeat rotates at start-up");
    relay.power_cut(&mut pc);
    assert_eq!(
        relay.epoch(),
        served,
        "the served epoch was lost in the cut"
    );
    let after = b.pull_all(&relay, 0);
    assert_eq!(after.len(), queued.len());
    for (x, y) in after.iter().zip(&queued) {
        assert_eq!((&x["item_id"], &x["seq"]), (&y["item_id"], &y["seq"]));
    }
}
