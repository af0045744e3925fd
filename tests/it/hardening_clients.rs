//! Slow and hostile clients against the real binary (issue 7): header and body read timeouts, the
//! keep-alive idle timeout, the connection cap's clear refusal, and the per-address limit on
//! routes that need no signed hop (info, health, metrics, unknown paths; challenge, enrol and
//! rotate have the relay's own window). Every test uses small timeouts through the guard's
//! flags and bounds its own waiting; bounds are generous (they check that a cut-off happens,
//! not how fast).
use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

/// Longest any test waits for the relay to cut a connection.
const CUT_OFF_BOUND: Duration = Duration::from_secs(15);

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    s.set_nodelay(true).expect("nodelay");
    s
}

/// What one poll of a connection found.
enum Seen {
    Closed,
    Data(Vec<u8>),
    Nothing,
}

fn poll(s: &mut TcpStream) -> Seen {
    let mut buf = [0u8; 4096];
    match s.read(&mut buf) {
        Ok(0) => Seen::Closed,
        Ok(n) => Seen::Data(buf[..n].to_vec()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Seen::Nothing,
        Err(_) => Seen::Closed,
    }
}

/// Keep sending `bytes` one byte every `every` until the relay closes the connection (write
/// fails or reads EOF). Returns how long that took and anything the relay sent, or panics after
/// [`CUT_OFF_BOUND`].
fn trickle_until_closed(s: &mut TcpStream, bytes: &[u8], every: Duration) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut i = 0;
    while start.elapsed() < CUT_OFF_BOUND {
        let b = bytes[i % bytes.len()];
        i += 1;
        if s.write_all(&[b]).is_err() {
            return (start.elapsed(), got);
        }
        let next = Instant::now() + every;
        while Instant::now() < next {
            match poll(s) {
                Seen::Closed => return (start.elapsed(), got),
                Seen::Data(d) => got.extend(d),
                Seen::Nothing => {}
            }
        }
    }
    panic!("relay kept a trickling client for {CUT_OFF_BOUND:?}");
}

/// Wait (reading only) until the relay closes the connection; returns the time it took and
/// what it sent.
fn wait_closed(s: &mut TcpStream) -> (Duration, Vec<u8>) {
    let start = Instant::now();
    let mut got = Vec::new();
    while start.elapsed() < CUT_OFF_BOUND {
        match poll(s) {
            Seen::Closed => return (start.elapsed(), got),
            Seen::Data(d) => got.extend(d),
            Seen::Nothing => {}
        }
    }
    panic!("relay kept an idle connection for {CUT_OFF_BOUND:?}");
}

/// Read one full response (head + content-length body) from a keep-alive connection.
fn read_response(s: &mut TcpStream) -> Response {
    let start = Instant::now();
    let mut raw = Vec::new();
    loop {
        assert!(start.elapsed() < CUT_OFF_BOUND, "no full response");
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().expect("content-length"));
            if raw.len() >= end + 4 + len {
                return parse_response(&raw[..end + 4 + len]).expect("response parses");
            }
        }
        match poll(s) {
            Seen::Closed => panic!("closed before a full response: {raw:?}"),
            Seen::Data(d) => raw.extend(d),
            Seen::Nothing => {}
        }
    }
}

const INFO_REQUEST: &[u8] = b"GET /v2/relay/info HTTP/1.1\r\nhost: relay\r\n\r\n";
/// The same request on a connection the client wants closed after the answer.
const INFO_CLOSE: &[u8] =
    b"GET /v2/relay/info HTTP/1.1\r\nhost: relay\r\nconnection: close\r\n\r\n";

#[test]
fn a_client_trickling_its_headers_is_cut_off() {
    let relay = Relay::start(&["--header-timeout", "2s", "--idle-timeout", "30s"]);
    let mut s = connect(relay.addr());
    s.write_all(b"GET /v2/relay/info HTTP/1.1\r\nhost: relay\r\n")
        .unwrap();
    // One header byte every 250 ms: always something new, never the end of the head.
    let (took, got) = trickle_until_closed(&mut s, b"x-slow: aaaa\r\n", Duration::from_millis(250));
    assert!(
        took >= Duration::from_millis(1500),
        "closed before the header timeout: {took:?}"
    );
    assert!(
        !String::from_utf8_lossy(&got).contains("200 OK"),
        "a trickled request was served"
    );
    relay.assert_alive();
}

#[test]
fn a_client_trickling_its_body_is_cut_off_with_a_clear_error() {
    let relay = Relay::start(&["--body-timeout", "2s", "--idle-timeout", "30s"]);
    let mut s = connect(relay.addr());
    s.write_all(
        b"POST /v1/relay/challenge HTTP/1.1\r\nhost: relay\r\ncontent-type: application/json\r\n\
          content-length: 4000\r\n\r\n{\"host\":\"",
    )
    .unwrap();
    let (took, got) = trickle_until_closed(&mut s, b"a", Duration::from_millis(250));
    assert!(
        took >= Duration::from_millis(1500),
        "closed before the body timeout: {took:?}"
    );
    let r = parse_response(&got).expect("the relay answered before closing");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"].as_str().is_some_and(|e| !e.is_empty()));
    relay.assert_alive();
}

#[test]
fn idle_keep_alive_connections_are_closed_and_active_ones_reused() {
    let relay = Relay::start(&["--idle-timeout", "1s", "--header-timeout", "30s"]);
    // A connection that never sends anything.
    let mut silent = connect(relay.addr());
    let (took, got) = wait_closed(&mut silent);
    assert!(got.is_empty(), "relay sent {got:?} to a silent client");
    assert!(
        took >= Duration::from_millis(700),
        "closed at once: {took:?}"
    );

    // Keep-alive: two requests on one connection inside the idle window, then silence.
    let mut s = connect(relay.addr());
    for _ in 0..2 {
        s.write_all(INFO_REQUEST).unwrap();
        let r = read_response(&mut s);
        assert_eq!(r.status, 200, "{}", r.text());
        std::thread::sleep(Duration::from_millis(300));
    }
    let (took, got) = wait_closed(&mut s);
    assert!(
        got.is_empty(),
        "unexpected bytes after the responses: {got:?}"
    );
    assert!(
        took >= Duration::from_millis(400),
        "closed too soon: {took:?}"
    );
}

#[test]
fn connections_over_the_cap_get_a_clear_503_and_the_relay_recovers() {
    let relay = Relay::start(&[
        "--max-connections",
        "4",
        "--idle-timeout",
        "60s",
        "--header-timeout",
        "60s",
    ]);
    // Four silent connections hold every slot (the relay serves each on accept).
    let mut held: Vec<TcpStream> = (0..4).map(|_| connect(relay.addr())).collect();
    std::thread::sleep(Duration::from_millis(300));
    let refused = send_raw(relay.addr(), INFO_CLOSE).expect("refusal is readable");
    let r = parse_response(&refused).expect("refusal parses");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(
        r.json(),
        json!({"error": "too many connections, retry later"})
    );
    assert_eq!(r.header("connection"), Some("close"));

    // A slot frees when a client leaves; a new client is then served.
    held.pop();
    let start = Instant::now();
    loop {
        let raw = send_raw(relay.addr(), INFO_CLOSE).expect("answer");
        let r = parse_response(&raw).expect("parses");
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503);
        assert!(
            start.elapsed() < CUT_OFF_BOUND,
            "slot never freed after a client left"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Hostile slots still count: every held connection is still open (not dropped to make room).
    for s in &mut held {
        assert!(
            !matches!(poll(s), Seen::Closed),
            "a held connection was closed"
        );
    }
}

#[test]
fn unauthenticated_routes_are_rate_limited_per_address_but_signed_calls_are_not() {
    let relay = Relay::start(&[
        "--trust-proxy",
        "xff",
        "--public-per-minute",
        "5",
        "--enrol-per-minute",
        "100",
        "--enrol-per-minute-v4-24",
        "100",
        "--enrol-per-minute-v6-48",
        "100",
    ]);
    // Enrol from the socket address (two public calls there).
    let host = Host::enrolled(&relay, "limited");
    let from = |addr: &str, path: &str| relay.send("GET", path, &[("x-forwarded-for", addr)], b"");
    for i in 0..5 {
        let path = if i % 2 == 0 {
            "/v2/relay/info"
        } else {
            "/health"
        };
        assert_eq!(from("203.0.113.7", path).status, 200, "call {i}");
    }
    for path in ["/v2/relay/info", "/health", "/metrics", "/nope"] {
        let r = from("203.0.113.7", path);
        assert_eq!(r.status, 429, "{path}: {}", r.text());
        assert!(r.json()["error"].as_str().is_some_and(|e| !e.is_empty()));
    }
    // Challenge, enrol and rotate are counted by the relay's own per-address window instead:
    // the limited address still reaches the challenge rules (400 for a bad body).
    let r = relay.send(
        "POST",
        "/v1/relay/challenge",
        &[("x-forwarded-for", "203.0.113.7")],
        b"{}",
    );
    assert_eq!(r.status, 400, "challenge: {}", r.text());
    // Another address has its own window.
    assert_eq!(from("198.51.100.1", "/v2/relay/info").status, 200);
    // A signed call from the limited address is not an unauthenticated route.
    let (mut headers, body) = (Vec::new(), b"".to_vec());
    let hop = host.hop_headers("GET", "/v2/relay/items", &body, &Hop::default());
    for (k, v) in &hop {
        headers.push((k.as_str(), v.as_str()));
    }
    headers.push(("x-forwarded-for", "203.0.113.7"));
    let r = relay.send("GET", "/v2/relay/items", &headers, &body);
    assert_eq!(r.status, 200, "signed pull: {}", r.text());
    // Nor is a signed info call (hosts make one every sync pass).
    let hop = host.hop_headers("GET", "/v2/relay/info", &body, &Hop::default());
    let mut headers: Vec<(&str, &str)> =
        hop.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    headers.push(("x-forwarded-for", "203.0.113.7"));
    let r = relay.send("GET", "/v2/relay/info", &headers, &body);
    assert_eq!(r.status, 200, "signed info: {}", r.text());
    assert!(r.json()["you"].is_object(), "signed info names the caller");
}
