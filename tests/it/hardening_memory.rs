//! Bounded memory (issue 7): challenge requests from random keys, requests from distinct client
//! addresses (`--trust-proxy xff` + `X-Forwarded-For`) and many enrolled hosts pushing at once
//! never grow the relay's resident memory (VmHWM, the peak of VmRSS, from /proc/<pid>/status)
//! past [`RSS_BOUND_MIB`].
//!
//! The default run is scaled down to stay well under a minute; the figures (100,000
//! challenges, 100,000 addresses, 10,000 hosts) run with `MBX_HARDENING_SCALE=full`:
//! `MBX_HARDENING_SCALE=full cargo test --release --test it hardening_memory:: -- --nocapture`.
//! The bound and the measured figures are in docs/failure-behaviour.md.
use crate::common;
use crate::hardening_conn as conn;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::*;
use conn::Conn;
use relay_wire::keys::SigningKey;
use serde_json::json;

/// The documented bound on the relay's peak resident memory under this load.
const RSS_BOUND_MIB: u64 = 128;
/// Client threads (each with one keep-alive connection).
const THREADS: usize = 16;

struct Scale {
    challenges: usize,
    addresses: usize,
    hosts: usize,
}

fn scale() -> Scale {
    if std::env::var("MBX_HARDENING_SCALE").as_deref() == Ok("full") {
        Scale {
            challenges: 100_000,
            addresses: 100_000,
            hosts: 10_000,
        }
    } else {
        Scale {
            challenges: 20_000,
            addresses: 20_000,
            hosts: 1_000,
        }
    }
}

/// Run `n` jobs over [`THREADS`] threads, each with its own connection; returns the count of
/// each status code.
fn run_parallel(
    relay: &Relay,
    n: usize,
    job: impl Fn(usize, &mut Conn) -> u16 + Sync,
) -> BTreeMap<u16, usize> {
    let next = AtomicUsize::new(0);
    let counts = Mutex::new(BTreeMap::new());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut c = Conn::new(relay.addr());
                let mut mine = BTreeMap::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    *mine.entry(job(i, &mut c)).or_insert(0) += 1;
                }
                let mut all = counts.lock().unwrap();
                for (k, v) in mine {
                    *all.entry(k).or_insert(0) += v;
                }
            });
        }
    });
    counts.into_inner().unwrap()
}

/// A distinct IPv4 address per index (10.0.0.0/8, then 11/8, ...).
fn address(phase: u8, i: usize) -> String {
    format!(
        "{}.{}.{}.{}",
        10 + phase,
        (i >> 16) & 0xff,
        (i >> 8) & 0xff,
        i & 0xff
    )
}

#[test]
fn floods_of_challenges_addresses_and_pushing_hosts_stay_under_the_memory_bound() {
    let sc = scale();
    let relay = Relay::start(&[
        "--trust-proxy",
        "xff",
        "--pushes-per-minute",
        "1000000",
        "--enrol-per-minute",
        "1000000",
        "--enrol-per-minute-v4-24",
        "1000000",
        "--enrol-per-minute-v6-48",
        "1000000",
        "--public-per-minute",
        "1000000",
        "--max-connections",
        "256",
    ]);
    let pid = relay.pid().expect("pid");
    let mut report = vec![("start".to_string(), proc_status_kib(pid, "VmRSS"))];

    // Many enrolled hosts (enrolled from the socket address), then all pushing at once: each
    // sends a sealed envelope to the next host in a ring.
    let hosts: Vec<Host> = (0..sc.hosts)
        .map(|i| Host {
            name: format!("h{i}"),
            key: SigningKey::generate(),
        })
        .collect();
    let enrolled = run_parallel(&relay, sc.hosts, |i, c| {
        let h = &hosts[i];
        let body = json!({"host": h.name, "pubkey": h.pubkey()}).to_string();
        let r = c.request("POST", "/v1/relay/challenge", &[], body.as_bytes());
        assert_eq!(
            r.status,
            200,
            "challenge: {}",
            String::from_utf8_lossy(&r.body)
        );
        let challenge = r.json()["challenge"].as_str().unwrap().to_string();
        let body = h.enrol_body(&challenge, "", None).to_string();
        c.request("POST", "/v1/relay/enrol", &[], body.as_bytes())
            .status
    });
    assert_eq!(
        enrolled.get(&200),
        Some(&sc.hosts),
        "enrolments: {enrolled:?}"
    );
    report.push((
        format!("{} hosts enrolled", sc.hosts),
        proc_status_kib(pid, "VmRSS"),
    ));
    let pushed = run_parallel(&relay, sc.hosts, |i, c| {
        let (h, to) = (&hosts[i], &hosts[(i + 1) % hosts.len()]);
        let body = json!({"items": [envelope_item(h, &[to])]}).to_string();
        let hop = h.hop_headers("POST", "/v2/relay/items", body.as_bytes(), &Hop::default());
        let hh: Vec<(&str, &str)> = hop.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let r = c.request("POST", "/v2/relay/items", &hh, body.as_bytes());
        assert_eq!(r.status, 200, "push: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["results"][0]["status"], json!("accepted"));
        r.status
    });
    assert_eq!(pushed.get(&200), Some(&sc.hosts));
    report.push((
        format!("{} hosts pushed", sc.hosts),
        proc_status_kib(pid, "VmRSS"),
    ));

    // Challenge requests from random keys, each from its own address.
    let challenged = run_parallel(&relay, sc.challenges, |i, c| {
        let body = json!({"host": "flood", "pubkey": random_pubkey()}).to_string();
        let xff = address(0, i);
        c.request(
            "POST",
            "/v1/relay/challenge",
            &[("x-forwarded-for", &xff)],
            body.as_bytes(),
        )
        .status
    });
    report.push((
        format!("{} challenges {challenged:?}", sc.challenges),
        proc_status_kib(pid, "VmRSS"),
    ));
    assert_eq!(
        challenged.values().sum::<usize>(),
        sc.challenges,
        "every challenge answered"
    );
    assert!(
        challenged.keys().all(|s| [200, 503].contains(s)),
        "only 200 or 503 (too many open challenges); a full address table evicts, never 429: \
         {challenged:?}"
    );

    // Distinct client addresses on an unauthenticated route. The socket address calls first, so
    // it holds a window: once the address table is full, the oldest window is evicted and every
    // new address is still served.
    assert_eq!(relay.get("/v2/relay/info").status, 200);
    let addressed = run_parallel(&relay, sc.addresses, |i, c| {
        let xff = address(1, i);
        c.request("GET", "/v2/relay/info", &[("x-forwarded-for", &xff)], b"")
            .status
    });
    report.push((
        format!("{} addresses {addressed:?}", sc.addresses),
        proc_status_kib(pid, "VmRSS"),
    ));
    assert_eq!(
        addressed.get(&200),
        Some(&sc.addresses),
        "every new address served: {addressed:?}"
    );

    relay.assert_alive();
    let pulled = hosts[0].pull(&relay, "");
    assert_eq!(
        pulled.status, 200,
        "signed calls are not limited per address"
    );
    let peak = proc_status_kib(pid, "VmHWM");
    for (phase, rss) in &report {
        eprintln!("memory: after {phase}: VmRSS {} MiB", rss / 1024);
    }
    eprintln!(
        "memory: peak VmHWM {} MiB (bound {RSS_BOUND_MIB} MiB)",
        peak / 1024
    );
    assert!(
        peak <= RSS_BOUND_MIB * 1024,
        "peak resident memory {} MiB is over the documented bound {RSS_BOUND_MIB} MiB",
        peak / 1024
    );
}
