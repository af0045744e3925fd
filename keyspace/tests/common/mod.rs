//! Shared test helpers: a controllable clock, keys, enrolment and insert builders, and a full
//! recount of usage and dedup invariants from a dump.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use relay_keyspace::*;
use sha2::Digest;

/// Names the store a migration child process opens (see [`open_child`]).
const OPEN_CHILD_ENV: &str = "RELAY_KEYSPACE_OPEN_CHILD_DIR";

/// The body of a test binary's ignored child test: open the store [`open_aborted_at`] names
/// (running its migration) and print `MIGRATED`; nothing when run as an ordinary test.
pub fn open_child() {
    let Ok(dir) = std::env::var(OPEN_CHILD_ENV) else {
        return;
    };
    Store::open(Path::new(&dir), OpenOptions::default()).unwrap();
    println!("\nMIGRATED");
}

/// Run this test binary's `child` test (one that calls [`open_child`]) on `dir` with failpoint
/// `failpoint` armed, and assert that the open aborted there (SIGABRT, like `kill -9` mid-way)
/// before it finished.
pub fn open_aborted_at(child: &str, dir: &Path, failpoint: &str) {
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

/// A clock tests move by hand.
#[derive(Debug)]
pub struct TestClock(pub AtomicU64);

impl Clock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl TestClock {
    pub fn new(ms: u64) -> Arc<TestClock> {
        Arc::new(TestClock(AtomicU64::new(ms)))
    }
    pub fn set(&self, ms: u64) {
        self.0.store(ms, Ordering::SeqCst);
    }
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

pub fn open_with(dir: &Path, clock: Arc<TestClock>) -> Store {
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

pub fn key(n: u64) -> Key32 {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&n.to_be_bytes());
    k[31] = 0xAB;
    k
}

pub fn enrol_req(pk: Key32, name: &str, account: Option<&str>, rank: u8) -> EnrolRequest {
    EnrolRequest {
        host_pubkey: pk,
        host_name: name.into(),
        owner_fp: "owner".into(),
        account: account.map(str::to_string),
        authorized_by: if rank > 0 {
            "token".into()
        } else {
            "host-key".into()
        },
        authority_rank: rank,
        max_live: 1_000_000,
    }
}

pub fn enrol(store: &Store, pk: Key32, name: &str) {
    let out = store
        .enrol(enrol_req(pk, name, None, 0))
        .wait()
        .expect("enrol");
    assert!(
        matches!(out, EnrolOutcome::Enrolled | EnrolOutcome::AlreadyEnrolled),
        "{out:?}"
    );
}

pub fn big_quotas() -> Quotas {
    Quotas {
        max_queue_items: u64::MAX,
        max_queue_bytes: u64::MAX,
        max_sender_items: u64::MAX,
        max_sender_bytes: u64::MAX,
        max_account_items: u64::MAX,
        max_account_bytes: u64::MAX,
    }
}

pub fn hash(b: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(b).into()
}

pub fn item(sender: Key32, id: &str, targets: &[(Key32, &[u8])]) -> NewItem {
    NewItem {
        kind: ItemKind::Envelope,
        item_id: id.into(),
        sender,
        targets: targets
            .iter()
            .map(|(t, w)| NewTarget {
                target: *t,
                wire: w.to_vec(),
                wire_hash: hash(w),
            })
            .collect(),
    }
}

/// A notice builder for sweeps and purges: one notice per expired envelope, to its sender, with
/// item id `expired:<item_id>:<first byte of the target>` (receipts and notices go silently).
pub fn notice_fn(relay: Key32) -> NoticeFn {
    Box::new(move |x: &ExpiredItem, now| {
        if x.kind != ItemKind::Envelope {
            return None;
        }
        let id = format!("expired:{}:{}", x.item_id, x.target[0]);
        let wire = format!("notice {id} {now}").into_bytes();
        Some(NewItem {
            kind: ItemKind::Expired,
            item_id: id,
            sender: relay,
            targets: vec![NewTarget {
                target: x.sender,
                wire_hash: hash(&wire),
                wire,
            }],
        })
    })
}

pub fn req(item: NewItem, quotas: Quotas) -> InsertRequest {
    InsertRequest {
        item,
        quotas,
        retention_ms: 14 * 24 * 3600 * 1000,
    }
}

pub fn insert(store: &Store, sender: Key32, id: &str, targets: &[(Key32, &[u8])]) -> InsertOutcome {
    store
        .insert(req(item(sender, id, targets), big_quotas()))
        .wait()
        .expect("insert")
}

pub fn stored_seqs(out: &InsertOutcome) -> Vec<TargetSeq> {
    match out {
        InsertOutcome::Stored { targets, .. } => targets.clone(),
        other => panic!("expected Stored, got {other:?}"),
    }
}

/// Every record of the store, by partition, from a dump.
pub fn dump(store: &Store) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    store.dump(&mut out, &DumpOptions::default()).expect("dump");
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect()
}

/// The rows of one partition in a dump, as (key, value) JSON.
pub fn rows_of(store: &Store, part: &str) -> Vec<(serde_json::Value, serde_json::Value)> {
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
pub fn check_invariants(store: &Store) -> u64 {
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
