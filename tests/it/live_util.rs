//! Support for the live-delivery tests (docs/protocol.md §8): signed raw requests held open on
//! their own sockets (waiting pulls, event streams), timed.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::common::{parse_response, read_one_response, Host, Relay, Response};

/// The raw bytes of a hop-signed `GET path` (`Connection: close`).
pub(crate) fn signed_get(addr: SocketAddr, host: &Host, path: &str) -> Vec<u8> {
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in host.hop_headers("GET", path, b"", &Default::default()) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.into_bytes()
}

/// Open a connection and send a signed GET without reading the answer.
pub(crate) fn start_get(relay: &Relay, host: &Host, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(relay.addr()).expect("connect");
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(90))).unwrap();
    s.write_all(&signed_get(relay.addr(), host, path))
        .expect("send request");
    s
}

/// A signed pull with this query (leading `?` included), timed from send to full answer.
pub(crate) fn timed_pull(relay: &Relay, host: &Host, query: &str) -> (Response, Duration) {
    let t = Instant::now();
    let mut s = start_get(relay, host, &format!("/v2/relay/items{query}"));
    let r = read_one_response(&mut s).expect("pull answer");
    (r, t.elapsed())
}

/// True when nothing has arrived on `s` yet (the request is still held).
pub(crate) fn still_waiting(s: &TcpStream) -> bool {
    s.set_nonblocking(true).unwrap();
    let mut b = [0u8; 1];
    let waiting = matches!(s.peek(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).unwrap();
    waiting
}

/// An open event stream: the raw bytes read so far (chunk framing included; each event is one
/// chunk, so its text is contiguous).
pub(crate) struct EventStream {
    pub s: TcpStream,
    pub raw: Vec<u8>,
}

impl EventStream {
    /// Connect, send the signed `GET /v2/relay/events` and read the response head.
    pub(crate) fn open(relay: &Relay, host: &Host) -> EventStream {
        let s = start_get(relay, host, "/v2/relay/events");
        let mut es = EventStream { s, raw: Vec::new() };
        assert!(
            es.wait_for("\r\n\r\n", Duration::from_secs(10)),
            "no response head: {}",
            es.text()
        );
        es
    }

    /// Everything read so far, as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// Read until `needle` appears in what was read (true) or `limit` passes or the stream ends
    /// (false).
    pub(crate) fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while !self.text().contains(needle) {
            if self.read_once(deadline) != Got::Data {
                return false;
            }
        }
        true
    }

    /// Read until the server ends the stream (true) or `limit` passes (false).
    pub(crate) fn closed_within(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            match self.read_once(deadline) {
                Got::Data => {}
                Got::End => return true,
                Got::Timeout => return false,
            }
        }
    }

    /// One read before `deadline`.
    fn read_once(&mut self, deadline: Instant) -> Got {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Got::Timeout;
        }
        self.s.set_read_timeout(Some(left)).unwrap();
        let mut b = [0u8; 4096];
        match self.s.read(&mut b) {
            Ok(0) => Got::End,
            Ok(n) => {
                self.raw.extend_from_slice(&b[..n]);
                Got::Data
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Got::Timeout
            }
            Err(_) => Got::End,
        }
    }

    /// The response head, parsed (status and headers).
    pub(crate) fn head(&self) -> Response {
        let end = self
            .raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("head read")
            + 4;
        let mut head = self.raw[..end].to_vec();
        head.extend_from_slice(b"0\r\n\r\n"); // an empty chunked body, to parse the head
        parse_response(&head).expect("response head")
    }
}

/// What one read gave.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    Data,
    End,
    Timeout,
}
