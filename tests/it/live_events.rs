//! The wake stream `GET /v2/relay/events` (docs/protocol.md §8, mbx-relay extension): hop-signed
//! at connect; `queued` with the head at connect and when the queue grows (coalesced), heartbeat
//! comments, nothing about items; not cut by the idle timeout; a fifth stream or wait of a key
//! closes the oldest; shutdown ends every stream at once.

use crate::common;
use crate::live_util;

use std::time::{Duration, Instant};

use common::{envelope_item, read_one_response, Hop, Host, Relay, RelayOpts, GENEROUS};
use live_util::{start_get, still_waiting, EventStream};
use serde_json::json;

/// A relay whose streams send a heartbeat every `hb_ms` and that closes idle connections
/// after 1 s.
fn relay_with_heartbeat(hb_ms: u64) -> Relay {
    let mut args: Vec<&str> = GENEROUS.to_vec();
    args.extend_from_slice(&["--idle-timeout", "1s"]);
    Relay::launch(
        RelayOpts::args(&args).env("MBX_RELAY_TEST_EVENTS_HEARTBEAT_MS", &hb_ms.to_string()),
    )
    .expect("relay starts")
}

fn queued(head: u64) -> String {
    format!("event: queued\ndata: {{\"head_seq\":{head}}}\n\n")
}

#[test]
fn a_stream_announces_the_head_then_each_growth_with_heartbeats_and_no_item_details() {
    let relay = relay_with_heartbeat(300);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let mut es = EventStream::open(&relay, &bob);
    let head = es.head();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-type"), Some("text/event-stream"));
    assert_eq!(head.header("cache-control"), Some("no-store"));
    assert!(
        es.wait_for(&queued(0), Duration::from_secs(5)),
        "{}",
        es.text()
    );

    let t = Instant::now();
    let it = envelope_item(&alice, &[&bob]);
    let r = alice.push_one(&relay, &it);
    assert_eq!(r["status"], json!("accepted"));
    let seq = r["targets"][0]["seq"].as_u64().unwrap();
    assert!(
        es.wait_for(&queued(seq), Duration::from_secs(5)),
        "{}",
        es.text()
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());

    // A burst: coalesced, and the last head is always announced.
    let items: Vec<_> = (0..20).map(|_| envelope_item(&alice, &[&bob])).collect();
    let res = alice.push_results(&relay, &items);
    let last = res
        .iter()
        .map(|r| r["targets"][0]["seq"].as_u64().unwrap())
        .max()
        .unwrap();
    assert!(
        es.wait_for(&queued(last), Duration::from_secs(5)),
        "{}",
        es.text()
    );
    let events = es.text().matches("event: queued").count();
    assert!(
        events <= 3,
        "one push of 20 is not 20 events: {}",
        es.text()
    );

    // Heartbeats keep the stream up past the 1 s idle timeout.
    let before = es.text().matches(": hb\n\n").count();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        !es.closed_within(Duration::from_millis(100)),
        "cut while sending heartbeats"
    );
    assert!(
        es.text().matches(": hb\n\n").count() >= before + 3,
        "{}",
        es.text()
    );

    let text = es.text();
    let id = it["item_id"].as_str().unwrap();
    for secret in [id, &alice.pubkey(), "wire_b64", "sender", "item_id"] {
        assert!(!text.contains(secret), "stream reveals {secret}");
    }
}

#[test]
fn a_stream_with_slow_heartbeats_is_not_cut_by_the_idle_timeout() {
    // Heartbeat (1.5 s) longer than the idle timeout (1 s): the stream still lives.
    let relay = relay_with_heartbeat(1500);
    let bob = Host::enrolled(&relay, "bob");
    let mut es = EventStream::open(&relay, &bob);
    assert!(es.wait_for(&queued(0), Duration::from_secs(5)));
    assert!(
        !es.closed_within(Duration::from_millis(3500)),
        "stream cut: {}",
        es.text()
    );
    assert!(es.text().contains(": hb\n\n"), "{}", es.text());
    // A waiting pull is not cut either.
    let mut wait = start_get(&relay, &bob, "/v2/relay/items?wait=3");
    let t = Instant::now();
    let r = read_one_response(&mut wait).expect("answered");
    assert_eq!(r.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(2900),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn a_stream_needs_a_valid_hop() {
    let relay = Relay::start_generous(&[]);
    let bob = Host::enrolled(&relay, "bob");
    let r = relay.get("/v2/relay/events");
    assert_eq!(r.status, 401, "{}", r.text());
    let stranger = Host::new("stranger");
    let r = stranger.get(&relay, "/v2/relay/events");
    assert_eq!(r.status, 401, "{}", r.text());
    let stale = Hop {
        ts_ms: Some(common::now_ms() - 3_600_000),
        ..Hop::default()
    };
    let r = bob.call_with(&relay, "GET", "/v2/relay/events", b"", &stale, &[]);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(relay.send("POST", "/v2/relay/events", &[], b"").status, 404);
}

#[test]
fn a_fifth_stream_or_wait_of_a_key_closes_the_oldest_stream() {
    let relay = relay_with_heartbeat(60_000);
    let bob = Host::enrolled(&relay, "bob");
    let mut streams: Vec<EventStream> = (0..4)
        .map(|_| {
            let mut es = EventStream::open(&relay, &bob);
            assert!(es.wait_for(&queued(0), Duration::from_secs(5)));
            es
        })
        .collect();
    let wait = start_get(&relay, &bob, "/v2/relay/items?wait=30");
    assert!(
        streams[0].closed_within(Duration::from_secs(3)),
        "oldest ends"
    );
    for es in &mut streams[1..] {
        assert!(!es.closed_within(Duration::from_millis(100)));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(still_waiting(&wait));
}

#[test]
fn sigterm_ends_every_stream_at_once() {
    let mut relay = relay_with_heartbeat(60_000);
    let hosts: Vec<Host> = (0..10)
        .map(|i| Host::enrolled(&relay, &format!("h{i}")))
        .collect();
    let mut streams: Vec<EventStream> = hosts
        .iter()
        .map(|h| {
            let mut es = EventStream::open(&relay, h);
            assert!(es.wait_for(&queued(0), Duration::from_secs(5)));
            es
        })
        .collect();
    let t = Instant::now();
    assert_eq!(relay.terminate(Duration::from_secs(10)), Some(0));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    for es in &mut streams {
        assert!(es.closed_within(Duration::from_secs(1)));
        assert!(
            es.text().ends_with("0\r\n\r\n"),
            "a clean end: {:?}",
            es.text()
        );
    }
}

/// Open one event stream (its first event read) and one waiting pull of `host`.
fn stream_and_waiting_pull(relay: &Relay, host: &Host) -> (EventStream, std::net::TcpStream) {
    let mut es = EventStream::open(relay, host);
    assert!(
        es.wait_for(&queued(0), Duration::from_secs(5)),
        "{}",
        es.text()
    );
    let pull = start_get(relay, host, "/v2/relay/items?wait=60");
    std::thread::sleep(Duration::from_millis(100));
    assert!(still_waiting(&pull), "the pull waits");
    (es, pull)
}

/// Within 1 s of `since` the stream has ended cleanly and the waiting pull answered `status`
/// (its body `want` when given); returns the time both took.
fn both_end_within_1s(
    since: Instant,
    es: &mut EventStream,
    pull: &mut std::net::TcpStream,
    status: u16,
    want: Option<&str>,
) -> Duration {
    assert!(
        es.closed_within(Duration::from_secs(1)),
        "stream still open: {}",
        es.text()
    );
    assert!(
        es.text().ends_with("0\r\n\r\n"),
        "a clean end: {:?}",
        es.text()
    );
    pull.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let r = read_one_response(pull).expect("the waiting pull is answered");
    let took = since.elapsed();
    assert_eq!(r.status, status, "{}", r.text());
    if let Some(body) = want {
        assert_eq!(r.text(), body);
    }
    assert!(took < Duration::from_secs(1), "{took:?}");
    took
}

/// Issue 24 item 3: `relay-tool revoke` (through the admin socket) and a key rotation end that
/// key's streams and waiting pulls at once (the pull answers what its next hop would get:
/// `401 bad relay hop`); `relay-tool purge` of a live key ends them as an eviction (the pull
/// answers its page); other keys' streams live on. Before the fix both kept waiting (streams
/// sent heartbeats, pulls held to their deadline).
#[test]
fn revoke_purge_and_rotation_end_the_keys_streams_and_waiting_pulls_at_once() {
    let relay = relay_with_heartbeat(60_000);
    let dir = relay.store_dir().to_str().expect("utf-8 path").to_string();
    let other = Host::enrolled(&relay, "other");
    let mut other_es = EventStream::open(&relay, &other);
    assert!(other_es.wait_for(&queued(0), Duration::from_secs(5)));
    let tool = |args: &[&str]| {
        let out = common::relay_tool(args);
        assert!(
            out.status.success(),
            "relay-tool {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };

    let bob = Host::enrolled(&relay, "bob");
    let (mut es, mut pull) = stream_and_waiting_pull(&relay, &bob);
    let t = Instant::now();
    tool(&["revoke", "--store-dir", &dir, &bob.pubkey()]);
    let bad_hop = Some(r#"{"error":"bad relay hop"}"#);
    let took = both_end_within_1s(t, &mut es, &mut pull, 401, bad_hop);
    eprintln!("revoke: stream and waiting pull ended {took:?} after relay-tool started");
    assert_eq!(bob.get(&relay, "/v2/relay/events").status, 401);

    let carol = Host::enrolled(&relay, "carol");
    let (mut es, mut pull) = stream_and_waiting_pull(&relay, &carol);
    let t = Instant::now();
    tool(&["purge", "--store-dir", &dir, &carol.pubkey()]);
    let took = both_end_within_1s(t, &mut es, &mut pull, 200, None);
    eprintln!("purge: ended {took:?} after relay-tool started");

    let dave = Host::enrolled(&relay, "dave");
    let (mut es, mut pull) = stream_and_waiting_pull(&relay, &dave);
    let dave2 = Host::new("dave");
    let t = Instant::now();
    let r = relay.post_json(
        "/v2/relay/rotate",
        &common::rotation("dave", &dave.key, &dave2.key, None, None),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let took = both_end_within_1s(t, &mut es, &mut pull, 401, bad_hop);
    eprintln!("rotation: ended {took:?} after the rotate call started");

    assert!(
        !other_es.closed_within(Duration::from_millis(200)),
        "another key's stream lives on"
    );
}

/// Issue 24 item 3: `--max-stream-lifetime` ends a stream cleanly (the chunked end) when it is
/// reached, heartbeats or not, and the client's reconnect is served as usual.
#[test]
fn a_stream_ends_cleanly_at_its_maximum_lifetime_and_a_reconnect_is_served() {
    let mut args: Vec<&str> = GENEROUS.to_vec();
    args.extend_from_slice(&["--max-stream-lifetime", "1s"]);
    let relay =
        Relay::launch(RelayOpts::args(&args).env("MBX_RELAY_TEST_EVENTS_HEARTBEAT_MS", "200"))
            .expect("relay starts");
    let bob = Host::enrolled(&relay, "bob");
    let t = Instant::now();
    let mut es = EventStream::open(&relay, &bob);
    assert!(es.wait_for(&queued(0), Duration::from_secs(5)));
    assert!(es.closed_within(Duration::from_secs(3)), "{}", es.text());
    let lived = t.elapsed();
    eprintln!("a stream capped at 1 s lived {lived:?}");
    assert!(
        lived >= Duration::from_millis(900) && lived < Duration::from_millis(2500),
        "{lived:?}"
    );
    assert!(es.text().contains(": hb\n\n"), "{}", es.text());
    assert!(
        es.text().ends_with("0\r\n\r\n"),
        "a clean end: {:?}",
        es.text()
    );
    let mut again = EventStream::open(&relay, &bob);
    assert_eq!(again.head().status, 200);
    assert!(again.wait_for(&queued(0), Duration::from_secs(5)));
}
