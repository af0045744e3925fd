//! A keep-alive HTTP/1.1 connection for the hardening tests (the shared harness opens one
//! connection per request, which a test sending 100,000 requests cannot afford: every closed
//! connection leaves a TIME_WAIT entry). Used with `#[path = "hardening_conn.rs"] mod conn;`;
//! as a test target of its own it holds a self-check.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// One parsed response: status and body (content-length framed).
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Reply {
    /// The body parsed as JSON (panics with the text if it is not JSON).
    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Read one content-length framed response from `s`, giving up after `limit`. `s` may have a
/// read timeout (timeouts just retry until `limit`). `None` when the connection closed first.
pub(crate) fn read_reply(s: &mut TcpStream, limit: Duration) -> Option<Reply> {
    let start = Instant::now();
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..end]).into_owned();
            let lower = head.to_ascii_lowercase();
            let len: usize = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().expect("content-length"));
            if raw.len() >= end + 4 + len {
                let status = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .expect("status code");
                return Some(Reply {
                    status,
                    head,
                    body: raw[end + 4..end + 4 + len].to_vec(),
                });
            }
        }
        assert!(start.elapsed() < limit, "no full response within {limit:?}");
        match s.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => return None,
        }
    }
}

/// A keep-alive connection that reconnects when the relay closed it.
pub(crate) struct Conn {
    addr: SocketAddr,
    stream: Option<TcpStream>,
}

impl Conn {
    pub(crate) fn new(addr: SocketAddr) -> Conn {
        Conn { addr, stream: None }
    }

    fn stream(&mut self) -> &mut TcpStream {
        if self.stream.is_none() {
            let s = TcpStream::connect(self.addr).expect("connect");
            s.set_nodelay(true).expect("nodelay");
            s.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("timeout");
            self.stream = Some(s);
        }
        self.stream.as_mut().expect("stream")
    }

    /// One request; retried once on a fresh connection if the kept one was closed meanwhile.
    pub(crate) fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Reply {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: relay\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if method != "GET" || !body.is_empty() {
            req.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        for _ in 0..2 {
            let s = self.stream();
            if s.write_all(&bytes).is_ok() {
                if let Some(r) = read_reply(s, Duration::from_secs(60)) {
                    if r.head.to_ascii_lowercase().contains("connection: close") {
                        self.stream = None;
                    }
                    return r;
                }
            }
            self.stream = None;
        }
        panic!("{method} {path}: connection closed twice without an answer");
    }
}

#[test]
fn reads_a_framed_reply_from_a_local_server() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = [0u8; 1024];
        let _ = s.read(&mut buf).unwrap();
        s.write_all(b"HTTP/1.1 418 I'm a teapot\r\ncontent-length: 2\r\n\r\n{}")
            .unwrap();
    });
    let r = Conn::new(addr).request("GET", "/", &[], b"");
    assert_eq!(r.status, 418);
    assert_eq!(r.body, b"{}");
    t.join().unwrap();
}
