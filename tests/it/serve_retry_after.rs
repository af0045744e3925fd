//! Answers a client can act on (issue 14): every 429 and 503 the real `mbx-relay serve` gives
//! carries `Retry-After` in whole seconds: a rate window the time until it frees (at least 1,
//! at most the one-minute window, counting down), a cap on things held at once (connections,
//! body memory) 1 s, store trouble and overload 2 s, the enrolment cap the sweep interval.
use crate::common;

use std::io::Write as _;
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use mbx_relay::http::body::MAX_BODY;
use relay_wire::keys::SigningKey;

/// The `Retry-After` of `r` as whole seconds; panics when it is missing or not a number.
fn retry_after(r: &Response) -> u64 {
    let v = r
        .header("retry-after")
        .unwrap_or_else(|| panic!("{} without retry-after: {}", r.status, r.text()));
    v.parse()
        .unwrap_or_else(|_| panic!("retry-after {v:?} is not whole seconds"))
}

/// A rate window's wait: 1 to 60 seconds.
fn assert_window_wait(r: &Response) -> u64 {
    let s = retry_after(r);
    assert!((1..=60).contains(&s), "until the window frees: {s}");
    s
}

/// Hop headers by an unknown key with a signature that matches nothing.
fn junk_hop() -> Vec<(String, String)> {
    vec![
        ("x-mbx-host".into(), "nobody".into()),
        ("x-mbx-key".into(), random_pubkey()),
        ("x-mbx-ts".into(), now_ms().to_string()),
        ("x-mbx-sig".into(), SigningKey::generate().sign(b"junk")),
    ]
}

fn headers(h: &[(String, String)]) -> Vec<(&str, &str)> {
    h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

#[test]
fn the_public_window_answers_the_seconds_until_it_frees_counting_down() {
    let relay = Relay::start(&["--public-per-minute", "2"]);
    assert_eq!(relay.get("/health").status, 200);
    assert_eq!(relay.get("/health").status, 200);
    let r = relay.get("/health");
    r.assert_error(429, "too many requests from this address, retry later");
    let first = assert_window_wait(&r);
    std::thread::sleep(Duration::from_millis(2_100));
    let later = assert_window_wait(&relay.get("/v2/relay/info"));
    assert!(
        later + 2 <= first,
        "the wait counts down with the window: {first} then {later} two seconds later"
    );
}

#[test]
fn the_enrolment_window_answers_the_seconds_until_it_frees() {
    let relay = Relay::start(&["--enrol-per-minute", "1"]);
    assert_eq!(Host::new("w-a").challenge(&relay).status, 200);
    let r = Host::new("w-b").challenge(&relay);
    r.assert_error(429, "too many enrolment calls; retry in a minute");
    assert_window_wait(&r);
}

#[test]
fn the_failed_authentication_window_answers_the_seconds_until_it_frees() {
    let relay = Relay::start(&["--auth-failures-per-minute", "1"]);
    let hop = junk_hop();
    relay
        .send("GET", "/v2/relay/items", &headers(&hop), b"")
        .assert_error(401, "bad relay hop");
    let hop = junk_hop();
    let r = relay.send("GET", "/v2/relay/items", &headers(&hop), b"");
    r.assert_error(
        429,
        "too many failed authentications from this address, retry later",
    );
    assert_window_wait(&r);
    // Refused before the hop is looked at: the same wait (or a second less).
    let hop = junk_hop();
    assert_window_wait(&relay.send("GET", "/v2/relay/items", &headers(&hop), b""));
}

/// Hold one connection open (accepted, nothing sent).
fn hold(relay: &Relay) -> TcpStream {
    let s = TcpStream::connect(relay.addr()).expect("connect");
    std::thread::sleep(Duration::from_millis(300));
    s
}

/// `GET /health` until the held connection has been accepted and the cap answers (a loaded
/// machine may accept the held one late).
fn refused_health(relay: &Relay) -> Response {
    for _ in 0..20 {
        let r = relay.get("/health");
        if r.status != 200 {
            return r;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("the connection cap never answered");
}

#[test]
fn connection_caps_answer_a_one_second_backoff() {
    let relay = Relay::start(&["--max-connections", "1"]);
    let _held = hold(&relay);
    let r = refused_health(&relay);
    r.assert_error(503, "too many connections, retry later");
    assert_eq!(retry_after(&r), 1);
    drop(_held);

    let relay = Relay::start(&["--max-connections-per-address", "1"]);
    let _held = hold(&relay);
    let r = refused_health(&relay);
    r.assert_error(429, "too many connections from this address, retry later");
    assert_eq!(retry_after(&r), 1);
}

#[test]
fn the_body_memory_share_answers_a_one_second_backoff() {
    let one_body = MAX_BODY.to_string();
    let relay = Relay::start(&["--max-body-bytes-per-address", &one_body]);
    let known = Host::enrolled(&relay, "known");
    // A live key and a fresh ts pass the header checks: the body's memory is reserved as it
    // arrives; the first client sends all but the last byte of its body (the address's whole
    // share) and goes silent.
    let head = |hop: &[(String, String)]| {
        let mut h = format!(
            "POST /v2/relay/items HTTP/1.1\r\nhost: relay\r\ncontent-type: application/json\r\n\
             content-length: {MAX_BODY}\r\n"
        );
        for (k, v) in hop {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
        h.push_str("\r\n");
        h
    };
    let live_hop = |key: String| {
        vec![
            ("x-mbx-host".to_string(), "known".to_string()),
            ("x-mbx-key".to_string(), key),
            ("x-mbx-ts".to_string(), now_ms().to_string()),
            (
                "x-mbx-sig".to_string(),
                SigningKey::generate().sign(b"junk"),
            ),
        ]
    };
    let mut first = TcpStream::connect(relay.addr()).expect("connect");
    first
        .write_all(head(&live_hop(known.pubkey())).as_bytes())
        .unwrap();
    first.write_all(&vec![b' '; MAX_BODY - 1]).unwrap();
    std::thread::sleep(Duration::from_millis(1_000));
    let mut second = TcpStream::connect(relay.addr()).expect("connect");
    second
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    second
        .write_all(head(&live_hop(known.pubkey())).as_bytes())
        .unwrap();
    second.write_all(b"{").unwrap();
    let r = read_one_response(&mut second).expect("an answer");
    r.assert_error(
        429,
        "too many request bytes in flight from this address, retry later",
    );
    assert_eq!(retry_after(&r), 1);
}

#[test]
fn overload_answers_a_short_backoff_and_the_enrolment_cap_the_sweep_interval() {
    let relay = Relay::start_generous(&["--max-challenges", "1"]);
    assert_eq!(Host::new("c-a").challenge(&relay).status, 200);
    let r = Host::new("c-b").challenge(&relay);
    r.assert_error(503, "too many open enrolment challenges; retry later");
    assert_eq!(retry_after(&r), 2);

    let relay = Relay::start_generous(&["--max-enrolments", "1", "--sweep-interval", "45s"]);
    Host::enrolled(&relay, "full-a");
    let r = Host::new("full-b").try_enrol(&relay, "");
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["code"], "FULL");
    assert_eq!(
        retry_after(&r),
        45,
        "a slot frees at the earliest at the next sweep"
    );
}

/// Store trouble: every store fsync fails while a trigger file exists; pushes and `/health`
/// answer 503 with the 2 s backoff.
#[cfg(feature = "failpoints")]
#[test]
fn store_trouble_answers_a_short_backoff() {
    let (relay, trigger, _work) = relay_with_fsync_trigger();
    let s = Host::enrolled(&relay, "sender");
    let t = Host::enrolled(&relay, "target");
    std::fs::write(&trigger, b"").unwrap();
    let mut refused = None;
    for _ in 0..200 {
        let r = s.push(&relay, &[envelope_item(&s, &[&t])]);
        if r.status == 503 {
            refused = Some(r);
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let r = refused.expect("the fault never took effect");
    assert_eq!(retry_after(&r), 2, "{}", r.text());
    let h = relay.get("/health");
    assert_eq!(h.status, 503);
    assert_eq!(retry_after(&h), 2);
    std::fs::remove_file(&trigger).unwrap();
}
