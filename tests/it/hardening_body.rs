//! Attacks on request bodies and signed hops against the real binary (issue 19 items 1, 3 and 5,
//! issue 18's "413 then drain"), each measuring what an honest client sees meanwhile. Client
//! addresses are simulated with `--trust-proxy xff` and `X-Forwarded-For`; everything runs on
//! loopback and stops by itself.
//!
//! - Bodies cost nothing before the hop's headers name a live key with a fresh ts, and reserve
//!   memory only as they arrive; one address holds at most its share.
//! - Failed authentications are counted per address; signatures over large bodies are checked
//!   off the async workers, hashed as a stream (memory near the body size).
//! - A request whose hop fails counts against the public window.
//! - A body over the cap is answered 413, then drained, so a client still writing reads it; so
//!   is a hop refused from its headers before its body is read (401, 429), and an unknown path.
use crate::common;
use crate::hardening_conn as conn;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use conn::Conn;
use relay_wire::keys::SigningKey;
use serde_json::json;

/// The general body cap (8 MiB).
const MAX_BODY: usize = 8 * 1024 * 1024;
/// Held by every test here: each loads the machine, and the timing tests measure what an
/// honest client sees under one attack, not under the others.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Run one test alone among this file's tests.
fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// The address the honest client's requests come from.
const HONEST: &str = "203.0.113.1";

/// `/proc/<pid>/status` line `<name>: <n> kB`, in MiB.
fn status_mib(pid: u32, name: &str) -> u64 {
    proc_status_kib(pid, name) / 1024
}

/// A request head with these headers (plus `host` and `x-forwarded-for: addr`).
fn head(
    method: &str,
    path: &str,
    addr: &str,
    headers: &[(String, String)],
    framing: &str,
) -> Vec<u8> {
    let mut h = format!("{method} {path} HTTP/1.1\r\nhost: relay\r\nx-forwarded-for: {addr}\r\n");
    for (k, v) in headers {
        h.push_str(&format!("{k}: {v}\r\n"));
    }
    h.push_str(framing);
    h.push_str("\r\n");
    h.into_bytes()
}

/// A well-formed signature (a curve point and a canonical scalar, so the relay must hash the
/// whole payload to refuse it) that matches no request.
fn junk_sig() -> String {
    SigningKey::generate().sign(b"junk")
}

/// Hop headers naming `key` (base64) with `ts` and a signature that matches nothing.
fn junk_hop(key: &str, ts: i64) -> Vec<(String, String)> {
    vec![
        ("x-mbx-host".into(), "attacker".into()),
        ("x-mbx-key".into(), key.into()),
        ("x-mbx-ts".into(), ts.to_string()),
        ("x-mbx-sig".into(), junk_sig()),
    ]
}

/// An open connection that sent `bytes` and waits for its answer.
struct Held {
    stream: TcpStream,
    got: Vec<u8>,
    sent_at: Instant,
    answered: Option<Duration>,
}

fn open_held(relay: &Relay, bytes: &[u8]) -> Held {
    let mut stream = TcpStream::connect(relay.addr()).expect("connect");
    stream.write_all(bytes).expect("head");
    stream.set_nonblocking(true).expect("nonblocking");
    Held {
        stream,
        got: Vec::new(),
        sent_at: Instant::now(),
        answered: None,
    }
}

/// Read what each held connection has; note when its status line first arrived.
fn poll_held(held: &mut [Held]) {
    let mut buf = [0u8; 4096];
    for h in held.iter_mut().filter(|h| h.answered.is_none()) {
        match h.stream.read(&mut buf) {
            Ok(0) => h.answered = Some(h.sent_at.elapsed()),
            Ok(n) => {
                h.got.extend_from_slice(&buf[..n]);
                if h.got.windows(4).any(|w| w == b"\r\n\r\n") {
                    h.answered = Some(h.sent_at.elapsed());
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(_) => h.answered = Some(h.sent_at.elapsed()),
        }
    }
}

fn status_of(raw: &[u8]) -> u16 {
    String::from_utf8_lossy(raw)
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// One round of the honest client from [`HONEST`]: `/health`, unsigned info and a signed push
/// from `from` to `to`; each one's status and time.
fn honest_round(relay: &Relay, from: &Host, to: &Host) -> [(&'static str, u16, Duration); 3] {
    let xff = [("x-forwarded-for", HONEST)];
    let t = Instant::now();
    let health = relay.send("GET", "/health", &xff, b"").status;
    let health_t = t.elapsed();
    let t = Instant::now();
    let info = relay.send("GET", "/v2/relay/info", &xff, b"").status;
    let info_t = t.elapsed();
    let body = json!({ "items": [from.envelope_to(&[to])] }).to_string();
    let t = Instant::now();
    let push = from
        .call_with(
            relay,
            "POST",
            "/v2/relay/items",
            body.as_bytes(),
            &Hop::default(),
            &xff,
        )
        .status;
    let push_t = t.elapsed();
    [
        ("health", health, health_t),
        ("info", info, info_t),
        ("push", push, push_t),
    ]
}

/// The honest client's times of one kind over a span of rounds.
#[derive(Debug, Clone, Copy)]
struct Times {
    median: Duration,
    worst: Duration,
}

/// Honest rounds for `span`, asserting every answer is 200; the median and slowest time of
/// each kind (health, info, push).
fn honest_rounds(relay: &Relay, from: &Host, to: &Host, span: Duration) -> [Times; 3] {
    let mut took: [Vec<Duration>; 3] = Default::default();
    let start = Instant::now();
    while start.elapsed() < span {
        for (i, (what, status, t)) in honest_round(relay, from, to).into_iter().enumerate() {
            assert_eq!(status, 200, "{what}");
            took[i].push(t);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    took.map(|mut ts| {
        ts.sort();
        Times {
            median: ts[ts.len() / 2],
            worst: ts[ts.len() - 1],
        }
    })
}

#[test]
fn bodies_cost_nothing_before_a_live_key_and_fresh_ts_and_honest_clients_stay_fast() {
    let _alone = alone();
    // Every connection comes from 127.0.0.1 (addresses are simulated with X-Forwarded-For), so
    // the socket-level per-address connection cap is lifted as behind a proxy.
    let relay = Relay::start_generous(&[
        "--trust-proxy",
        "xff",
        "--body-first-byte-timeout",
        "2s",
        "--max-connections-per-address",
        "1024",
    ]);
    let honest = Host::enrolled(&relay, "honest");
    let target = Host::enrolled(&relay, "target");
    let known = Host::enrolled(&relay, "known");
    let declared = format!("content-type: application/json\r\ncontent-length: {MAX_BODY}\r\n");
    let chunked = "content-type: application/json\r\ntransfer-encoding: chunked\r\n";
    let baseline = honest_rounds(&relay, &honest, &target, Duration::from_millis(300));

    // 256 connections whose headers fail: no hop, an unknown key, a live key with a stale ts,
    // an unknown v1 name; half declaring 8 MiB, half chunked without a length; 32 of them from
    // one address. None sends a body byte.
    let mut keyless = Vec::new();
    for i in 0..256usize {
        let addr = if i < 32 {
            "198.51.100.32".to_string()
        } else {
            format!("10.1.{}.{}", i / 256, i % 256)
        };
        let hop = match i % 4 {
            0 => Vec::new(),
            1 => junk_hop(&random_pubkey(), now_ms()),
            2 => junk_hop(&known.pubkey(), now_ms() - 600_000),
            _ => vec![
                ("x-mbx-host".into(), format!("nobody-{i}")),
                ("x-mbx-ts".into(), now_ms().to_string()),
                ("x-mbx-sig".into(), junk_sig()),
            ],
        };
        let framing = if i % 2 == 0 {
            declared.as_str()
        } else {
            chunked
        };
        keyless.push(open_held(
            &relay,
            &head("POST", "/v2/relay/items", &addr, &hop, framing),
        ));
    }
    // 256 more whose headers pass (a live key, a fresh ts, a signature nobody can check without
    // the body), declaring 8 MiB and sending nothing; 32 from one address.
    let mut keyed = Vec::new();
    for i in 0..256usize {
        let addr = if i < 32 {
            "198.51.100.64".to_string()
        } else {
            format!("10.2.{}.{}", i / 256, i % 256)
        };
        let framing = if i % 2 == 0 {
            declared.as_str()
        } else {
            chunked
        };
        keyed.push(open_held(
            &relay,
            &head(
                "POST",
                "/v2/relay/items",
                &addr,
                &junk_hop(&known.pubkey(), now_ms()),
                framing,
            ),
        ));
    }

    // Watch every held connection from another thread while the honest client works.
    let watcher = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline
            && keyless.iter().chain(&keyed).any(|h| h.answered.is_none())
        {
            poll_held(&mut keyless);
            poll_held(&mut keyed);
            std::thread::sleep(Duration::from_millis(5));
        }
        (keyless, keyed)
    });
    let during = honest_rounds(&relay, &honest, &target, Duration::from_millis(1500));
    eprintln!(
        "honest times (health, info, push): before {baseline:?}, with 512 held connections {during:?}"
    );
    // Honest requests queued behind the held connections would wait for their 2 s first-byte
    // deadline; a relay sharing 2 cores with other test binaries can stall one request for a
    // few hundred ms (a fresh-clone CI run saw one over 100 ms), so the typical time is held to
    // 100 ms and the slowest to half the deadline.
    for (what, t) in ["health", "info", "push"].iter().zip(during) {
        assert!(t.median < Duration::from_millis(100), "{what}: {t:?}");
        assert!(t.worst < Duration::from_secs(1), "{what}: {t:?}");
    }
    let (keyless, keyed) = watcher.join().expect("watcher");
    for h in &keyless {
        let took = h.answered.expect("every failed hop is answered");
        let status = status_of(&h.got);
        assert!(status == 401 || status == 429, "failed hop: {status}");
        // Held to the 2 s first-byte deadline would be at least 2 s (the keyed ones below are
        // checked against 1.5 s from the other side); 256 answers from a relay sharing 2 cores
        // with other tests once took 1.09 s (a fresh-clone CI run), so the bound is that line.
        assert!(
            took < Duration::from_millis(1500),
            "answered at once, not held: {took:?}"
        );
    }
    for h in &keyed {
        let took = h.answered.expect("every silent body is cut off");
        assert_eq!(
            status_of(&h.got),
            400,
            "{}",
            String::from_utf8_lossy(&h.got)
        );
        assert!(
            String::from_utf8_lossy(&h.got).contains("request body could not be read"),
            "{}",
            String::from_utf8_lossy(&h.got)
        );
        assert!(
            took >= Duration::from_millis(1500) && took < Duration::from_secs(10),
            "cut off by the first-byte deadline: {took:?}"
        );
    }
    relay.assert_alive();
}

/// Send `head` and then `len` bytes of body (in one write), without reading.
fn send_body(relay: &Relay, head: &[u8], len: usize) -> TcpStream {
    let mut s = TcpStream::connect(relay.addr()).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head).unwrap();
    s.write_all(&vec![b' '; len]).unwrap();
    s
}

#[test]
fn one_address_holds_at_most_its_share_of_body_memory() {
    let _alone = alone();
    let one_body = MAX_BODY.to_string(); // the smallest share the relay accepts
    let relay = Relay::start_generous(&[
        "--trust-proxy",
        "xff",
        "--max-body-bytes-per-address",
        &one_body,
        "--body-first-byte-timeout",
        "2s",
    ]);
    let known = Host::enrolled(&relay, "known");
    let target = Host::enrolled(&relay, "target");
    let declared = format!("content-type: application/json\r\ncontent-length: {MAX_BODY}\r\n");
    let busy = "198.51.100.7";
    let hop = junk_hop(&known.pubkey(), now_ms());
    // 6 MiB of an 8 MiB body, then silence: the address holds 6 MiB.
    let first = send_body(
        &relay,
        &head("POST", "/v2/relay/items", busy, &hop, &declared),
        6 * 1024 * 1024,
    );
    std::thread::sleep(Duration::from_millis(500));
    // A second body from the same address passes its 8 MiB share while arriving: 429, which
    // the client reads after writing 4 MiB (the rest is drained).
    let mut second = send_body(
        &relay,
        &head("POST", "/v2/relay/items", busy, &hop, &declared),
        4 * 1024 * 1024,
    );
    let r = parse_response(&read_until_close(&mut second).expect("an answer")).expect("parses");
    r.assert_error(
        429,
        "too many request bytes in flight from this address, retry later",
    );
    // Another address is served meanwhile.
    let body = json!({ "items": [known.envelope_to(&[&target])] }).to_string();
    let r = known.call_with(
        &relay,
        "POST",
        "/v2/relay/items",
        body.as_bytes(),
        &Hop::default(),
        &[("x-forwarded-for", "198.51.100.8")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    // Once the first body is gone, the address has its share back.
    drop(first);
    std::thread::sleep(Duration::from_millis(300));
    let r = known.call_with(
        &relay,
        "POST",
        "/v2/relay/items",
        body.as_bytes(),
        &Hop::default(),
        &[("x-forwarded-for", busy)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    relay.assert_alive();
}

#[test]
fn failed_authentications_are_counted_per_address_then_refused_with_429() {
    let _alone = alone();
    let relay = Relay::start_generous(&["--trust-proxy", "xff", "--auth-failures-per-minute", "5"]);
    let known = Host::enrolled(&relay, "known");
    let from = |addr: &'static str| [("x-forwarded-for", addr)];
    let junk = |addr: &'static str| {
        let hop = junk_hop(&known.pubkey(), now_ms());
        let mut h: Vec<(&str, &str)> = hop.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        h.extend(from(addr));
        relay.send("GET", "/v2/relay/items", &h, b"")
    };
    for _ in 0..5 {
        junk("198.51.100.20").assert_error(401, "bad relay hop");
    }
    let r = junk("198.51.100.20");
    r.assert_error(
        429,
        "too many failed authentications from this address, retry later",
    );
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "until the window frees: {wait}");
    // Past the window the address's hops are not checked at all, valid ones included.
    let r = known.call_with(
        &relay,
        "GET",
        "/v2/relay/items",
        b"",
        &Hop::default(),
        &from("198.51.100.20"),
    );
    assert_eq!(r.status, 429);
    // Another address is not affected; an unknown key is a failure like a bad signature.
    let r = known.call_with(
        &relay,
        "GET",
        "/v2/relay/items",
        b"",
        &Hop::default(),
        &from("198.51.100.21"),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    for _ in 0..5 {
        let hop = junk_hop(&random_pubkey(), now_ms());
        let mut h: Vec<(&str, &str)> = hop.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        h.push(("x-forwarded-for", "198.51.100.22"));
        relay
            .send("GET", "/v2/relay/items", &h, b"")
            .assert_error(401, "bad relay hop");
    }
    assert_eq!(junk("198.51.100.22").status, 429);
}

/// The status of the response to come on `s` (its content-length body consumed), or `None`
/// when the connection closes or `stop` is set first.
fn status_unless_stopped(s: &mut TcpStream, stop: &AtomicBool) -> Option<u16> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if raw.len() >= end + 4 + len {
                return Some(status_of(&raw));
            }
        }
        match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

/// Clients flooding 8 MiB bodies of control bytes with junk signatures.
const FLOOD_CLIENTS: usize = 48;
/// How long the flood ramps up before the honest client's latencies count.
const FLOOD_RAMP: Duration = Duration::from_secs(1);
/// How long the flood goes on while they are measured.
const FLOOD_TIME: Duration = Duration::from_secs(4);
/// How long the flood may go on after [`FLOOD_TIME`] until at least one body was checked.
const FLOOD_CHECK_WAIT: Duration = Duration::from_secs(60);
/// The documented bound on the relay's peak resident memory under the flood: the shared body
/// budget (256 MiB: at most 32 full bodies in flight, each held once, never an escaped copy)
/// plus 64 MiB for connection buffers, allocator slack and the rest of the relay. Freed bodies
/// kept resident for mimalloc's purge delay took the peak to 345-353 MiB; returned at once
/// (`mbx_relay::memory::RelayAlloc`) it is 271 MiB.
const FLOOD_RSS_BOUND_MIB: u64 = 320;
/// The bound on unsigned info's p99 latency under the flood: seen at 6-15 ms on a quiet machine
/// and 76 ms at load ~12 (other builds beside the suite); unfixed, seconds (3.3 s).
const FLOOD_INFO_P99: Duration = Duration::from_millis(250);

/// Unsigned info calls from [`HONEST`] on `conn` every 10 ms for `span`: their latencies
/// (sorted) and the relay's peak sampled VmRSS.
fn info_latencies(conn: &mut Conn, pid: u32, span: Duration) -> (Vec<Duration>, u64) {
    let mut latencies = Vec::new();
    let mut peak_rss = 0;
    let start = Instant::now();
    while start.elapsed() < span {
        let t = Instant::now();
        let r = conn.request("GET", "/v2/relay/info", &[("x-forwarded-for", HONEST)], b"");
        latencies.push(t.elapsed());
        assert_eq!(r.status, 200);
        peak_rss = peak_rss.max(status_mib(pid, "VmRSS"));
        std::thread::sleep(Duration::from_millis(10));
    }
    latencies.sort();
    (latencies, peak_rss)
}

/// The `q` quantile of sorted `v`.
fn quantile(v: &[Duration], q: f64) -> Duration {
    v[((v.len() - 1) as f64 * q) as usize]
}

#[test]
fn a_junk_signature_flood_leaves_unsigned_info_fast_and_memory_bounded() {
    let _alone = alone();
    // The failure window and the key's share (all 48 clients use one key) are opened wide so
    // every junk body is read and checked: this measures the cost of the checks themselves.
    let relay = Relay::start_generous(&[
        "--trust-proxy",
        "xff",
        "--auth-failures-per-minute",
        "1000000",
        "--max-body-bytes-per-key",
        "1073741824",
    ]);
    let pid = relay.pid().expect("pid");
    let known = Host::enrolled(&relay, "known");
    let rss_before = status_mib(pid, "VmRSS");
    let mut info = Conn::new(relay.addr());
    // What the machine gives the honest client without the flood (other builds may load it).
    let (quiet, _) = info_latencies(&mut info, pid, Duration::from_secs(1));
    // A body of \u0001 is the worst case for escaping: six bytes of payload per body byte.
    let mut request = head(
        "POST",
        "/v2/relay/items",
        "",
        &junk_hop(&known.pubkey(), now_ms()),
        &format!("content-type: application/json\r\ncontent-length: {MAX_BODY}\r\n"),
    );
    request.extend(std::iter::repeat_n(1u8, MAX_BODY));
    let request = Arc::new(request);
    let stop = Arc::new(AtomicBool::new(false));
    let refused = Arc::new(Mutex::new(0usize));
    let mut clients = Vec::new();
    for c in 0..FLOOD_CLIENTS {
        let (request, stop, refused) = (request.clone(), stop.clone(), refused.clone());
        let addr = relay.addr();
        clients.push(std::thread::spawn(move || {
            // Each client its own address: replace the empty x-forwarded-for value.
            let xff = format!("x-forwarded-for: 10.3.0.{c}");
            let text = String::from_utf8_lossy(&request[..request.len() - MAX_BODY])
                .replace("x-forwarded-for: ", &xff);
            let mut bytes = text.into_bytes();
            bytes.extend_from_slice(&request[request.len() - MAX_BODY..]);
            let mut conn: Option<TcpStream> = None;
            while !stop.load(Ordering::Relaxed) {
                let s = conn.get_or_insert_with(|| {
                    let s = TcpStream::connect(addr).expect("connect");
                    s.set_read_timeout(Some(Duration::from_millis(100)))
                        .unwrap();
                    s
                });
                if s.write_all(&bytes).is_err() {
                    conn = None;
                    continue;
                }
                match status_unless_stopped(s, &stop) {
                    // 503: the body found the budget taken for longer than the budget wait.
                    Some(503) => {}
                    Some(status) => {
                        assert_eq!(status, 401);
                        *refused.lock().unwrap() += 1;
                    }
                    None => conn = None,
                }
            }
        }));
    }
    // The honest client: unsigned info every 10 ms on a kept-alive connection, first while the
    // flood ramps up (the relay reads the first 32 bodies, 256 MiB, at once), then while it
    // goes on.
    let (ramp, _) = info_latencies(&mut info, pid, FLOOD_RAMP);
    let (latencies, peak_rss) = info_latencies(&mut info, pid, FLOOD_TIME);
    // Checks run at nice 10: on a loaded machine (load ~12) none had finished by now, so the
    // flood goes on, bounded, until one has and the memory bound has seen a checked body.
    let checking = Instant::now();
    while *refused.lock().unwrap() == 0 && checking.elapsed() < FLOOD_CHECK_WAIT {
        std::thread::sleep(Duration::from_millis(50));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().expect("flood client");
    }
    let hwm = status_mib(pid, "VmHWM");
    let p = |q: f64| quantile(&latencies, q);
    let checked = *refused.lock().unwrap();
    eprintln!(
        "junk flood: {FLOOD_CLIENTS} clients, {checked} 8 MiB junk-signed bodies refused; \
         over {FLOOD_TIME:?} after the ramp, unsigned info n={} p50 {:?} p99 {:?} max {:?}; relay VmRSS {rss_before} \
         MiB before, peak sampled {peak_rss} MiB, VmHWM {hwm} MiB; without the flood: \
         p50 {:?} p99 {:?}; during the first {FLOOD_RAMP:?}: p50 {:?} max {:?}",
        latencies.len(),
        p(0.5),
        p(0.99),
        p(1.0),
        quantile(&quiet, 0.5),
        quantile(&quiet, 0.99),
        quantile(&ramp, 0.5),
        quantile(&ramp, 1.0),
    );
    assert!(checked >= 1, "the flood was checked: {checked}");
    // On a machine already slow without the flood (other builds running), the bound scales
    // with what the client saw then; unfixed, this flood took info from 1 ms to seconds.
    let bound = FLOOD_INFO_P99.max(quantile(&quiet, 0.99) * 5);
    assert!(p(0.99) < bound, "info p99 {:?} (bound {bound:?})", p(0.99));
    assert!(
        quantile(&ramp, 1.0) < Duration::from_secs(1),
        "even while the flood ramps up info answers within a second (unfixed: 3.3 s)"
    );
    assert!(hwm < FLOOD_RSS_BOUND_MIB, "VmHWM {hwm} MiB");
    relay.assert_alive();
}

#[test]
fn a_failed_hop_counts_against_the_public_window_and_a_valid_one_does_not() {
    let _alone = alone();
    let relay = Relay::start_generous(&[
        "--trust-proxy",
        "xff",
        "--public-per-minute",
        "20",
        "--auth-failures-per-minute",
        "1000",
    ]);
    let known = Host::enrolled(&relay, "known");
    let addr = "198.51.100.30";
    let mut served = 0;
    for i in 0..60 {
        // Junk signatures by a live key and by an unknown one.
        let key = if i % 2 == 0 {
            known.pubkey()
        } else {
            random_pubkey()
        };
        let hop = junk_hop(&key, now_ms());
        let mut h: Vec<(&str, &str)> = hop.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        h.push(("x-forwarded-for", addr));
        match relay.send("GET", "/v2/relay/info", &h, b"").status {
            200 => served += 1,
            429 => {}
            s => panic!("status {s}"),
        }
    }
    assert_eq!(
        served, 20,
        "junk-signed info calls are counted like unsigned ones"
    );
    let r = relay.send("GET", "/v2/relay/info", &[("x-forwarded-for", addr)], b"");
    r.assert_error(429, "too many requests from this address, retry later");
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait), "until the window frees: {wait}");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    // A valid signed info call from the same address is still served, and not counted.
    for _ in 0..5 {
        let r = known.call_with(
            &relay,
            "GET",
            "/v2/relay/info",
            b"",
            &Hop::default(),
            &[("x-forwarded-for", addr)],
        );
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.json().get("you").is_some(), "signed info has `you`");
    }
}

/// Write `head` then `body` completely before reading anything; the answer read afterwards.
fn write_all_then_read(relay: &Relay, head: &[u8], body: &[u8]) -> Response {
    let mut s = TcpStream::connect(relay.addr()).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head).expect("head");
    s.write_all(body)
        .expect("the relay keeps reading the refused body, so the whole body can be written");
    parse_response(&read_until_close(&mut s).expect("the answer is readable")).expect("parses")
}

/// `body` in chunked transfer coding, 64 KiB a chunk.
fn chunked_body(body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + body.len() / 1000 + 16);
    for c in body.chunks(64 * 1024) {
        out.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
        out.extend_from_slice(c);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

#[test]
fn an_oversized_body_is_answered_413_and_drained_so_a_client_still_writing_reads_it() {
    let _alone = alone();
    let relay = Relay::start_generous(&["--trust-proxy", "xff"]);
    let known = Host::enrolled(&relay, "known");
    let big = vec![b' '; 9 * 1024 * 1024];
    let hop = known.hop_headers("POST", "/v2/relay/items", b"{}", &Hop::default());
    let cases = [
        ("/v2/relay/items", &big[..], hop.clone()),
        ("/v1/relay/challenge", &big[..64 * 1024], Vec::new()),
    ];
    for (path, body, hop) in cases {
        let length = format!("content-length: {}\r\n", body.len());
        let r = write_all_then_read(
            &relay,
            &head("POST", path, "198.51.100.40", &hop, &length),
            body,
        );
        r.assert_error(413, "request body too large");
        assert_eq!(r.header("connection"), Some("close"), "{path}");
        let r = write_all_then_read(
            &relay,
            &head(
                "POST",
                path,
                "198.51.100.40",
                &hop,
                "transfer-encoding: chunked\r\n",
            ),
            &chunked_body(body),
        );
        r.assert_error(413, "request body too large");
    }
    // The drain is bounded: a client that never stops writing is cut off after 64 MiB.
    let mut s = TcpStream::connect(relay.addr()).expect("connect");
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&head(
        "POST",
        "/v2/relay/items",
        "198.51.100.41",
        &hop,
        "transfer-encoding: chunked\r\n",
    ))
    .unwrap();
    let chunk = chunked_body(&big[..1024 * 1024]);
    let chunk = &chunk[..chunk.len() - 5]; // without the last-chunk marker
    let mut written = 0usize;
    while written < 200 * 1024 * 1024 && s.write_all(chunk).is_ok() {
        written += chunk.len();
    }
    eprintln!("drain bound: the relay closed after the client wrote {written} bytes");
    assert!(
        written < 100 * 1024 * 1024,
        "the relay stopped reading after the bound: {written} bytes written"
    );
    relay.assert_alive();
}

#[test]
fn a_hop_refused_before_its_body_is_read_is_answered_then_drained_so_a_client_still_writing_reads_it(
) {
    let _alone = alone();
    let relay = Relay::start_generous(&["--trust-proxy", "xff", "--auth-failures-per-minute", "1"]);
    // A full-size body behind a hop naming no enrolled key: refused from its headers alone.
    let body = vec![b' '; MAX_BODY];
    let length = format!("content-type: application/json\r\ncontent-length: {MAX_BODY}\r\n");
    let hop = junk_hop(&random_pubkey(), now_ms());
    let request = head("POST", "/v2/relay/items", "198.51.100.50", &hop, &length);
    let r = write_all_then_read(&relay, &request, &body);
    r.assert_error(401, "bad relay hop");
    assert_eq!(r.header("connection"), Some("close"));
    // The address's window is used up: the 429 is drained the same way.
    let r = write_all_then_read(&relay, &request, &body);
    r.assert_error(
        429,
        "too many failed authentications from this address, retry later",
    );
    assert_eq!(r.header("connection"), Some("close"));
    // An unknown path is answered without reading its body, drained the same way.
    let r = write_all_then_read(
        &relay,
        &head("POST", "/v2/relay/nothing", "198.51.100.51", &[], &length),
        &body,
    );
    r.assert_error(404, "not found");
    assert_eq!(r.header("connection"), Some("close"));
    relay.assert_alive();
}

/// Open `per_address` connections from each of `addresses` addresses (`10.{net}.0.N`), each
/// declaring an 8 MiB body signed by `key` with a junk signature and sending its first byte.
fn one_byte_bodies(relay: &Relay, key: &str, net: u8, addresses: usize, per: usize) -> Vec<Held> {
    let declared = format!("content-type: application/json\r\ncontent-length: {MAX_BODY}\r\n");
    let mut held = Vec::new();
    for a in 0..addresses {
        let addr = format!("10.{net}.{}.{}", a / 256, a % 256);
        for _ in 0..per {
            let mut bytes = head(
                "POST",
                "/v2/relay/items",
                &addr,
                &junk_hop(key, now_ms()),
                &declared,
            );
            bytes.push(b'{');
            held.push(open_held(relay, &bytes));
        }
    }
    held
}

/// Issue 24 item 1: an enrolled key's junk-signed bodies that declare 8 MiB and send one byte
/// held the whole 256 MiB budget (a body reserved its declared length at its first byte), and
/// an honest push waited for the body timeout. Now a body holds what it has sent, it must keep
/// a minimum rate after its first byte, and one that never arrives whole counts as a failed
/// authentication of its address.
#[test]
fn one_byte_bodies_of_a_live_key_do_not_hold_the_budget_and_count_as_failures() {
    let _alone = alone();
    // Short deadlines keep the test fast; the body timeout is the longest the unfixed relay
    // made the honest push wait.
    let relay = Relay::start_generous(&[
        "--trust-proxy",
        "xff",
        "--max-connections-per-address",
        "1024",
        "--body-first-byte-timeout",
        "2s",
        "--body-timeout",
        "8s",
        "--auth-failures-per-minute",
        "4",
    ]);
    let honest = Host::enrolled(&relay, "honest");
    let target = Host::enrolled(&relay, "target");
    let known = Host::enrolled(&relay, "known");
    let push = json!({ "items": [honest.envelope_to(&[&target])] }).to_string();
    let pid = relay.pid().expect("pid");
    let rss_before = status_mib(pid, "VmRSS");
    for (net, addresses) in [(4u8, 8usize), (5, 64)] {
        let mut attack = one_byte_bodies(&relay, &known.pubkey(), net, addresses, 4);
        // Let the relay read every first byte (the unfixed relay then held 256 MiB).
        let settle = Instant::now();
        while settle.elapsed() < Duration::from_millis(500) {
            poll_held(&mut attack);
            std::thread::sleep(Duration::from_millis(20));
        }
        let rss = status_mib(pid, "VmRSS");
        let t = Instant::now();
        let r = honest.call_with(
            &relay,
            "POST",
            "/v2/relay/items",
            push.as_bytes(),
            &Hop::default(),
            &[("x-forwarded-for", HONEST)],
        );
        let took = t.elapsed();
        eprintln!(
            "{addresses} addresses x 4 one-byte 8 MiB bodies: honest push {} in {took:?}; relay \
             VmRSS {rss_before} -> {rss} MiB",
            r.status
        );
        // What the bodies sent is resident, not what they declared (here up to 2 GiB).
        assert!(rss < rss_before + 64, "VmRSS {rss_before} -> {rss} MiB");
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(took < Duration::from_secs(1), "honest push took {took:?}");
        // Every attacking body is cut off at the minimum rate, well before the body timeout.
        let deadline = Instant::now() + Duration::from_secs(15);
        while attack.iter().any(|h| h.answered.is_none()) && Instant::now() < deadline {
            poll_held(&mut attack);
            std::thread::sleep(Duration::from_millis(20));
        }
        let slowest = attack.iter().filter_map(|h| h.answered).max();
        eprintln!("slowest cut-off of the attack: {slowest:?}");
        for h in &attack {
            let took = h.answered.expect("every attacking body is cut off");
            assert_eq!(
                status_of(&h.got),
                400,
                "{}",
                String::from_utf8_lossy(&h.got)
            );
            assert!(
                took < Duration::from_secs(6),
                "cut by the minimum rate: {took:?}"
            );
        }
        // Four unproven bodies used up each address's failure window (4 a minute): a valid
        // hop from there is now refused unchecked.
        let r = known.call_with(
            &relay,
            "GET",
            "/v2/relay/items",
            b"",
            &Hop::default(),
            &[("x-forwarded-for", &format!("10.{net}.0.0"))],
        );
        r.assert_error(
            429,
            "too many failed authentications from this address, retry later",
        );
    }
    relay.assert_alive();
}

/// One key holds at most `--max-body-bytes-per-key` of body memory, whatever its addresses.
#[test]
fn bodies_that_never_proved_a_key_cannot_make_that_key_be_refused() {
    // Issue 36 finding 3: junk-signed bodies naming a victim's key were charged to the victim's
    // key share, so its own signed calls got 429 for as long as they were held.
    let _alone = alone();
    let one_body = MAX_BODY.to_string();
    let relay = Relay::start_generous(&[
        "--trust-proxy",
        "xff",
        "--max-body-bytes-per-key",
        &one_body,
    ]);
    let victim = Host::enrolled(&relay, "victim");
    let target = Host::enrolled(&relay, "target");
    let declared = format!("content-type: application/json\r\ncontent-length: {MAX_BODY}\r\n");
    let hop = junk_hop(&victim.pubkey(), now_ms());
    // 6 MiB and 4 MiB of two 8 MiB bodies under the victim's key, from two addresses, then
    // silence: more than the key's whole share, if it were charged.
    let first = send_body(
        &relay,
        &head("POST", "/v2/relay/items", "198.51.100.70", &hop, &declared),
        6 * 1024 * 1024,
    );
    let second = send_body(
        &relay,
        &head("POST", "/v2/relay/items", "198.51.100.71", &hop, &declared),
        4 * 1024 * 1024,
    );
    std::thread::sleep(Duration::from_millis(500));
    // The victim's own signed push and ack are served meanwhile.
    let body = json!({ "items": [victim.envelope_to(&[&target])] }).to_string();
    let r = victim.call_with(
        &relay,
        "POST",
        "/v2/relay/items",
        body.as_bytes(),
        &Hop::default(),
        &[("x-forwarded-for", "198.51.100.72")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = victim.call_with(
        &relay,
        "GET",
        "/v2/relay/items?after=0",
        b"",
        &Hop::default(),
        &[("x-forwarded-for", "198.51.100.72")],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    drop((first, second));
    relay.assert_alive();
}
