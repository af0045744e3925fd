//! A quick load generator for `mbx-relay serve` push throughput (not a timed test: it only prints
//! figures; run by hand):
//!
//! ```text
//! cargo test --release -p mbx-relay --test it serve_load:: -- --ignored --nocapture --test-threads 1
//! ```
//!
//! 64 sender threads, each with one keep-alive connection, push pre-signed requests (so the
//! generator spends its CPU on HTTP, not on signing) to 8 enrolled targets. Every accepted item
//! is fsync'd by the relay before its answer; the generator counts `accepted` results only.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{envelope_item, Hop, Host, Relay};
use serde_json::json;

const SENDERS: usize = 64;
const TARGETS: usize = 8;

/// Flags that lift rate limits and quotas so the run measures the push path only.
const UNLIMITED: &[&str] = &[
    "--pushes-per-minute",
    "100000000",
    "--enrol-per-minute",
    "100000000",
    "--enrol-per-minute-v4-24",
    "100000000",
    "--enrol-per-minute-v6-48",
    "100000000",
    "--max-connections-per-address",
    "1024",
    "--max-queue-items",
    "1000000000",
    "--max-queue-bytes",
    "1000000000000",
    "--max-sender-items",
    "1000000000",
    "--max-sender-bytes",
    "1000000000000",
    "--max-account-items",
    "1000000000",
    "--max-account-bytes",
    "1000000000000",
    "--metrics-listen",
    "127.0.0.1:0",
];

/// User + system CPU seconds used so far by process `pid` (Linux `/proc/<pid>/stat`).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after_comm = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after_comm.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are at index 11 and 12 after the command name.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// One pre-built request: the raw HTTP bytes.
fn build_request(sender: &Host, targets: &[Host], items: usize, round: usize) -> Vec<u8> {
    let list: Vec<_> = (0..items)
        .map(|i| envelope_item(sender, &[&targets[(round + i) % targets.len()]]))
        .collect();
    let body = json!({ "items": list }).to_string();
    let mut req = format!(
        "POST /v2/relay/items HTTP/1.1\r\nHost: relay\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in sender.hop_headers("POST", "/v2/relay/items", body.as_bytes(), &Hop::default()) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// Send one request on a keep-alive connection; returns (status, body).
fn roundtrip(w: &mut TcpStream, r: &mut BufReader<TcpStream>, req: &[u8]) -> (u16, Vec<u8>) {
    w.write_all(req).expect("write");
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let mut len = 0usize;
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().expect("content-length");
            }
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).expect("body");
    (status, body)
}

/// Run `requests_per_sender` requests of `items` items from each of 64 senders; print figures.
fn run(label: &str, items: usize, requests_per_sender: usize) {
    let relay = Relay::start(UNLIMITED);
    let targets: Vec<Host> = (0..TARGETS)
        .map(|i| Host::enrolled(&relay, &format!("target{i}")))
        .collect();
    let senders: Vec<Host> = (0..SENDERS)
        .map(|i| Host::enrolled(&relay, &format!("sender{i}")))
        .collect();
    let t = Instant::now();
    let plans: Vec<Vec<Vec<u8>>> = senders
        .iter()
        .map(|s| {
            (0..requests_per_sender)
                .map(|r| build_request(s, &targets, items, r))
                .collect()
        })
        .collect();
    eprintln!(
        "{label}: built {} requests in {:?}",
        SENDERS * requests_per_sender,
        t.elapsed()
    );
    let addr: SocketAddr = relay.addr();
    let barrier = Arc::new(Barrier::new(SENDERS + 1));
    let handles: Vec<_> = plans
        .into_iter()
        .map(|plan| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut w = TcpStream::connect(addr).expect("connect");
                w.set_nodelay(true).ok();
                w.set_read_timeout(Some(Duration::from_secs(60))).ok();
                let mut r = BufReader::new(w.try_clone().expect("clone"));
                let mut accepted = 0usize;
                let mut lat = Vec::with_capacity(plan.len());
                barrier.wait();
                for req in &plan {
                    let t = Instant::now();
                    let (status, body) = roundtrip(&mut w, &mut r, req);
                    lat.push(t.elapsed());
                    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
                    let text = String::from_utf8_lossy(&body);
                    accepted += text.matches("\"status\":\"accepted\"").count();
                }
                (accepted, lat)
            })
        })
        .collect();
    let pid = relay.pid().expect("relay running");
    barrier.wait();
    let cpu0 = cpu_seconds(pid);
    let start = Instant::now();
    let mut accepted = 0;
    let mut lat = Vec::new();
    for h in handles {
        let (a, l) = h.join().expect("sender thread");
        accepted += a;
        lat.extend(l);
    }
    let secs = start.elapsed().as_secs_f64();
    let cpu = cpu_seconds(pid) - cpu0;
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    assert_eq!(
        accepted,
        SENDERS * requests_per_sender * items,
        "every item accepted"
    );
    println!(
        "{label}: {accepted} items in {secs:.2}s = {:.0} items/s, {:.0} requests/s; request latency p50 {:?} p99 {:?}",
        accepted as f64 / secs,
        (SENDERS * requests_per_sender) as f64 / secs,
        pct(0.5),
        pct(0.99)
    );
    println!(
        "{label}: relay CPU {cpu:.2}s = {:.1} us per item ({:.2} cores busy on average)",
        cpu * 1e6 / accepted as f64,
        cpu / secs
    );
    let m = relay.metrics().text();
    for l in m
        .lines()
        .filter(|l| l.starts_with("mbx_relay_store_write_seconds_") && !l.contains("bucket"))
    {
        println!("{label}: {l}");
    }
}

#[test]
#[ignore = "load generator: run by hand with --release --ignored --nocapture"]
fn load_single_item_pushes_64_senders() {
    run("single-item pushes", 1, 400);
}

#[test]
#[ignore = "load generator: run by hand with --release --ignored --nocapture"]
fn load_batches_of_100_64_senders() {
    run("batches of 100", 100, 40);
}

/// CPU seconds used by the calling thread (immune to other processes' load).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// CPU floor of the per-item and per-request signature work on this machine (single thread):
/// one accept signature per item, one hop verification per request.
#[test]
#[ignore = "load generator: run by hand with --release --ignored --nocapture"]
fn cpu_cost_of_signatures() {
    use relay_wire::accept::{accept_statement, AcceptTarget};
    use relay_wire::hop::{sign_hop, verify_hop};
    use relay_wire::keys::SigningKey;
    let relay_key = SigningKey::generate();
    let host = SigningKey::generate();
    let targets = [AcceptTarget {
        host_pubkey: host.public_b64(),
        seq: 1_764_000_000_000,
        wire_hash: "ab".repeat(32),
    }];
    let n = 5_000;
    let t = thread_cpu();
    for i in 0..n {
        let a = accept_statement(
            &relay_key.public_b64(),
            "epoch",
            &host.public_b64(),
            &format!("item{i}"),
            &targets,
            1_764_000_000_000,
        );
        std::hint::black_box(relay_key.sign_canonical(&a));
    }
    let sign_us = (thread_cpu() - t) * 1e6 / f64::from(n);
    let body = "x".repeat(1_000);
    let sig = sign_hop(&host, "POST", "/v2/relay/items", "1764000000000", &body);
    let t = thread_cpu();
    for _ in 0..n {
        std::hint::black_box(verify_hop(
            &host.public(),
            "POST",
            "/v2/relay/items",
            "1764000000000",
            &body,
            &sig,
        ));
    }
    let verify_us = (thread_cpu() - t) * 1e6 / f64::from(n);
    println!("thread CPU: accept statement build+canonical+sign {sign_us:.1} us; hop verify (1 KB body) {verify_us:.1} us");
}
