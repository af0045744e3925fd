//! One client address cannot take every connection slot (issue 19 item 4). The attack from the
//! issue, against the real binary on loopback: 1,024 connections from one address (127.0.0.2;
//! loopback answers on all of 127/8, so a client socket bound there is another address) each
//! send half a request head and wait. Without a per-address cap they hold every slot and an
//! honest client's `/health` is answered 503; with `--max-connections-per-address` (default 64)
//! the address holds 64, the rest are refused with 429, and other addresses are served.
use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::*;

/// What the attacker sends on every connection: a request head that never ends.
const HALF_HEAD: &[u8] = b"GET /health HTTP/1.1\r\nHost: relay\r\nx-pad: ";
/// Connections the attacker opens from one address (the figure).
const ATTACK: usize = 1024;
/// The default per-address cap (`--max-connections-per-address`).
const DEFAULT_CAP: usize = 64;
/// Flags keeping the attacker's half-sent heads open for the whole test.
const PATIENT: &[&str] = &["--header-timeout", "120s", "--idle-timeout", "120s"];

/// Connects from a chosen loopback source address (std cannot bind before connecting).
struct Dialer {
    rt: tokio::runtime::Runtime,
}

impl Dialer {
    fn new() -> Dialer {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        Dialer { rt }
    }

    fn connect(&self, from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
        self.rt.block_on(async {
            let s = tokio::net::TcpSocket::new_v4()?;
            s.bind(SocketAddr::new(from.into(), 0))?;
            let stream = s.connect(to).await?.into_std()?;
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    }
}

/// How the relay treated the attacker's connections.
#[derive(Debug, Default)]
struct Tally {
    /// Still open, nothing answered: a slot the attacker holds.
    held: usize,
    /// Answered 429 with the per-address refusal.
    refused_429: usize,
    /// Answered 503 (the whole relay full).
    refused_503: usize,
    /// Closed unanswered (every refusal task busy).
    closed: usize,
}

/// Opens `n` connections from `from`, each sending [`HALF_HEAD`]; returns them.
fn attack(d: &Dialer, relay: &Relay, from: Ipv4Addr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|i| {
            let mut s = d
                .connect(from, relay.addr())
                .unwrap_or_else(|e| panic!("attacker connection {i}: {e}"));
            // A refused connection may already be closed: the write may fail, that is fine.
            let _ = s.write_all(HALF_HEAD);
            s
        })
        .collect()
}

/// What the relay did with one connection, once it did something.
enum Seen {
    Refused429,
    Refused503,
    Closed,
}

/// Reads what is there without waiting: `None` while the connection is open and unanswered.
fn look(s: &mut TcpStream) -> Option<Seen> {
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(0) => Some(Seen::Closed),
        Ok(n) => {
            let head = String::from_utf8_lossy(&buf[..n]);
            if head.starts_with("HTTP/1.1 429") {
                assert!(
                    head.contains("too many connections from this address"),
                    "{head}"
                );
                Some(Seen::Refused429)
            } else if head.starts_with("HTTP/1.1 503") {
                Some(Seen::Refused503)
            } else {
                panic!("unexpected answer to a half-sent head: {head}");
            }
        }
        Err(e) if e.kind() == ErrorKind::WouldBlock => None,
        Err(_) => Some(Seen::Closed),
    }
}

/// Classifies every connection by what the relay did with it. Connections still in the
/// listen backlog look held until the relay accepts them, so this waits (up to 15 s) until at
/// most `expect_held` are open and unanswered.
fn tally(conns: &mut [TcpStream], expect_held: usize) -> Tally {
    let mut seen: Vec<Option<Seen>> = conns.iter().map(|_| None).collect();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        std::thread::sleep(Duration::from_millis(200));
        for (s, seen) in conns.iter_mut().zip(seen.iter_mut()) {
            if seen.is_none() {
                s.set_nonblocking(true).expect("nonblocking");
                *seen = look(s);
            }
        }
        let held = seen.iter().filter(|s| s.is_none()).count();
        if held <= expect_held || Instant::now() >= deadline {
            break;
        }
    }
    let mut t = Tally::default();
    for s in &seen {
        match s {
            None => t.held += 1,
            Some(Seen::Refused429) => t.refused_429 += 1,
            Some(Seen::Refused503) => t.refused_503 += 1,
            Some(Seen::Closed) => t.closed += 1,
        }
    }
    t
}

/// An honest client's view: `/health` and unsigned info from `from`, 20 times each; the
/// statuses seen and the slowest answer.
fn honest(d: &Dialer, relay: &Relay, from: Ipv4Addr) -> (Vec<u16>, Duration) {
    let mut statuses = Vec::new();
    let mut slowest = Duration::ZERO;
    for i in 0..40 {
        let path = if i % 2 == 0 {
            "/health"
        } else {
            "/v2/relay/info"
        };
        let t = Instant::now();
        let mut s = d.connect(from, relay.addr()).expect("honest connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .expect("honest write");
        let raw = read_until_close(&mut s).expect("honest read");
        slowest = slowest.max(t.elapsed());
        statuses.push(parse_response(&raw).expect("parses").status);
    }
    (statuses, slowest)
}

fn v4(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

#[test]
fn one_address_cannot_take_every_connection_slot() {
    let d = Dialer::new();
    let relay = Relay::start(PATIENT);

    let mut conns = attack(&d, &relay, v4(2), ATTACK);
    let t = tally(&mut conns, DEFAULT_CAP);
    eprintln!("one address, {ATTACK} half-sent heads, default cap: {t:?}");
    assert_eq!(t.held, DEFAULT_CAP, "{t:?}");
    assert_eq!(t.refused_503, 0, "{t:?}");
    assert!(t.refused_429 >= 1, "the cap answers a clear 429: {t:?}");
    assert_eq!(t.held + t.refused_429 + t.closed, ATTACK, "{t:?}");

    // Other addresses are served meanwhile, and quickly.
    for from in [v4(1), v4(3)] {
        let (statuses, slowest) = honest(&d, &relay, from);
        eprintln!("honest client {from} while 127.0.0.2 is at its cap: slowest {slowest:?}");
        assert!(statuses.iter().all(|s| *s == 200), "{from}: {statuses:?}");
        assert!(slowest < Duration::from_secs(1), "{from}: {slowest:?}");
    }
    // A second address at its cap: both held at 64, a third address still served.
    let mut more = attack(&d, &relay, v4(4), 2 * DEFAULT_CAP);
    let t4 = tally(&mut more, DEFAULT_CAP);
    assert_eq!(t4.held, DEFAULT_CAP, "{t4:?}");
    let (statuses, _) = honest(&d, &relay, v4(5));
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // The capped address itself is refused a new connection with the 429 ...
    let mut one = attack(&d, &relay, v4(2), 1);
    let t1 = tally(&mut one, 0);
    assert_eq!(t1.refused_429 + t1.closed, 1, "{t1:?}");

    // ... and served again once it closes its connections (its count went back to nothing).
    drop(conns);
    drop(one);
    let start = Instant::now();
    loop {
        let (statuses, _) = honest(&d, &relay, v4(2));
        if statuses.iter().all(|s| *s == 200) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "127.0.0.2 never served again: {statuses:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    relay.assert_alive();
}

/// The attack as the issue found it (the per-address cap lifted to the connection cap): every
/// slot is taken and an honest client gets 503. Proves the attack above is real.
#[test]
fn without_the_per_address_cap_one_address_takes_every_slot() {
    let d = Dialer::new();
    let mut args = PATIENT.to_vec();
    let cap = mbx_relay::http::guard::GuardConfig::default()
        .max_connections
        .to_string();
    args.extend(["--max-connections-per-address", &cap]);
    let relay = Relay::start(&args);
    let mut conns = attack(&d, &relay, v4(2), ATTACK);
    let t = tally(&mut conns, ATTACK);
    eprintln!("one address, {ATTACK} half-sent heads, cap lifted: {t:?}");
    assert_eq!(t.held, ATTACK, "{t:?}");
    let (statuses, _) = honest(&d, &relay, v4(1));
    assert!(statuses.iter().all(|s| *s == 503), "{statuses:?}");
    drop(conns);
}

#[test]
fn the_per_address_cap_is_a_flag_and_a_variable() {
    let d = Dialer::new();
    let relay =
        Relay::launch(RelayOpts::args(PATIENT).env("MBX_RELAY_MAX_CONNECTIONS_PER_ADDRESS", "3"))
            .expect("relay starts");
    let mut conns = attack(&d, &relay, v4(2), 5);
    let t = tally(&mut conns, 3);
    assert_eq!((t.held, t.refused_429), (3, 2), "{t:?}");
    let r = send(relay.addr(), "GET", "/health", &[], b"");
    assert_eq!(r.status, 200);
    drop(conns);

    let e = Relay::launch(RelayOpts::args(&["--max-connections-per-address", "0"]))
        .err()
        .expect("0 is refused");
    assert!(e.contains("--max-connections-per-address"), "{e}");
}
