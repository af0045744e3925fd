//! Per-address rate windows against the real binary (issue 7), with distinct client addresses
//! simulated through `--trust-proxy xff` and `X-Forwarded-For`:
//! - IPv6 clients are counted per /64 and an IPv4-mapped IPv6 address as its IPv4 address, both
//!   by the guard (`--public-per-minute`) and by the relay (`--enrol-per-minute`);
//! - once the address tables (capped at 100,000) are full of live windows, new clients are still
//!   served, and addresses keep their limits.
use crate::common;
use crate::hardening_conn as conn;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use common::*;
use conn::Conn;

/// The cap on both per-address tables (`PUBLIC_RATE_CAP` in src/http/guard.rs and
/// `ADDRESS_RATE_CAP` in core/src/lib.rs).
const TABLE_CAP: usize = 100_000;
/// Client threads (each with one keep-alive connection).
const THREADS: usize = 8;

/// A GET of `/health` claiming to come from `addr`.
fn health_from(relay: &Relay, addr: &str) -> u16 {
    relay
        .send("GET", "/health", &[("x-forwarded-for", addr)], b"")
        .status
}

/// A challenge with an invalid body from `addr`: 400 once past the relay's address window, 429
/// when the window refuses it.
fn challenge_from(relay: &Relay, addr: &str) -> u16 {
    relay
        .send(
            "POST",
            "/v1/relay/challenge",
            &[("x-forwarded-for", addr)],
            b"{}",
        )
        .status
}

#[test]
fn ipv6_clients_are_counted_per_64_and_v4_mapped_as_ipv4() {
    let relay = Relay::start(&[
        "--trust-proxy",
        "xff",
        "--public-per-minute",
        "3",
        "--enrol-per-minute",
        "2",
    ]);
    // Guard window: three addresses of one /64 use it up; a fourth of the same /64 is refused.
    for a in ["2001:db8:7:1::1", "2001:db8:7:1::2", "2001:db8:7:1:ab::3"] {
        assert_eq!(health_from(&relay, a), 200, "{a}");
    }
    assert_eq!(health_from(&relay, "2001:db8:7:1:ffff::9"), 429, "same /64");
    assert_eq!(health_from(&relay, "2001:db8:7:2::1"), 200, "another /64");
    // IPv4 by full address, an IPv4-mapped IPv6 address as that address.
    for _ in 0..3 {
        assert_eq!(health_from(&relay, "192.0.2.5"), 200);
    }
    assert_eq!(health_from(&relay, "::ffff:192.0.2.5"), 429, "v4-mapped");
    assert_eq!(
        health_from(&relay, "192.0.2.6"),
        200,
        "another IPv4 address"
    );

    // The relay's enrolment window keys addresses the same way.
    assert_eq!(challenge_from(&relay, "2001:db8:9:1::1"), 400);
    assert_eq!(challenge_from(&relay, "2001:db8:9:1::2"), 400);
    assert_eq!(challenge_from(&relay, "2001:db8:9:1:1::3"), 429, "same /64");
    assert_eq!(
        challenge_from(&relay, "2001:db8:9:2::1"),
        400,
        "another /64"
    );
    assert_eq!(challenge_from(&relay, "198.51.100.4"), 400);
    assert_eq!(challenge_from(&relay, "::ffff:198.51.100.4"), 400);
    assert_eq!(challenge_from(&relay, "198.51.100.4"), 429, "v4-mapped");
    relay.assert_alive();
}

/// A distinct /64 per index.
fn prefix_addr(i: usize) -> String {
    format!("2001:db8:{:x}:{:x}::1", i >> 16, i & 0xffff)
}

#[test]
fn full_address_tables_still_serve_new_clients() {
    let relay = Relay::start(&[
        "--trust-proxy",
        "xff",
        "--public-per-minute",
        "2",
        "--enrol-per-minute",
        "2",
        // The flood below is 100,000 /64s in two /48s: lift the nested windows (tested in
        // `hardening_enrol_nets.rs`) so this test sees the address table alone.
        "--enrol-per-minute-v6-48",
        "1000000",
        "--enrol-per-minute-v4-24",
        "1000000",
        "--max-connections",
        "64",
    ]);
    // A heavy client at its limit in both tables before the flood.
    let heavy = "203.0.113.9";
    for _ in 0..2 {
        assert_eq!(health_from(&relay, heavy), 200);
        assert_eq!(challenge_from(&relay, heavy), 400);
    }
    assert_eq!(health_from(&relay, heavy), 429);
    assert_eq!(challenge_from(&relay, heavy), 429);

    // As many new /64s as the tables hold, each calling once on a guard-counted route and once
    // on a relay-counted one: every call is served (the tables hold the heavy client too, so
    // the last ones arrive at full tables).
    let next = AtomicUsize::new(0);
    let refused = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                let mut c = Conn::new(relay.addr());
                let mut mine = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= TABLE_CAP {
                        break;
                    }
                    let xff = prefix_addr(i);
                    let h = [("x-forwarded-for", xff.as_str())];
                    let health = c.request("GET", "/health", &h, b"").status;
                    let challenge = c.request("POST", "/v1/relay/challenge", &h, b"{}").status;
                    if health != 200 || challenge != 400 {
                        mine.push((i, health, challenge));
                    }
                }
                refused.lock().unwrap().extend(mine);
            });
        }
    });
    let refused = refused.into_inner().unwrap();
    assert!(
        refused.is_empty(),
        "{} new clients refused at a full table, first: {:?}",
        refused.len(),
        &refused[..refused.len().min(5)]
    );

    // Brand-new clients after the flood are served by both tables.
    for a in ["2001:db8:ffff:1::1", "198.51.100.200"] {
        assert_eq!(health_from(&relay, a), 200, "{a}");
        assert_eq!(challenge_from(&relay, a), 400, "{a}");
    }
    // Limits still hold for addresses in the tables: a recent one has one call left.
    let recent = prefix_addr(TABLE_CAP - 1);
    assert_eq!(health_from(&relay, &recent), 200);
    assert_eq!(health_from(&relay, &recent), 429);
    assert_eq!(challenge_from(&relay, &recent), 400);
    assert_eq!(challenge_from(&relay, &recent), 429);
    relay.assert_alive();
}
