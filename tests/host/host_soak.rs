//! Soak: host alpha sends N messages to host beta while the relay is killed with SIGKILL three
//! times at random moments. Afterwards beta's inbox holds all N exactly once (and nothing is
//! quarantined), and alpha holds N delivery receipts (every envelope row settled, no alerts).
//!
//! N defaults to 500 (about 30-60 s here); `MBX_SOAK_N` changes it. While alpha queues messages,
//! both hosts sync continuously in other threads, so kills land mid-pass.

use crate::host_util;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use host_util::{pair, HostCli, RelayProc};
use rand::Rng;

#[test]
fn soak_relay_sigkilled_three_times_loses_and_duplicates_nothing() {
    let n: usize = std::env::var("MBX_SOAK_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500)
        .clamp(1, 5_000);
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    a.sync();
    let relay = Arc::new(Mutex::new(relay));

    // Three kills at random moments over the expected sending time (~50 ms per message).
    let window_ms = (n as u64 * 50).max(1_500);
    let killer = {
        let relay = Arc::clone(&relay);
        std::thread::spawn(move || {
            let mut rng = rand::thread_rng();
            let mut at: Vec<u64> = (0..3).map(|_| rng.gen_range(100..window_ms)).collect();
            at.sort_unstable();
            let start = Instant::now();
            for t in at {
                let wait = Duration::from_millis(t).saturating_sub(start.elapsed());
                std::thread::sleep(wait);
                let down = Duration::from_millis(rng.gen_range(20..300));
                let mut r = relay.lock().unwrap();
                r.kill9();
                std::thread::sleep(down);
                r.spawn(None);
            }
            3
        })
    };

    // Both hosts sync continuously while alpha queues messages, so kills land mid-pass on
    // either side (pushes, pulls, acks, receipts).
    let sending = Arc::new(AtomicBool::new(true));
    let syncer = |h: &HostCli| {
        let (h, sending) = (h.clone(), Arc::clone(&sending));
        std::thread::spawn(move || {
            // (passes completed, passes cut short by the relay being down or killed mid-pass)
            let (mut ok, mut cut, mut busy) = (0u32, 0u32, 0u32);
            while sending.load(Ordering::Relaxed) && ok + cut + busy < 100_000 {
                match h.run(&["sync"]) {
                    Ok(_) => ok += 1,
                    Err(e) if e.contains("cannot open host store") => busy += 1,
                    Err(_) => cut += 1,
                }
            }
            (ok, cut)
        })
    };
    let (a_syncer, b_syncer) = (syncer(&a), syncer(&b));
    let started = Instant::now();
    let mut sent = BTreeSet::new();
    for i in 0..n {
        let body = format!("message {i} {}", "x".repeat(i % 97));
        let subject = format!("soak {i}");
        // alpha's store is held by its syncer at times (one process per store): retry the send.
        let id = (0..2_000)
            .find_map(|_| {
                match a.run(&[
                    "send",
                    "--to",
                    "beta",
                    "--subject",
                    &subject,
                    "--body",
                    &body,
                ]) {
                    Ok(v) => Some(v["id"].as_str().unwrap().to_string()),
                    Err(e) => {
                        assert!(e.contains("cannot open host store"), "send failed: {e}");
                        std::thread::sleep(Duration::from_millis(5));
                        None
                    }
                }
            })
            .expect("send gets the store");
        sent.insert(id);
    }
    assert_eq!(
        killer.join().unwrap(),
        3,
        "the relay was killed three times"
    );
    sending.store(false, Ordering::Relaxed);
    let (a_ok, a_cut) = a_syncer.join().unwrap();
    let (b_ok, b_cut) = b_syncer.join().unwrap();
    let send_phase = started.elapsed();
    eprintln!(
        "send phase: alpha passes ok {a_ok}, cut by the relay {a_cut}; beta ok {b_ok}, cut {b_cut}"
    );

    let mut rounds = 0;
    let settled = loop {
        rounds += 1;
        let _ = a.run(&["sync"]);
        let _ = b.run(&["sync"]);
        let st = a.status();
        if st["outbox"]["envelope_done"].as_u64() == Some(n as u64)
            && b.count("receipt_pending") == 0
        {
            break true;
        }
        if rounds >= 100 {
            break false;
        }
    };
    eprintln!(
        "soak n={n}: send phase {send_phase:?}, settled after {rounds} extra rounds, total {:?}",
        started.elapsed()
    );
    assert!(settled, "alpha: {}\nbeta: {}", a.status(), b.status());

    let got: Vec<String> = b.inbox_ids();
    assert_eq!(got.len(), n, "exactly N messages in beta's inbox");
    assert_eq!(
        got.into_iter().collect::<BTreeSet<_>>(),
        sent,
        "the same N messages"
    );
    let bs = b.status();
    assert_eq!(bs["quarantine"], 0, "nothing refused: {bs}");
    let st = a.status();
    assert_eq!(
        st["outbox"]["envelope_done"].as_u64(),
        Some(n as u64),
        "N delivery receipts"
    );
    assert!(st["alerts"].as_array().unwrap().is_empty(), "{st}");
    assert!(relay.lock().unwrap().running());
}
