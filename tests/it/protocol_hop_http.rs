//! docs/protocol.md §2 (signed hops) and the HTTP rules of §3: unknown routes, malformed JSON, body
//! caps (refused while streaming), `cache-control: no-store` on every answer.
use crate::common;

use common::{backend_tests, Backend};

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use relay_wire::keys::SigningKey;
use serde_json::json;

const BAD_HOP: &str = "bad relay hop";

fn valid_hops_pass_and_every_bad_hop_is_401(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "hop-a");
    let path = "/v2/relay/items?after=0&limit=10";
    a.get(&relay, path).ok();
    // Within 300 s of the relay clock either way is fine.
    for off in [-290_000i64, 290_000] {
        let hop = Hop {
            ts_ms: Some(now_ms() + off),
            ..Hop::default()
        };
        let r = a.call_with(&relay, "GET", path, b"", &hop, &[]);
        assert_eq!(r.status, 200, "ts offset {off}: {}", r.text());
    }
    let bad: Vec<(&str, Hop)> = vec![
        (
            "stale ts",
            Hop {
                ts_ms: Some(now_ms() - 301_000),
                ..Hop::default()
            },
        ),
        (
            "future ts",
            Hop {
                ts_ms: Some(now_ms() + 301_000),
                ..Hop::default()
            },
        ),
        (
            "other signer",
            Hop {
                signer: Some(SigningKey::generate()),
                ..Hop::default()
            },
        ),
        (
            "path without query",
            Hop {
                signed_path: Some("/v2/relay/items".into()),
                ..Hop::default()
            },
        ),
        (
            "other query",
            Hop {
                signed_path: Some("/v2/relay/items?after=1&limit=10".into()),
                ..Hop::default()
            },
        ),
        (
            "other body",
            Hop {
                signed_body: Some("x".into()),
                ..Hop::default()
            },
        ),
    ];
    for (what, hop) in &bad {
        a.call_with(&relay, "GET", path, b"", hop, &[])
            .assert_error(401, BAD_HOP);
        let _ = what;
    }
    // Signature over a different method.
    let hh = a.hop_headers("POST", path, b"", &Hop::default());
    let headers: Vec<(&str, &str)> = hh.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    relay
        .send("GET", path, &headers, b"")
        .assert_error(401, BAD_HOP);
    // Unknown key (never enrolled).
    Host::new("hop-a")
        .get(&relay, path)
        .assert_error(401, BAD_HOP);
    // Missing or malformed headers.
    let hh = a.hop_headers("GET", path, b"", &Hop::default());
    for drop in ["x-mbx-ts", "x-mbx-sig", "x-mbx-host"] {
        let headers: Vec<(&str, &str)> = hh
            .iter()
            .filter(|(k, _)| k != drop)
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let r = relay.send("GET", path, &headers, b"");
        if drop == "x-mbx-host" && r.status == 200 {
            continue; // a v2 caller is found by key; the host header is a label
        }
        r.assert_error(401, BAD_HOP);
    }
    for (k, v) in [
        ("x-mbx-ts", "soon"),
        ("x-mbx-ts", "99999999999999999999999"),
        ("x-mbx-ts", ""),
        ("x-mbx-sig", "!!"),
        ("x-mbx-key", "short"),
    ] {
        let headers: Vec<(&str, &str)> = hh
            .iter()
            .map(|(hk, hv)| {
                if hk == k {
                    (hk.as_str(), v)
                } else {
                    (hk.as_str(), hv.as_str())
                }
            })
            .collect();
        relay
            .send("GET", path, &headers, b"")
            .assert_error(401, BAD_HOP);
    }
    // A POST whose body was changed after signing.
    let body = json!({"items": []}).to_string();
    let hh = a.hop_headers("POST", "/v2/relay/items", body.as_bytes(), &Hop::default());
    let headers: Vec<(&str, &str)> = hh.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    relay
        .send("POST", "/v2/relay/items", &headers, br#"{"items": []}"#)
        .assert_error(401, BAD_HOP);
    relay
        .send("POST", "/v2/relay/items", &headers, body.as_bytes())
        .ok();
}

fn revoked_key_hop_is_401(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "hop-r");
    let n = Host::new("hop-r");
    relay
        .post_json(
            "/v2/relay/rotate",
            &rotation("hop-r", &a.key, &n.key, None, None),
        )
        .ok();
    a.get(&relay, "/v2/relay/items").assert_error(401, BAD_HOP);
    a.call_v1(&relay, "GET", "/v1/relay/messages?after=0", b"")
        .assert_error(401, BAD_HOP);
    n.get(&relay, "/v2/relay/items").ok();
}

fn every_authenticated_endpoint_requires_a_hop(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let k = random_pubkey()
        .replace('+', "%2B")
        .replace('/', "%2F")
        .replace('=', "%3D");
    for (m, p, body) in [
        ("POST", "/v2/relay/items", r#"{"items":[]}"#),
        ("GET", "/v2/relay/items?after=0", ""),
        ("POST", "/v2/relay/ack", r#"{"epoch":"e","through":0}"#),
        ("POST", "/v2/relay/senders", r#"{"list":{},"sig":""}"#),
        ("POST", "/v1/relay/enc-key", r#"{"enc_pub":"x","sig":"y"}"#),
        ("GET", &format!("/v2/relay/enc-key?pubkey={k}"), ""),
        ("GET", &format!("/v1/relay/enc-key?pubkey={k}"), ""),
        ("POST", "/v1/relay/messages", r#"{"envelopes":[]}"#),
        ("GET", "/v1/relay/messages?after=0", ""),
        ("POST", "/v1/relay/ack", r#"{"cursor":0}"#),
    ] {
        let r = relay.send(m, p, &[], body.as_bytes());
        assert_eq!(r.status, 401, "{m} {p}: {}", r.text());
        r.assert_error(401, BAD_HOP);
    }
}

fn unknown_routes_are_404_signed_or_not(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "route-a");
    for p in [
        "/",
        "/v2/relay/nope",
        "/v2/relay",
        "/v3/relay/info",
        "/v1/relay/items",
        "/v2/relay/info/x",
        "/favicon.ico",
    ] {
        relay.get(p).assert_error(404, "not found");
        a.get(&relay, p).assert_error(404, "not found");
        relay.post(p, b"{}").assert_error(404, "not found");
    }
}

fn known_paths_with_another_method_are_404(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "route-m");
    for (m, p) in [
        ("POST", "/v2/relay/info"),
        ("GET", "/v1/relay/challenge"),
        ("GET", "/v1/relay/enrol"),
        ("GET", "/v2/relay/ack"),
        ("DELETE", "/v2/relay/items"),
        ("PUT", "/v2/relay/senders"),
        ("GET", "/v2/relay/rotate"),
        ("OPTIONS", "/v2/relay/info"),
    ] {
        let body: &[u8] = if m == "GET" { b"" } else { b"{}" };
        let r = a.call(&relay, m, p, body);
        r.assert_error(404, "not found");
    }
}

fn malformed_json_is_400_with_an_error(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "mal-a");
    for body in ["{", "{\"host\":", "nul", "{\"a\":1}x", "\u{0}", ""] {
        relay
            .post("/v1/relay/challenge", body.as_bytes())
            .assert_some_error(400);
        relay
            .post("/v1/relay/enrol", body.as_bytes())
            .assert_some_error(400);
        relay
            .post("/v2/relay/rotate", body.as_bytes())
            .assert_some_error(400);
        for p in [
            "/v2/relay/items",
            "/v2/relay/ack",
            "/v2/relay/senders",
            "/v1/relay/enc-key",
            "/v1/relay/messages",
            "/v1/relay/ack",
        ] {
            a.call(&relay, "POST", p, body.as_bytes())
                .assert_some_error(400);
        }
    }
    relay.assert_alive();
}

fn small_endpoint_bodies_are_capped_at_8192(backend: Backend) {
    let relay = backend.start_generous(&[]);
    // Exactly 8,192 bytes is fine (valid JSON padded with whitespace).
    let body = json!({"host": "cap8k", "pubkey": random_pubkey()}).to_string();
    let padded = format!("{body}{}", " ".repeat(8192 - body.len()));
    assert_eq!(padded.len(), 8192);
    relay.post("/v1/relay/challenge", padded.as_bytes()).ok();
    let over = format!("{body}{}", " ".repeat(8193 - body.len()));
    for p in ["/v1/relay/challenge", "/v1/relay/enrol", "/v2/relay/rotate"] {
        relay
            .post(p, over.as_bytes())
            .assert_error(413, "request body too large");
    }
    // An enrol of exactly 8,192 bytes works.
    let h = Host::new("cap8k-e");
    let ch = h.challenge(&relay).ok()["challenge"]
        .as_str()
        .unwrap()
        .to_string();
    let b = h.enrol_body(&ch, "", None).to_string();
    let padded = format!("{b}{}", " ".repeat(8192 - b.len()));
    assert_eq!(
        relay.post("/v1/relay/enrol", padded.as_bytes()).ok(),
        json!({"ok": true})
    );
    relay.assert_alive();
}

fn bodies_over_8_mib_are_413_and_exactly_8_mib_is_fine(backend: Backend) {
    const CAP: usize = 8 * 1024 * 1024;
    let relay = backend.start_generous(&[]);
    let s = Host::enrolled(&relay, "big-s");
    let a = Host::enrolled(&relay, "big-a");
    let it = envelope_item(&s, &[&a]);
    let body = json!({"items": [it]}).to_string();
    let padded = format!("{body}{}", " ".repeat(CAP - body.len()));
    let r = s.call(&relay, "POST", "/v2/relay/items", padded.as_bytes());
    assert_eq!(r.ok()["results"][0]["status"], json!("accepted"));
    let over = format!("{body}{}", " ".repeat(CAP + 1 - body.len()));
    s.call(&relay, "POST", "/v2/relay/items", over.as_bytes())
        .assert_error(413, "request body too large");
    relay.assert_alive();
}

/// Streams a chunked body of `total` bytes without ever finishing it, and returns the answer the
/// relay sent meanwhile (the relay must refuse while streaming, not wait for the end).
fn stream_unfinished(
    relay: &Relay,
    headers: &[(String, String)],
    path: &str,
    total: usize,
) -> Response {
    let mut s = TcpStream::connect(relay.addr()).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut reader = s.try_clone().unwrap();
    let reading = std::thread::spawn(move || read_until_close(&mut reader));
    let chunk = vec![b' '; 64 * 1024];
    let mut sent = 0;
    while sent < total {
        let frame = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        if s.write_all(&frame).is_err() {
            break; // the relay stopped reading: fine
        }
        sent += chunk.len();
    }
    let raw = reading
        .join()
        .unwrap()
        .expect("an answer before the body ended");
    parse_response(&raw).expect("parseable answer")
}

fn oversized_bodies_are_refused_while_streaming(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "stream-a");
    // Valid hop headers except that the signature cannot match a body nobody has seen yet:
    // the relay has to read the body to check it, and must stop at the cap.
    let hh = a.hop_headers("POST", "/v2/relay/items", b"{}", &Hop::default());
    let r = stream_unfinished(&relay, &hh, "/v2/relay/items", 9 * 1024 * 1024);
    r.assert_error(413, "request body too large");
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let r = stream_unfinished(&relay, &[], "/v1/relay/challenge", 64 * 1024);
    r.assert_error(413, "request body too large");
    relay.assert_alive();
}

fn every_answer_has_cache_control_no_store(backend: Backend) {
    let relay = backend.start(&["--enrol-per-minute", "6", "--max-challenges", "5"]);
    let a = Host::enrolled(&relay, "cc-a");
    let mut answers: Vec<(String, Response)> = vec![
        ("info".into(), relay.get("/v2/relay/info")),
        ("info+hop".into(), a.get(&relay, "/v2/relay/info")),
        ("pull".into(), a.get(&relay, "/v2/relay/items")),
        ("push".into(), a.push(&relay, &[])),
        ("404".into(), relay.get("/nope")),
        ("401".into(), relay.get("/v2/relay/items")),
        (
            "400 json".into(),
            a.call(&relay, "POST", "/v2/relay/items", b"{"),
        ),
        (
            "409".into(),
            a.ack(&relay, "2cdde67d-cd82-4ea8-b716-a09865c0adeb", json!(0)),
        ),
        ("400 ack".into(), a.ack(&relay, &relay.epoch(), json!(-1))),
        (
            "404 enc".into(),
            a.get(&relay, "/v2/relay/enc-key?pubkey=x"),
        ),
        (
            "413".into(),
            relay.post("/v1/relay/challenge", &vec![b' '; 9000]),
        ),
    ];
    for i in 0..5 {
        answers.push((format!("challenge {i}"), Host::new("cc").challenge(&relay)));
    }
    let statuses: Vec<u16> = answers.iter().map(|(_, r)| r.status).collect();
    assert!(
        statuses.contains(&429),
        "the rate window was hit: {statuses:?}"
    );
    for (what, r) in &answers {
        assert_eq!(
            r.header("cache-control"),
            Some("no-store"),
            "{what} ({}) lacks cache-control: no-store",
            r.status
        );
    }
    let r = backend.start(&["--max-challenges", "1"]);
    Host::new("c1").challenge(&r).ok();
    let full = Host::new("c2").challenge(&r);
    assert_eq!(full.status, 503);
    assert_eq!(full.header("cache-control"), Some("no-store"), "503");
}

fn responses_are_json(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "ct-a");
    for r in [
        relay.get("/v2/relay/info"),
        relay.get("/nope"),
        a.get(&relay, "/v2/relay/items"),
    ] {
        let ct = r.header("content-type").unwrap_or("");
        assert!(ct.starts_with("application/json"), "content-type {ct:?}");
        r.json();
    }
}

fn a_kept_alive_connection_serves_several_requests(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "ka-a");
    let mut s = TcpStream::connect(relay.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for i in 0..5 {
        let hh = a.hop_headers("GET", "/v2/relay/items?after=0", b"", &Hop::default());
        let mut req = String::from("GET /v2/relay/items?after=0 HTTP/1.1\r\nHost: x\r\n");
        for (k, v) in &hh {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes()).unwrap();
        let r = read_one_response(&mut s).unwrap_or_else(|e| panic!("request {i}: {e}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.json()["items"], json!([]));
        // An error answer on the same connection.
        s.write_all(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let r = read_one_response(&mut s).unwrap_or_else(|e| panic!("404 {i}: {e}"));
        r.assert_error(404, "not found");
    }
}

fn every_endpoint_refuses_bodies_over_8_mib(backend: Backend) {
    const CAP: usize = 8 * 1024 * 1024;
    let relay = backend.start_generous(&[]);
    let a = Host::enrolled(&relay, "cap-all");
    let over = format!("{{}}{}", " ".repeat(CAP + 1 - 2));
    for p in [
        "/v2/relay/ack",
        "/v2/relay/senders",
        "/v1/relay/enc-key",
        "/v1/relay/messages",
        "/v1/relay/ack",
    ] {
        // Signed headers with a signature over another body: the relay must read to check.
        let hop = Hop {
            signed_body: Some("{}".into()),
            ..Hop::default()
        };
        a.call_with(&relay, "POST", p, over.as_bytes(), &hop, &[])
            .assert_error(413, "request body too large");
    }
    relay.assert_alive();
}

backend_tests! {
    ;
    postgres ignored:
    valid_hops_pass_and_every_bad_hop_is_401,
    revoked_key_hop_is_401,
    every_authenticated_endpoint_requires_a_hop,
    unknown_routes_are_404_signed_or_not,
    known_paths_with_another_method_are_404,
    malformed_json_is_400_with_an_error,
    small_endpoint_bodies_are_capped_at_8192,
    bodies_over_8_mib_are_413_and_exactly_8_mib_is_fine,
    oversized_bodies_are_refused_while_streaming,
    every_answer_has_cache_control_no_store,
    responses_are_json,
    a_kept_alive_connection_serves_several_requests,
    every_endpoint_refuses_bodies_over_8_mib,
}
