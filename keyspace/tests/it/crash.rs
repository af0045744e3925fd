//! A child process under a concurrent write load is killed with SIGKILL at a random moment.
//! After reopening: every operation the child saw succeed is there, and nothing partial is:
//! every queued item has its dedup and expiry rows and the usage counters equal a recount.

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use relay_keyspace::*;

const CHILD_ENV: &str = "RELAY_KEYSPACE_CRASH_CHILD_DIR";
const ROUND_ENV: &str = "RELAY_KEYSPACE_CRASH_ROUND";
const WRITERS: u64 = 24;
const TARGETS: u64 = 6;

fn target(n: u64) -> Key32 {
    key(500 + n % TARGETS)
}

fn hexk(k: &Key32) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

/// Child mode: write as fast as possible from many threads, printing each acknowledged
/// operation, until killed (or 20 s pass).
#[test]
#[ignore = "child process of kill9_loses_no_acknowledged_operation"]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let round: u64 = std::env::var(ROUND_ENV).unwrap().parse().unwrap();
    let store = Store::open(std::path::Path::new(&dir), OpenOptions::default()).unwrap();
    for n in 0..TARGETS {
        enrol(&store, target(n), &format!("t{n}"));
    }
    println!("\nREADY");
    let deadline = Instant::now() + Duration::from_secs(20);
    let counter = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, counter) = (store.clone(), counter.clone());
            std::thread::spawn(move || {
                let sender = key(w);
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let c = counter.fetch_add(1, Ordering::Relaxed);
                    // Mostly one target; every third item fans out to two. The id names the
                    // fan-out so the parent can spot a partially stored item.
                    let mut ts = vec![target(c)];
                    if c % 3 == 0 {
                        ts.push(target(c + 1));
                    }
                    let id = format!("r{round}-w{w}-{n}-t{}", ts.len());
                    let wire = format!("{id}:{}", "x".repeat((c % 200) as usize)).into_bytes();
                    let pairs: Vec<(Key32, &[u8])> =
                        ts.iter().map(|t| (*t, wire.as_slice())).collect();
                    let out = store
                        .insert(req(item(sender, &id, &pairs), big_quotas()))
                        .wait()
                        .unwrap();
                    let seqs = stored_seqs(&out);
                    let mut line = format!("OK {} {id}", hexk(&sender));
                    for (t, s) in ts.iter().zip(&seqs) {
                        line.push_str(&format!(" {}:{}", hexk(t), s.seq));
                    }
                    println_locked(&line);
                    if w % 4 == 0 && n % 5 == 4 {
                        let t = target(c);
                        let head = store.cursor(&t).unwrap().head_seq;
                        let through = head.saturating_sub(2);
                        if let AckOutcome::Acked { acked_through, .. } =
                            store.ack(&t, through).wait().unwrap()
                        {
                            println_locked(&format!("ACK {} {acked_through}", hexk(&t)));
                        }
                    }
                    n += 1;
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}

fn println_locked(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// A pseudo-random delay from the clock (no rng dependency).
fn jitter_ms(lo: u64, hi: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    lo + u64::from(nanos) % (hi - lo)
}

#[derive(Default)]
struct Acked {
    /// (sender hex, item id, target hex) -> seq
    inserts: BTreeMap<(String, String, String), u64>,
    /// target hex -> highest acked_through reported
    acks: BTreeMap<String, u64>,
}

fn run_round(dir: &std::path::Path, round: u64, acked: &mut Acked) -> usize {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "crash::crash_child",
            "--nocapture",
            "--ignored",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .env(ROUND_ENV, round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        loop {
            let mut line = String::new();
            match r.read_line(&mut line) {
                // A line cut by the kill has no newline: the child never finished printing it.
                Ok(n) if n > 0 && line.ends_with('\n') => {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
                _ => break,
            }
        }
    });
    // Wait for READY (bounded), then let the load run a random while and kill.
    let start = Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l.contains("READY") => break,
            Ok(_) => {}
            Err(e) => panic!("child never became ready: {e}"),
        }
        assert!(start.elapsed() < Duration::from_secs(30));
    }
    std::thread::sleep(Duration::from_millis(jitter_ms(150, 700)));
    child.kill().unwrap(); // SIGKILL
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child finished before it was killed");
    reader.join().unwrap();
    let mut n = 0;
    for line in rx.try_iter() {
        let mut parts = line.split_whitespace();
        match parts.next() {
            Some("OK") => {
                let sender = parts.next().unwrap().to_string();
                let id = parts.next().unwrap().to_string();
                for ts in parts {
                    let (t, s) = ts.split_once(':').unwrap();
                    acked.inserts.insert(
                        (sender.clone(), id.clone(), t.to_string()),
                        s.parse().unwrap(),
                    );
                }
                n += 1;
            }
            Some("ACK") => {
                let t = parts.next().unwrap().to_string();
                let through: u64 = parts.next().unwrap().parse().unwrap();
                let e = acked.acks.entry(t).or_default();
                *e = (*e).max(through);
            }
            _ => {}
        }
    }
    n
}

/// Every item is stored for all of its targets or for none (acknowledged or not).
fn check_fan_out_complete(store: &Store) {
    let mut per_item: BTreeMap<(String, String), usize> = BTreeMap::new();
    for r in dump(store) {
        if r["partition"] == "dedup" {
            let k = &r["key"];
            let id = k["item_id"].as_str().unwrap().to_string();
            *per_item
                .entry((k["sender"].as_str().unwrap().to_string(), id))
                .or_default() += 1;
        }
    }
    assert!(!per_item.is_empty());
    for ((_, id), n) in per_item {
        let want: usize = id.rsplit_once("-t").unwrap().1.parse().unwrap();
        assert_eq!(n, want, "item {id} stored for {n} of its {want} targets");
    }
}

fn unhex(s: &str) -> Key32 {
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[i * 2..i * 2 + 2], 16).unwrap();
    }
    k
}

#[test]
fn kill9_loses_no_acknowledged_operation() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked = Acked::default();
    for round in 0..3 {
        let n = run_round(dir.path(), round, &mut acked);
        assert!(
            n > 0,
            "round {round}: the child acknowledged nothing before the kill"
        );
        let store = Store::open(dir.path(), OpenOptions::default()).expect("reopen after SIGKILL");
        for ((sender, id, t), seq) in &acked.inserts {
            let (sender, t) = (unhex(sender), unhex(t));
            let row = store.dedup(&sender, id, &t).unwrap();
            assert_eq!(
                row.map(|r| r.seq),
                Some(*seq),
                "acknowledged insert {id} lost"
            );
            let c = store.cursor(&t).unwrap();
            assert!(
                c.head_seq >= *seq,
                "head {} below acknowledged seq {seq}",
                c.head_seq
            );
            if *seq > c.acked_through {
                let page = store.pull(&t, seq - 1, 1, u64::MAX).unwrap();
                assert_eq!(
                    page.items.first().map(|i| (i.seq, i.item_id.as_str())),
                    Some((*seq, id.as_str()))
                );
            }
        }
        for (t, through) in &acked.acks {
            let c = store.cursor(&unhex(t)).unwrap();
            assert!(
                c.acked_through >= *through,
                "acknowledged ack through {through} lost"
            );
        }
        check_invariants(&store);
        check_fan_out_complete(&store);
        store.close().unwrap();
    }
    assert!(
        acked.inserts.len() > 50,
        "too little load to mean anything: {}",
        acked.inserts.len()
    );
}
