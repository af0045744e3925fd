//! Store benchmark: durable single-item inserts with 1, 8 and 64 concurrent writers, then a
//! pull+ack drain, on relay-keyspace (fjall, group commit) and, in the same run, on a SQLite
//! baseline shaped like the agentmbx reference relay (one process, one connection, WAL,
//! synchronous=FULL, one transaction per item, items/dedup/seqs tables).
//!
//! Run: `cargo bench -p relay-bench --features sqlite --bench store`. `MBX_BENCH_ITEMS` sets items per configuration
//! (default 4000); `MBX_BENCH_WIRE` the wire size in bytes (default 1500).
//! Every insert is durable (fsync'd) before its writer sends the next one.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_keyspace::{
    EnrolRequest, InsertOutcome, InsertRequest, ItemKind, Key32, NewItem, NewTarget, OpenOptions,
    Quotas, Store,
};
use sha2::Digest;

const WRITERS: [usize; 3] = [1, 8, 64];
const TARGETS: u64 = 64;
const PAGE: usize = 500;
/// Receivers draining in parallel.
const RECEIVERS: u64 = 8;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn key(n: u64) -> Key32 {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&n.to_be_bytes());
    k[8] = 0x5A;
    k
}

/// Pseudo-random (incompressible-looking) wire bytes, like a sealed envelope.
fn wire(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Split `total` items over `writers` threads running `op(writer, n)`; returns items/s.
fn run_writers(writers: usize, total: u64, op: impl Fn(u64, u64) + Send + Sync + 'static) -> f64 {
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let handles: Vec<_> = (0..writers as u64)
        .map(|w| {
            let (op, next) = (op.clone(), next.clone());
            std::thread::spawn(move || loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    break;
                }
                op(w, n);
            })
        })
        .collect();
    for h in handles {
        h.join().expect("writer thread");
    }
    total as f64 / start.elapsed().as_secs_f64()
}

// ---- relay-keyspace ------------------------------------------------------------------------

fn quotas() -> Quotas {
    Quotas {
        max_queue_items: u64::MAX,
        max_queue_bytes: u64::MAX,
        max_sender_items: u64::MAX,
        max_sender_bytes: u64::MAX,
        max_account_items: u64::MAX,
        max_account_bytes: u64::MAX,
    }
}

fn fjall_open(dir: &Path) -> Store {
    let store = Store::open(dir, OpenOptions::default()).expect("open store");
    for t in 0..TARGETS {
        store
            .enrol(EnrolRequest {
                host_pubkey: key(1_000 + t),
                host_name: format!("t{t}"),
                owner_fp: String::new(),
                account: None,
                authorized_by: "host-key".into(),
                authority_rank: 0,
                max_live: u64::MAX,
                invite: relay_keyspace::InviteClaim::NotNeeded,
                org: None,
                client_id: None,
                denied_if: Vec::new(),
            })
            .wait()
            .expect("enrol");
    }
    store
}

fn fjall_inserts(store: &Store, writers: usize, total: u64, run: u64, wire_len: usize) -> f64 {
    let store = store.clone();
    run_writers(writers, total, move |w, n| {
        let bytes = wire(run * 1_000_000 + n, wire_len);
        let hash: [u8; 32] = sha2::Sha256::digest(&bytes).into();
        let req = InsertRequest {
            item: NewItem {
                kind: ItemKind::Envelope,
                item_id: format!("r{run}-{n}"),
                sender: key(w),
                targets: vec![NewTarget {
                    target: key(1_000 + n % TARGETS),
                    wire: bytes,
                    wire_hash: hash,
                }],
            },
            quotas: quotas(),
            retention_ms: 14 * 86_400_000,
            require_live_sender: false,
        };
        match store.insert(req).wait() {
            Ok(InsertOutcome::Stored { .. }) => {}
            other => panic!("insert failed: {other:?}"),
        }
    })
}

/// Drain every queue with `RECEIVERS` receivers in parallel (each owns targets r, r+R, ...):
/// pull a page from the acked cursor, ack it durably, repeat.
fn fjall_drain(store: &Store) -> (u64, f64) {
    let start = Instant::now();
    let handles: Vec<_> = (0..RECEIVERS)
        .map(|r| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut drained = 0u64;
                for t in (r..TARGETS).step_by(RECEIVERS as usize) {
                    let target = key(1_000 + t);
                    let mut after = store.cursor(&target).expect("cursor").acked_through;
                    loop {
                        let page = store.pull(&target, after, PAGE, 8 << 20).expect("pull");
                        let Some(last) = page.items.last() else { break };
                        after = last.seq;
                        drained += page.items.len() as u64;
                        store.ack(&target, after).wait().expect("ack");
                        if !page.more {
                            break;
                        }
                    }
                }
                drained
            })
        })
        .collect();
    let drained: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("receiver"))
        .sum();
    (drained, drained as f64 / start.elapsed().as_secs_f64())
}

// ---- SQLite baseline -----------------------------------------------------------------------

fn sqlite_conn(path: &Path) -> rusqlite::Connection {
    let c = rusqlite::Connection::open(path).expect("open sqlite");
    c.busy_timeout(Duration::from_secs(60))
        .expect("busy timeout");
    c.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")
        .expect("pragmas");
    c
}

fn sqlite_open(path: &Path) {
    let c = sqlite_conn(path);
    c.execute_batch(
        "CREATE TABLE IF NOT EXISTS items(
            target BLOB NOT NULL, seq INTEGER NOT NULL, kind TEXT NOT NULL, item_id TEXT NOT NULL,
            sender BLOB NOT NULL, wire BLOB NOT NULL, wire_hash TEXT NOT NULL,
            accepted_at INTEGER NOT NULL, expires_at INTEGER NOT NULL, PRIMARY KEY(target, seq));
         CREATE INDEX IF NOT EXISTS items_expiry ON items(expires_at);
         CREATE TABLE IF NOT EXISTS dedup(
            sender BLOB NOT NULL, item_id TEXT NOT NULL, target BLOB NOT NULL, wire_hash TEXT NOT NULL,
            seq INTEGER NOT NULL, accepted_at INTEGER NOT NULL, PRIMARY KEY(sender, item_id, target));
         CREATE TABLE IF NOT EXISTS seqs(target BLOB PRIMARY KEY, next_seq INTEGER NOT NULL);",
    )
    .expect("schema");
}

fn sqlite_insert(
    c: &mut rusqlite::Connection,
    sender: &Key32,
    item_id: &str,
    target: &Key32,
    bytes: &[u8],
) {
    let hash = hex(&sha2::Sha256::digest(bytes));
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let dup: Option<String> = tx
        .query_row(
            "SELECT wire_hash FROM dedup WHERE sender=?1 AND item_id=?2 AND target=?3",
            rusqlite::params![&sender[..], item_id, &target[..]],
            |r| r.get(0),
        )
        .ok();
    if dup.is_none() {
        let next: i64 = tx
            .query_row(
                "SELECT next_seq FROM seqs WHERE target=?1",
                [&target[..]],
                |r| r.get(0),
            )
            .unwrap_or(1);
        let now = now_ms() as i64;
        let seq = next.max(now);
        tx.execute(
            "INSERT INTO items(target, seq, kind, item_id, sender, wire, wire_hash, accepted_at, expires_at)
             VALUES (?1, ?2, 'envelope', ?3, ?4, ?5, ?6, ?7, ?8)",
            rusqlite::params![&target[..], seq, item_id, &sender[..], bytes, hash, now, now + 14 * 86_400_000],
        )
        .expect("insert item");
        tx.execute(
            "INSERT INTO dedup(sender, item_id, target, wire_hash, seq, accepted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![&sender[..], item_id, &target[..], hash, seq, now],
        )
        .expect("insert dedup");
        tx.execute(
            "INSERT INTO seqs(target, next_seq) VALUES (?1, ?2)
             ON CONFLICT(target) DO UPDATE SET next_seq=excluded.next_seq",
            rusqlite::params![&target[..], seq + 1],
        )
        .expect("seq");
    }
    tx.commit().expect("commit");
}

/// The reference relay is one Node process with one SQLite connection: writers share it
/// (serialised by a mutex here, as by Node's event loop there), one transaction per item.
fn sqlite_inserts(
    conn: &Arc<Mutex<rusqlite::Connection>>,
    writers: usize,
    total: u64,
    run: u64,
    wire_len: usize,
) -> f64 {
    let conn = Arc::clone(conn);
    run_writers(writers, total, move |w, n| {
        let bytes = wire(run * 1_000_000 + n, wire_len);
        let mut c = conn.lock().expect("conn");
        sqlite_insert(
            &mut c,
            &key(w),
            &format!("r{run}-{n}"),
            &key(1_000 + n % TARGETS),
            &bytes,
        );
    })
}

fn sqlite_drain(conn: &Arc<Mutex<rusqlite::Connection>>) -> (u64, f64) {
    let start = Instant::now();
    let handles: Vec<_> = (0..RECEIVERS)
        .map(|r| {
            let conn = Arc::clone(conn);
            std::thread::spawn(move || {
                let mut drained = 0u64;
                for t in (r..TARGETS).step_by(RECEIVERS as usize) {
                    let mut after = 0i64;
                    loop {
                        let mut c = conn.lock().expect("conn");
                        let n = sqlite_drain_page(&mut c, &key(1_000 + t), &mut after);
                        drained += n;
                        if n < PAGE as u64 {
                            break;
                        }
                    }
                }
                drained
            })
        })
        .collect();
    let drained: u64 = handles
        .into_iter()
        .map(|h| h.join().expect("receiver"))
        .sum();
    (drained, drained as f64 / start.elapsed().as_secs_f64())
}

/// One page in one transaction: select after the cursor, delete through the page's last seq.
fn sqlite_drain_page(c: &mut rusqlite::Connection, target: &Key32, after: &mut i64) -> u64 {
    let tx = c
        .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
        .expect("begin");
    let rows: Vec<(i64, Vec<u8>)> = {
        let mut st = tx
            .prepare_cached(
                "SELECT seq, wire FROM items WHERE target=?1 AND seq>?2 ORDER BY seq LIMIT ?3",
            )
            .expect("prepare");
        st.query_map(rusqlite::params![&target[..], *after, PAGE as i64], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
    };
    if let Some((last, _)) = rows.last() {
        *after = *last;
        tx.execute(
            "DELETE FROM items WHERE target=?1 AND seq<=?2",
            rusqlite::params![&target[..], *after],
        )
        .expect("delete");
    }
    tx.commit().expect("commit");
    rows.len() as u64
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn main() {
    // `cargo bench` passes `--bench`; ignore arguments.
    let total = env_u64("MBX_BENCH_ITEMS", 4_000);
    let wire_len = env_u64("MBX_BENCH_WIRE", 1_500) as usize;
    let dir = tempfile::tempdir().expect("tempdir");
    println!("store bench: {total} durable single-item inserts per configuration, {wire_len}-byte wire, {TARGETS} targets");
    let store = fjall_open(&dir.path().join("fjall"));
    let sqlite_path = dir.path().join("sqlite.db");
    sqlite_open(&sqlite_path);
    let sqlite = Arc::new(Mutex::new(sqlite_conn(&sqlite_path)));
    let mut rows = Vec::new();
    for (run, &w) in WRITERS.iter().enumerate() {
        let f = fjall_inserts(&store, w, total, run as u64, wire_len);
        let s = sqlite_inserts(&sqlite, w, total, run as u64, wire_len);
        println!("  inserts, {w:>2} writers: relay-keyspace {f:>9.0}/s   sqlite {s:>8.0}/s   ratio {:>5.1}x", f / s);
        rows.push((format!("inserts, {w} writers"), f, s));
    }
    let (fd, f) = fjall_drain(&store);
    let (sd, s) = sqlite_drain(&sqlite);
    assert_eq!(fd, sd, "both stores should drain the same number of items");
    println!("  drain ({fd} items, {RECEIVERS} receivers, pages of {PAGE}): relay-keyspace {f:.0}/s   sqlite {s:.0}/s");
    rows.push((
        format!("pull+ack drain ({fd} items, {RECEIVERS} receivers)"),
        f,
        s,
    ));
    drop(store);

    println!();
    println!("| workload | relay-keyspace items/s | SQLite items/s | ratio |");
    println!("|---|---:|---:|---:|");
    for (name, f, s) in &rows {
        println!("| {name} | {f:.0} | {s:.0} | {:.1}x |", f / s);
    }
    let (_, f64w, s64w) = &rows[2];
    println!();
    println!("ratio at 64 writers: {:.1}x (target >= 10x)", f64w / s64w);
}
