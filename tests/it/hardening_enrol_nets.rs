//! Enrolment capacity by the network, not by the address (issue 19 item 6), against the real
//! binary: challenge, enrol and rotate count in nested per-minute windows (an IPv6 /64 inside
//! its /48, an IPv4 address inside its /24), so one site spreading its calls over the 65,536
//! /64s of a /48 (or the 256 addresses of a /24) gets the /48's (/24's) window, not 65,536
//! (256) times the address window. `--trust-proxy xff` lets the test speak from many addresses.
use crate::common;

use std::time::Instant;

use common::*;
use serde_json::json;

/// Calls spread over distinct /64s of one /48 (and all 256 addresses of one /24).
const SPREAD: usize = 1000;
/// The default `--enrol-per-minute-v6-48` and `--enrol-per-minute-v4-24`.
const DEFAULT_NET: usize = 60;

/// A challenge with an invalid body from `addr`: 400 when the windows admit it, 429 when not.
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

/// How many of the calls from `addrs` the windows admitted.
fn admitted(relay: &Relay, addrs: &[String]) -> usize {
    addrs
        .iter()
        .filter(|a| match challenge_from(relay, a) {
            400 => true,
            429 => false,
            other => panic!("{a}: unexpected {other}"),
        })
        .count()
}

fn spread_over_48(prefix: &str) -> Vec<String> {
    (0..SPREAD).map(|i| format!("{prefix}:{i:x}::1")).collect()
}

fn spread_over_24(prefix: &str) -> Vec<String> {
    (0..256).map(|i| format!("{prefix}.{i}")).collect()
}

/// A whole enrolment (challenge, then enrol) from `addr`: the enrol status.
fn enrol_from(relay: &Relay, name: &str, addr: &str) -> u16 {
    let h = Host::new(name);
    let xff = [("x-forwarded-for", addr)];
    let body = json!({"host": h.name, "pubkey": h.pubkey()}).to_string();
    let c = relay.send("POST", "/v1/relay/challenge", &xff, body.as_bytes());
    if c.status != 200 {
        return c.status;
    }
    let challenge = c.json()["challenge"]
        .as_str()
        .expect("challenge")
        .to_string();
    let enrol = h.enrol_body(&challenge, "", None).to_string();
    relay
        .send("POST", "/v1/relay/enrol", &xff, enrol.as_bytes())
        .status
}

#[test]
fn one_48_or_24_gets_one_network_window_however_it_spreads_its_calls() {
    let relay = Relay::start(&["--trust-proxy", "xff"]);
    let t = Instant::now();
    let v6 = admitted(&relay, &spread_over_48("2001:db8:77"));
    let v4 = admitted(&relay, &spread_over_24("198.51.100"));
    eprintln!(
        "defaults: {v6} of {SPREAD} calls from distinct /64s of one /48 admitted, {v4} of 256 \
         from one /24 ({:?})",
        t.elapsed()
    );
    assert_eq!(v6, DEFAULT_NET);
    assert_eq!(v4, DEFAULT_NET);

    // Honest clients elsewhere enrol as usual meanwhile: another /48, another /24, and a host
    // speaking from the socket address.
    assert_eq!(enrol_from(&relay, "other-48", "2001:db8:78:1::1"), 200);
    assert_eq!(enrol_from(&relay, "other-24", "203.0.113.5"), 200);
    Host::enrolled(&relay, "socket-address");
    // Sharing the flooded network is the cost: its window is used up for this minute.
    assert_eq!(enrol_from(&relay, "same-48", "2001:db8:77:ffff::1"), 429);
    assert_eq!(enrol_from(&relay, "same-24", "198.51.100.77"), 429);
    relay.assert_alive();
}

/// The finding with the network windows lifted: every spread call is admitted (one /48
/// could then enrol 65,536 × 15 hosts a minute). Proves the test above measures the windows.
#[test]
fn without_network_windows_spreading_multiplies_the_address_window() {
    let relay = Relay::start(&[
        "--trust-proxy",
        "xff",
        "--enrol-per-minute-v6-48",
        "1000000",
        "--enrol-per-minute-v4-24",
        "1000000",
    ]);
    assert_eq!(admitted(&relay, &spread_over_48("2001:db8:77")), SPREAD);
    assert_eq!(admitted(&relay, &spread_over_24("198.51.100")), 256);
}

#[test]
fn each_network_window_is_a_flag_and_a_variable() {
    let relay = Relay::launch(
        RelayOpts::args(&[
            "--trust-proxy",
            "xff",
            "--enrol-per-minute",
            "3",
            "--enrol-per-minute-v4-24",
            "7",
        ])
        .env("MBX_RELAY_ENROL_PER_MINUTE_V6_48", "5"),
    )
    .expect("relay starts");
    assert_eq!(admitted(&relay, &spread_over_48("2001:db8:9")), 5);
    assert_eq!(admitted(&relay, &spread_over_24("192.0.2")), 7);
    // The address window still holds inside a network with room.
    let one = vec!["2001:db8:a:1::1".to_string(); 40];
    assert_eq!(admitted(&relay, &one), 3, "one /64");
    let one = vec!["203.0.113.9".to_string(); 40];
    assert_eq!(admitted(&relay, &one), 3, "one IPv4 address");
    for flag in ["--enrol-per-minute-v6-48", "--enrol-per-minute-v4-24"] {
        let e = Relay::launch(RelayOpts::args(&[flag, "0"]))
            .err()
            .expect("0 is refused");
        assert!(e.contains(flag), "{e}");
    }
}
