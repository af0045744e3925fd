//! Shared test helpers: the conformance suite's builders (`relay_store::conformance::support`),
//! opening a fjall store, a full recount of usage, dedup and sender-index invariants from a
//! dump, and the fjall [`FjallBackend`] the conformance suite runs on.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

pub(crate) use relay_keyspace::conformance::support::*;
use relay_keyspace::conformance::Backend;
use relay_keyspace::*;

/// Held by the tests that read or reset this process's memory figures (`/proc/self/status`,
/// `clear_refs`): all tests share one process, and one test's peak reset would spoil the other's
/// reading. The figures still include the other tests running meanwhile: they are printed, never
/// asserted.
pub(crate) static PROCESS_MEMORY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`PROCESS_MEMORY`], taken even after a test holding it panicked.
pub(crate) fn process_memory() -> std::sync::MutexGuard<'static, ()> {
    PROCESS_MEMORY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Names the store a migration child process opens (see [`open_child`]).
const OPEN_CHILD_ENV: &str = "RELAY_KEYSPACE_OPEN_CHILD_DIR";

/// The body of a test binary's ignored child test: open the store [`open_aborted_at`] names
/// (running its migration) and print `MIGRATED`; nothing when run as an ordinary test.
pub(crate) fn open_child() {
    let Ok(dir) = std::env::var(OPEN_CHILD_ENV) else {
        return;
    };
    Store::open(Path::new(&dir), OpenOptions::default()).unwrap();
    println!("\nMIGRATED");
}

/// Run this test binary's `child` test (its full name, `module::test`; one that calls
/// [`open_child`]) on `dir` with failpoint
/// `failpoint` armed, and assert that the open aborted there (SIGABRT, like `kill -9` mid-way)
/// before it finished.
pub(crate) fn open_aborted_at(child: &str, dir: &Path, failpoint: &str) {
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            child,
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env(OPEN_CHILD_ENV, dir)
        .env("MBX_FAILPOINT", failpoint)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGABRT), "{stderr}");
    assert!(
        stderr.contains(&format!("failpoint {failpoint}")),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("MIGRATED"));
}

pub(crate) fn open_with(dir: &Path, clock: Arc<TestClock>) -> Store {
    Store::open(
        dir,
        OpenOptions {
            clock,
            create: true,
            ..OpenOptions::default()
        },
    )
    .expect("open store")
}

/// Every record of the store, by partition, from a dump.
pub(crate) fn dump(store: &dyn RelayStore) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    store.dump(&mut out, &DumpOptions::default()).expect("dump");
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// The rows of one partition in a dump, as (key, value) JSON.
pub(crate) fn rows_of(
    store: &dyn RelayStore,
    part: &str,
) -> Vec<(serde_json::Value, serde_json::Value)> {
    dump(store)
        .into_iter()
        .filter(|r| r["partition"] == part)
        .map(|r| (r["key"].clone(), r["value"].clone()))
        .collect()
}

/// Recount usage from the items and check it equals the stored counters exactly; check every
/// queued item has its dedup row (same seq and hash), its expiry row and no dedup prune-index
/// row (its dedup horizon starts only when it leaves the queue). Returns the number of queued
/// items.
pub(crate) fn check_invariants(store: &dyn RelayStore) -> u64 {
    let rows = dump(store);
    let mut want: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut have: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut dedup: BTreeMap<(String, String, String), (u64, String)> = BTreeMap::new();
    let mut expiry: Vec<(String, u64)> = Vec::new();
    let mut horizon: Vec<(String, String, String)> = Vec::new();
    let mut items = Vec::new();
    for r in &rows {
        let part = r["partition"].as_str().unwrap();
        let (k, v) = (&r["key"], &r["value"]);
        match part {
            "items" => items.push(r.clone()),
            "usage" => {
                let name = if let Some(a) = k.get("account") {
                    format!("a:{}", a.as_str().unwrap())
                } else if let Some(s) = k.get("sender") {
                    format!(
                        "s:{}:{}",
                        k["target"].as_str().unwrap(),
                        s.as_str().unwrap()
                    )
                } else {
                    format!("t:{}", k["target"].as_str().unwrap())
                };
                have.insert(
                    name,
                    (v["items"].as_u64().unwrap(), v["bytes"].as_u64().unwrap()),
                );
            }
            "dedup" => {
                dedup.insert(
                    (
                        k["target"].as_str().unwrap().into(),
                        k["sender"].as_str().unwrap().into(),
                        k["item_id"].as_str().unwrap().into(),
                    ),
                    (
                        v["seq"].as_u64().unwrap(),
                        v["wire_hash"].as_str().unwrap().into(),
                    ),
                );
            }
            "dedup_expiry" => {
                horizon.push((
                    k["target"].as_str().unwrap().to_string(),
                    k["sender"].as_str().unwrap().to_string(),
                    k["item_id"].as_str().unwrap().to_string(),
                ));
            }
            "expiry" => {
                if let Some(t) = k.get("item_expires_at").and(k.get("target")) {
                    expiry.push((t.as_str().unwrap().into(), k["seq"].as_u64().unwrap()));
                }
            }
            _ => {}
        }
    }
    for it in &items {
        let (k, v) = (&it["key"], &it["value"]);
        let target = k["target"].as_str().unwrap().to_string();
        let seq = k["seq"].as_u64().unwrap();
        let sender_b64 = v["sender"].as_str().unwrap();
        let sender = hex_of_b64(sender_b64);
        let bytes = v["bytes"].as_u64().unwrap();
        let mut add = |name: String| {
            let e = want.entry(name).or_default();
            e.0 += 1;
            e.1 += bytes;
        };
        add(format!("t:{target}"));
        add(format!("s:{target}:{sender}"));
        if let Some(a) = v["account"].as_str() {
            add(format!("a:{a}"));
        }
        let id = v["item_id"].as_str().unwrap().to_string();
        let row = dedup.get(&(target.clone(), sender.clone(), id.clone()));
        assert_eq!(
            row.map(|r| (r.0, r.1.as_str())),
            Some((seq, v["wire_hash"].as_str().unwrap())),
            "item {target}/{seq} ({id}) lacks its dedup row"
        );
        assert!(
            expiry.contains(&(target.clone(), seq)),
            "item {target}/{seq} lacks its expiry row"
        );
        assert!(
            !horizon.contains(&(target.clone(), sender.clone(), id.clone())),
            "item {target}/{seq} ({id}) is queued but its dedup row has a prune time"
        );
    }
    assert_eq!(expiry.len(), items.len(), "expiry rows without items");
    assert_eq!(have, want, "usage counters differ from a recount");
    items.len() as u64
}

fn hex_of_b64(s: &str) -> String {
    use base64::Engine as _;
    let b = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// (sender, target) pairs as hex strings, from a dump.
pub(crate) type Pairs = BTreeSet<(String, String)>;

/// The (sender, target) pairs the stored lists name, and those the sender index holds.
pub(crate) fn named_and_indexed(store: &dyn RelayStore) -> (Pairs, Pairs) {
    let mut named = BTreeSet::new();
    let mut indexed = BTreeSet::new();
    for r in dump(store) {
        match r["partition"].as_str().unwrap() {
            "sender_lists" => {
                let target = r["key"]["host_pubkey"].as_str().unwrap().to_string();
                for s in r["value"]["senders"].as_array().unwrap() {
                    named.insert((hex_of_b64(s.as_str().unwrap()), target.clone()));
                }
            }
            "sender_index" => {
                let k = &r["key"];
                assert!(r["value"].is_null());
                indexed.insert((
                    k["sender"].as_str().unwrap().to_string(),
                    k["target"].as_str().unwrap().to_string(),
                ));
            }
            _ => {}
        }
    }
    (named, indexed)
}

/// The index holds exactly one row per (sender named, target); returns how many.
pub(crate) fn assert_index_exact(store: &dyn RelayStore) -> usize {
    let (named, indexed) = named_and_indexed(store);
    assert_eq!(indexed, named, "sender_index differs from the stored lists");
    indexed.len()
}

/// A fjall store in a temporary directory, for the conformance suite.
pub(crate) struct FjallBackend {
    dir: tempfile::TempDir,
}

impl FjallBackend {
    pub(crate) fn new() -> FjallBackend {
        FjallBackend {
            dir: tempfile::tempdir().unwrap(),
        }
    }
}

impl Backend for FjallBackend {
    fn open(&self, clock: Arc<dyn Clock>) -> SharedStore {
        self.open_keeping(clock, relay_store::LogRetention::default())
    }
    fn open_keeping(&self, clock: Arc<dyn Clock>, keep: relay_store::LogRetention) -> SharedStore {
        let opts = OpenOptions {
            clock,
            log_retention: keep,
            ..OpenOptions::default()
        };
        Arc::new(Store::open(self.dir.path(), opts).expect("open store"))
    }
    fn schema_version(&self) -> u32 {
        SCHEMA_VERSION
    }
    /// Usage counters, dedup and expiry rows against a recount; the sender index against
    /// the lists.
    fn check_invariants(&self, store: &dyn RelayStore) {
        check_invariants(store);
        assert_index_exact(store);
    }
    /// Into `restored/` beside the store (a fresh directory each call is not needed: one
    /// restore per check).
    fn restore(&self, file: &Path, clock: Arc<dyn Clock>) -> SharedStore {
        let dir = self.dir.path().join("restored");
        restore_backup(file, &dir).expect("restore");
        let opts = OpenOptions {
            clock,
            ..OpenOptions::default()
        };
        let store: SharedStore =
            Arc::new(Store::open(&dir, opts).expect("open the restored store"));
        self.check_invariants(&*store);
        store
    }
    fn try_restore(&self, file: &Path) -> Result<(), relay_store::BackupError> {
        let dir = tempfile::tempdir().expect("temp dir");
        restore_backup(file, &dir.path().join("restored")).map(|_| ())
    }
}
