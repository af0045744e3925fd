//! Support for the host daemon tests: a `host run` child process (started, signalled, killed on
//! drop), a bounded wait, and a proxy that makes a relay look like one without long-poll.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use crate::host::HostCli;

/// A `host run` child process; killed on drop.
pub struct Daemon {
    child: Option<Child>,
    /// The daemon's process id.
    pub pid: u32,
}

impl Daemon {
    /// Start `host --dir DIR run ARGS` and wait for its "running" line.
    pub fn start(h: &HostCli, args: &[&str]) -> Daemon {
        Self::spawn(h, args, Stdio::inherit())
    }

    /// [`Daemon::start`] with its stderr (the daemon's log) written to `log`.
    pub fn start_logged(h: &HostCli, args: &[&str], log: &std::path::Path) -> Daemon {
        Self::spawn(h, args, std::fs::File::create(log).unwrap().into())
    }

    fn spawn(h: &HostCli, args: &[&str], stderr: Stdio) -> Daemon {
        let mut cmd = Command::new(crate::bins::relay());
        cmd.arg("host")
            .arg("--dir")
            .arg(&h.dir)
            .arg("run")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        h.prepare(&mut cmd);
        let mut child = cmd.spawn().expect("start host run");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("host run prints its running line");
        assert!(line.starts_with("host daemon running"), "{line}");
        let pid = child.id();
        Daemon {
            child: Some(child),
            pid,
        }
    }

    /// Send `sig` and wait (bounded) for the exit; returns the status and how long it took.
    pub fn stop_with(&mut self, sig: libc::c_int, timeout: Duration) -> (ExitStatus, Duration) {
        let mut child = self.child.take().expect("daemon running");
        let t0 = Instant::now();
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        assert_eq!(unsafe { libc::kill(self.pid as i32, sig) }, 0);
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                return (st, t0.elapsed());
            }
            if t0.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                panic!("daemon {} did not stop within {timeout:?}", self.pid);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Wait (bounded) for the daemon to exit by itself; its status if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let t0 = Instant::now();
        while t0.elapsed() < timeout {
            if let Some(st) = self.child.as_mut()?.try_wait().unwrap() {
                self.child = None;
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Kill it at once (SIGKILL), as a crash would, and reap it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Poll `done` every 50 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}

/// Delivery times of `h`'s inbox, sorted: ms from each envelope's `ts` (the sender queued it)
/// to the receiver's commit (`received_at`), same machine, same clock.
pub fn delivery_latencies(h: &HostCli) -> Vec<u64> {
    use relay_wire::time::parse_iso_strict;
    let mut lat: Vec<u64> = h.ok(&["inbox"])["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let sent = parse_iso_strict(m["ts"].as_str().unwrap()).unwrap();
            let got = parse_iso_strict(m["received_at"].as_str().unwrap()).unwrap();
            got.saturating_sub(sent)
        })
        .collect();
    lat.sort_unstable();
    lat
}

/// A loopback HTTP proxy in front of a relay that makes it look like the reference relay: it
/// drops the `x-mbx-wait-max` header from every answer (one request per connection), and counts
/// the requests it forwarded and those that asked to wait (`wait=` in the query).
pub struct ReferenceProxy {
    /// The proxy's loopback port.
    pub port: u16,
    /// Requests forwarded so far.
    pub requests: Arc<AtomicU64>,
    /// Of those, requests that asked to wait (`wait=`).
    pub waits: Arc<AtomicU64>,
}

/// Largest request or response the proxy carries.
const PROXY_MAX: usize = 64 * 1024 * 1024;

impl ReferenceProxy {
    /// Start the proxy for the relay on `relay_port`; it runs until the test process ends.
    pub fn start(relay_port: u16) -> ReferenceProxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicU64::new(0));
        let waits = Arc::new(AtomicU64::new(0));
        let (r, w) = (Arc::clone(&requests), Arc::clone(&waits));
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let (r, w) = (Arc::clone(&r), Arc::clone(&w));
                std::thread::spawn(move || {
                    let _ = forward(client, relay_port, &r, &w);
                });
            }
        });
        ReferenceProxy {
            port,
            requests,
            waits,
        }
    }

    /// The proxy's base URL, to give hosts instead of the relay's.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// One request (head and content-length body) to the relay with `connection: close`, the whole
/// answer back without the wait header.
fn forward(
    mut client: TcpStream,
    relay_port: u16,
    requests: &AtomicU64,
    waits: &AtomicU64,
) -> std::io::Result<()> {
    let (head, mut rest) = read_head(&mut client)?;
    let len = content_length(&head);
    while rest.len() < len && rest.len() < PROXY_MAX {
        let mut buf = [0u8; 65536];
        let n = client.read(&mut buf)?;
        if n == 0 {
            break;
        }
        rest.extend_from_slice(&buf[..n]);
    }
    let mut lines: Vec<&str> = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
        .collect();
    requests.fetch_add(1, Ordering::Relaxed);
    if lines[0].contains("wait=") {
        waits.fetch_add(1, Ordering::Relaxed);
    }
    lines.push("connection: close");
    let mut relay = TcpStream::connect(("127.0.0.1", relay_port))?;
    relay.write_all(format!("{}\r\n\r\n", lines.join("\r\n")).as_bytes())?;
    relay.write_all(&rest)?;
    let mut answer = Vec::new();
    relay.take(PROXY_MAX as u64).read_to_end(&mut answer)?;
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(answer.len());
    let head = String::from_utf8_lossy(&answer[..split]).into_owned();
    let head: Vec<&str> = head
        .split("\r\n")
        .filter(|l| !l.to_ascii_lowercase().starts_with("x-mbx-wait-max:"))
        .collect();
    client.write_all(head.join("\r\n").as_bytes())?;
    client.write_all(&answer[split..])?;
    Ok(())
}

/// The request head (without the blank line) and whatever body bytes came with it.
fn read_head(s: &mut TcpStream) -> std::io::Result<(String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..p]).into_owned();
            return Ok((head, buf[p + 4..].to_vec()));
        }
        let n = s.read(&mut chunk)?;
        if n == 0 || buf.len() > 1024 * 1024 {
            return Err(std::io::Error::other("no request head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn content_length(head: &str) -> usize {
    head.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0)
}
