//! TLS in the relay (`serve --tls-cert FILE --tls-key FILE`), against the real binary with
//! certificates made at test time: who can complete a handshake, reload on SIGHUP (new
//! connections get the new certificate, open ones finish on the old, a bad pair is refused with
//! one log line and the old one stays), the handshake under the connection guards, and the
//! key-file permission rule.

use crate::common;
use crate::tls_util;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::{Relay, RelayOpts};
use tls_util::{chmod, client_config, connect, get, read_response, served_serial, signal, Ca};

/// A relay serving TLS with a leaf of serial `serial` from a fresh CA.
struct TlsRelay {
    relay: Relay,
    ca: Ca,
    dir: tempfile::TempDir,
    cert: PathBuf,
    key: PathBuf,
}

impl TlsRelay {
    fn start(serial: u64, extra: &[&str]) -> TlsRelay {
        TlsRelay::start_env(serial, extra, &[])
    }

    /// [`TlsRelay::start`] with environment variables for the relay.
    fn start_env(serial: u64, extra: &[&str], env: &[(&str, &str)]) -> TlsRelay {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::new("test CA");
        let (cert, key) = ca.leaf(serial).write(dir.path());
        let mut args = vec![
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let opts = env
            .iter()
            .fold(RelayOpts::args(&args), |o, (k, v)| o.env(k, v));
        let relay = Relay::launch(opts).expect("relay starts");
        TlsRelay {
            relay,
            ca,
            dir,
            cert,
            key,
        }
    }

    fn connect(&self) -> tls_util::TlsConn {
        connect(self.relay.addr(), &client_config(&self.ca)).expect("handshake")
    }

    fn hup(&self) {
        signal(self.relay.pid().unwrap(), libc::SIGHUP);
    }

    /// Wait until the relay's log holds `n` lines containing `text`.
    fn wait_log(&self, text: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.relay.stderr_log();
            let count = log.lines().filter(|l| l.contains(text)).count();
            if count >= n {
                assert_eq!(count, n, "one log line per event: {log}");
                return;
            }
            assert!(Instant::now() < deadline, "no {n}x {text:?} in log: {log}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

const SERIAL_A: u64 = 0x1001;
const SERIAL_B: u64 = 0x2002;

fn serial_bytes(s: u64) -> Vec<u8> {
    s.to_be_bytes()
        .into_iter()
        .skip_while(|b| *b == 0)
        .collect()
}

#[test]
fn info_is_served_over_tls_to_a_client_trusting_the_ca_and_no_handshake_to_one_that_does_not() {
    let t = TlsRelay::start(SERIAL_A, &["--metrics-listen", "127.0.0.1:0"]);
    let mut s = t.connect();
    assert_eq!(s.conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    assert_eq!(served_serial(&s), serial_bytes(SERIAL_A));
    let info = get(&mut s, "/v2/relay/info").unwrap();
    assert_eq!(info.status, 200, "{}", info.text());
    assert!(info.json()["relay_pubkey"].is_string());
    // Kept alive: a second request on the same connection.
    assert_eq!(get(&mut s, "/health").unwrap().status, 200);

    // TLS 1.2 is served too.
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(t.ca.der.clone()).unwrap();
    let tls12 = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut s12 = connect(t.relay.addr(), &std::sync::Arc::new(tls12)).unwrap();
    assert_eq!(
        s12.conn.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
    assert_eq!(get(&mut s12, "/health").unwrap().status, 200);

    let stranger = client_config(&Ca::new("another CA"));
    let e = connect(t.relay.addr(), &stranger).expect_err("untrusted CA refused");
    assert!(
        e.contains("UnknownIssuer") || e.contains("invalid peer certificate"),
        "{e}"
    );

    // Plain HTTP to the TLS port gets no HTTP answer.
    let raw = common::send_raw(t.relay.addr(), b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
        .unwrap_or_default();
    assert!(
        !raw.starts_with(b"HTTP/"),
        "plain HTTP answered on the TLS port"
    );
    assert_eq!(get(&mut t.connect(), "/health").unwrap().status, 200);
    // The private metrics listener stays plain HTTP.
    assert_eq!(t.relay.metrics().status, 200);
}

#[test]
fn sighup_gives_new_connections_the_new_certificate_while_an_open_request_finishes_on_the_old() {
    let t = TlsRelay::start(SERIAL_A, &[]);
    let mut old = t.connect();
    assert_eq!(served_serial(&old), serial_bytes(SERIAL_A));
    // A request in progress: its head is not complete yet.
    old.write_all(b"GET /health HTTP/1.1\r\nhost: localhost\r\n")
        .unwrap();
    old.flush().unwrap();

    t.ca.leaf(SERIAL_B).write(t.dir.path());
    t.hup();
    t.wait_log("TLS certificate reloaded", 1);
    let fresh = t.connect();
    assert_eq!(served_serial(&fresh), serial_bytes(SERIAL_B));

    // The open request completes on the old connection, which keeps serving.
    old.write_all(b"\r\n").unwrap();
    old.flush().unwrap();
    let r = read_response(&mut old).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(get(&mut old, "/v2/relay/info").unwrap().status, 200);
    assert_eq!(served_serial(&old), serial_bytes(SERIAL_A));
}

#[test]
fn a_bad_pair_at_reload_is_refused_in_one_log_line_and_the_old_certificate_stays() {
    let t = TlsRelay::start(SERIAL_A, &[]);
    let first_key = std::fs::read_to_string(&t.key).unwrap();

    // Garbage certificate.
    tls_util::replace(&t.cert, b"not a certificate\n");
    t.hup();
    t.wait_log("TLS reload refused", 1);
    assert_eq!(served_serial(&t.connect()), serial_bytes(SERIAL_A));

    // A certificate with another leaf's key.
    let other = t.ca.leaf(SERIAL_B);
    tls_util::replace(&t.cert, other.cert_pem.as_bytes());
    tls_util::replace(&t.key, first_key.as_bytes());
    t.hup();
    t.wait_log("TLS reload refused", 2);
    assert!(t.relay.stderr_log().contains("not a usable pair"));
    assert_eq!(served_serial(&t.connect()), serial_bytes(SERIAL_A));

    // A good pair whose key file others can read.
    other.write(t.dir.path());
    chmod(&t.key, 0o644);
    t.hup();
    t.wait_log("TLS reload refused", 3);
    assert!(t.relay.stderr_log().contains("accessible to other users"));
    let mut s = t.connect();
    assert_eq!(served_serial(&s), serial_bytes(SERIAL_A));
    assert_eq!(get(&mut s, "/health").unwrap().status, 200);

    // Fixed: the next SIGHUP takes it.
    chmod(&t.key, 0o600);
    t.hup();
    t.wait_log("TLS certificate reloaded", 1);
    assert_eq!(served_serial(&t.connect()), serial_bytes(SERIAL_B));

    // No key bytes in the log.
    let log = t.relay.stderr_log();
    for key in [&first_key, &other.key_pem] {
        for line in key.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!log.contains(line), "key material in the log");
        }
    }
}

#[test]
fn sighup_to_a_relay_without_tls_is_logged_and_ignored() {
    let relay = Relay::start(&[]);
    signal(relay.pid().unwrap(), libc::SIGHUP);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !relay.stderr_log().contains("nothing to reload") {
        assert!(Instant::now() < deadline, "{}", relay.stderr_log());
        std::thread::sleep(Duration::from_millis(20));
    }
    relay.assert_alive();
    assert_eq!(relay.get("/health").status, 200);
}

#[test]
fn a_tls_key_file_others_can_read_or_half_a_pair_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("ca");
    let (cert, key) = ca.leaf(SERIAL_A).write(dir.path());
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    chmod(std::path::Path::new(key), 0o644);
    let e = Relay::launch(RelayOpts::args(&["--tls-cert", cert, "--tls-key", key]))
        .err()
        .expect("refused");
    assert!(e.contains("TLS key file") && e.contains("chmod 600"), "{e}");

    chmod(std::path::Path::new(key), 0o600);
    let e = Relay::launch(RelayOpts::args(&["--tls-cert", cert]))
        .err()
        .expect("refused");
    assert!(e.contains("--tls-cert needs --tls-key"), "{e}");
    let e = Relay::launch(RelayOpts::default().env("MBX_RELAY_TLS_KEY", key))
        .err()
        .expect("refused");
    // The value came from the environment: the variable is named beside the flag.
    assert!(
        e.contains("--tls-key (from MBX_RELAY_TLS_KEY) needs --tls-cert"),
        "{e}"
    );
    // Both through the environment: served.
    let r = Relay::launch(
        RelayOpts::default()
            .env("MBX_RELAY_TLS_CERT", cert)
            .env("MBX_RELAY_TLS_KEY", key),
    )
    .expect("starts");
    let mut s = connect(r.addr(), &client_config(&ca)).unwrap();
    assert_eq!(get(&mut s, "/health").unwrap().status, 200);
}

/// Time from `t0` until the relay closes `s` (it sends nothing to a client that has not
/// finished its handshake).
fn closed_after(mut s: TcpStream, t0: Instant) -> Duration {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return t0.elapsed(),
            Ok(_) => {}
        }
    }
}

/// The first bytes a TLS client sends (its ClientHello record).
fn client_hello(ca: &Ca) -> Vec<u8> {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut c = rustls::ClientConnection::new(client_config(ca), name).unwrap();
    let mut out = Vec::new();
    c.write_tls(&mut out).unwrap();
    out
}

#[test]
fn a_half_open_tls_handshake_holds_its_slot_and_is_cut_off_within_the_header_timeout() {
    // The idle timeout is far longer: only the handshake deadline can cut these connections.
    let t = TlsRelay::start(
        SERIAL_A,
        &[
            "--header-timeout",
            "2s",
            "--idle-timeout",
            "60s",
            "--max-connections-per-address",
            "1",
        ],
    );
    let t0 = Instant::now();
    let silent = TcpStream::connect(t.relay.addr()).unwrap();
    // The half-open connection holds this address's only slot: refused, over TLS.
    let mut s = t.connect();
    let r = get(&mut s, "/health").unwrap();
    assert_eq!(r.status, 429, "{}", r.text());
    assert!(r.text().contains("too many connections from this address"));
    let waited = closed_after(silent, t0);
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(6),
        "silent handshake cut after {waited:?}"
    );

    let hello = client_hello(&t.ca);
    let t0 = Instant::now();
    let mut partial = TcpStream::connect(t.relay.addr()).unwrap();
    partial.write_all(&hello[..hello.len() / 2]).unwrap();
    let waited = closed_after(partial, t0);
    assert!(
        waited >= Duration::from_millis(1900) && waited < Duration::from_secs(6),
        "partial ClientHello cut after {waited:?}"
    );

    // The slot is free again.
    let mut s = t.connect();
    assert_eq!(get(&mut s, "/health").unwrap().status, 200);
}

#[test]
fn replaced_certificate_files_are_picked_up_without_a_signal_within_the_watch_period() {
    // The files are checked every 30 s; this relay checks every 500 ms (test-only variable).
    let t = TlsRelay::start_env(SERIAL_A, &[], &[("MBX_RELAY_TEST_TLS_WATCH_MS", "500")]);
    t.ca.leaf(SERIAL_B).write(t.dir.path());
    let deadline = Instant::now() + Duration::from_secs(15);
    while served_serial(&t.connect()) != serial_bytes(SERIAL_B) {
        assert!(Instant::now() < deadline, "{}", t.relay.stderr_log());
        std::thread::sleep(Duration::from_millis(250));
    }
    t.wait_log("files changed", 1);
}

/// Issue 24 item 7: the change watch stamps the files' modes too, so a pair refused for a key
/// others can read is taken once the key is `chmod 600`, without a SIGHUP (before, it stayed
/// refused until one).
#[test]
fn a_pair_refused_for_a_loose_key_is_taken_after_chmod_600_without_a_signal() {
    let t = TlsRelay::start_env(SERIAL_A, &[], &[("MBX_RELAY_TEST_TLS_WATCH_MS", "200")]);
    let other = t.ca.leaf(SERIAL_B);
    tls_util::replace_with_mode(&t.key, other.key_pem.as_bytes(), 0o644);
    tls_util::replace(&t.cert, other.cert_pem.as_bytes());
    let refused = common::wait_for(Duration::from_secs(10), || {
        let log = t.relay.stderr_log();
        log.contains("accessible to other users").then_some(())
    });
    assert!(refused.is_some(), "{}", t.relay.stderr_log());
    assert_eq!(served_serial(&t.connect()), serial_bytes(SERIAL_A));
    chmod(&t.key, 0o600);
    let taken = common::wait_for(Duration::from_secs(10), || {
        (served_serial(&t.connect()) == serial_bytes(SERIAL_B)).then_some(())
    });
    assert!(taken.is_some(), "{}", t.relay.stderr_log());
    t.wait_log("TLS certificate reloaded", 1);
}

/// Issue 24 item 6: one address could replay ClientHellos at 749 handshakes a second (87 % of a
/// core). Handshakes count per address in a one-minute window (`--tls-handshakes-per-minute`):
/// past it a new connection from that address is closed before its handshake, while other
/// addresses and the address's open connections are served.
#[test]
fn tls_handshakes_are_counted_per_address_and_past_the_window_refused() {
    let t = TlsRelay::start(SERIAL_A, &["--tls-handshakes-per-minute", "5"]);
    let mut kept = t.connect();
    for _ in 0..4 {
        assert_eq!(get(&mut t.connect(), "/health").unwrap().status, 200);
    }
    let e = connect(t.relay.addr(), &client_config(&t.ca)).expect_err("the sixth is refused");
    assert!(!e.is_empty());
    // The open connection keeps serving; another address still completes handshakes.
    assert_eq!(get(&mut kept, "/v2/relay/info").unwrap().status, 200);
    let d = common::Dialer::new();
    let from = std::net::Ipv4Addr::new(127, 0, 0, 2);
    let tcp = d.connect(from, t.relay.addr()).unwrap();
    let mut s = tls_util::connect_over(tcp, &client_config(&t.ca)).expect("another address");
    assert_eq!(get(&mut s, "/health").unwrap().status, 200);
    // The variable sets it too; 0 is refused at start-up.
    let v = TlsRelay::start_env(
        SERIAL_A,
        &[],
        &[("MBX_RELAY_TLS_HANDSHAKES_PER_MINUTE", "1")],
    );
    assert_eq!(get(&mut v.connect(), "/health").unwrap().status, 200);
    assert!(connect(v.relay.addr(), &client_config(&v.ca)).is_err());
}
