//! What an operator sees of a real `mbx-relay serve` on its private listener: `/metrics` after
//! refused connections (at the global and per-address caps, a head past `--header-timeout`),
//! requests, refusals and a push (names, labels and values; `promtool check metrics` clean;
//! `le` labels without float noise; `mbx_relay_build_info` with the commit built; the
//! `process_*` metrics), items delivered, acked and expired, every refusal reason at 0 from the
//! start, the newest backup's time, the JSON `/status`, and the TLS certificate's expiry as a metric and a
//! start-up warning, with a certificate made at test time.

use crate::common;
use crate::tls_util;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Host, Relay, RelayOpts, GENEROUS};
use serde_json::Value;

/// The value of the sample whose name and labels are exactly `series` (`None` when absent).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .filter(|v| v.starts_with(' '))
            .map(|v| {
                v.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("{l:?}: {e}\n{text}"))
            })
    })
}

/// [`sample`], asserted present.
fn must(text: &str, series: &str) -> f64 {
    sample(text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.x: distinct client
/// addresses for the per-address cap). std cannot bind before connecting: libc does.
fn connect_from(from: &str, to: SocketAddr) -> TcpStream {
    use std::os::fd::FromRawFd as _;
    let (IpAddr::V4(from), SocketAddr::V4(to)) = (from.parse::<IpAddr>().unwrap(), to) else {
        panic!("IPv4 only")
    };
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    let (local, remote) = (sin(from, 0), sin(*to.ip(), to.port()));
    // SAFETY: plain socket calls on a descriptor owned here until `from_raw_fd` takes it.
    let s = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket");
        let s = TcpStream::from_raw_fd(fd);
        let bound = libc::bind(fd, (&raw const local).cast(), len);
        assert_eq!(bound, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let connected = libc::connect(fd, (&raw const remote).cast(), len);
        assert_eq!(connected, 0, "connect: {}", std::io::Error::last_os_error());
        s
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// The status line of the answer on `s` to a request written on it.
fn status_of(s: &mut TcpStream) -> String {
    let _ = s.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n");
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    String::from_utf8_lossy(&buf)
        .lines()
        .next()
        .unwrap_or("")
        .to_owned()
}

/// Scrape until `series` has `value` (connection counts settle as the relay sees closes).
fn settle(relay: &Relay, series: &str, value: f64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = relay.metrics().text();
        if sample(&text, series) == Some(value) || Instant::now() > deadline {
            assert_eq!(sample(&text, series), Some(value), "{series}:\n{text}");
            return text;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `git rev-parse --short=12 HEAD` of this checkout, as build.rs reads it (or "unknown").
fn built_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// `promtool check metrics` on `text`: its complaints (empty when clean).
fn promtool(text: &str) -> String {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package `prometheus`; .ci/run installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() {
        said
    } else {
        format!("exit {:?}: {said}", out.status.code())
    }
}

#[test]
fn refused_connections_are_counted_by_reason_and_the_global_cap_is_logged() {
    let mut args = GENEROUS.to_vec();
    args.extend([
        "--metrics-listen",
        "127.0.0.1:0",
        "--max-connections",
        "2",
        "--max-connections-per-address",
        "1",
        "--header-timeout",
        "1s",
    ]);
    let relay = Relay::start(&args);
    let at = relay.addr();
    // The private listener keeps its own caps: a scrape's connection still open on the relay's
    // side (here one held on purpose) never shuts the next scrape out, even at
    // --max-connections-per-address 1 on the public listener.
    let lingering = connect_from("127.0.0.1", relay.metrics_addr());
    let scrape = relay.metrics();
    assert_eq!(scrape.status, 200, "{}", scrape.text());
    drop(lingering);
    let text = scrape.text();
    for reason in [
        "max_connections",
        "max_connections_per_address",
        "header_timeout",
        "tls_handshake_failed",
    ] {
        let series = format!("mbx_relay_connections_refused_total{{reason=\"{reason}\"}}");
        assert_eq!(sample(&text, &series), Some(0.0), "{series}:\n{text}");
    }
    assert_eq!(sample(&text, "mbx_relay_connections_open"), Some(0.0));

    // One connection held from 127.0.0.1: a second from there is over the per-address cap; one
    // from 127.0.0.2 takes the last slot, so a third address is over the global cap.
    let held_a = connect_from("127.0.0.1", at);
    settle(&relay, "mbx_relay_connections_open", 1.0);
    let mut b = connect_from("127.0.0.1", at);
    assert!(status_of(&mut b).contains(" 429 "), "per-address cap");
    let held_c = connect_from("127.0.0.2", at);
    settle(&relay, "mbx_relay_connections_open", 2.0);
    let mut d = connect_from("127.0.0.3", at);
    assert!(status_of(&mut d).contains(" 503 "), "global cap");
    let text = relay.metrics().text();
    assert_eq!(
        must(
            &text,
            "mbx_relay_connections_refused_total{reason=\"max_connections\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "mbx_relay_connections_refused_total{reason=\"max_connections_per_address\"}"
        ),
        1.0
    );
    drop((held_a, held_c));
    settle(&relay, "mbx_relay_connections_open", 0.0);
    // The 503 is logged (rate-limited), naming the flag.
    let log = relay.stderr_log();
    assert_eq!(
        log.lines()
            .filter(|l| l.contains("connections refused at --max-connections"))
            .count(),
        1,
        "{log}"
    );

    // A head that never ends is cut off at --header-timeout 1s.
    let mut slow = connect_from("127.0.0.1", at);
    slow.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n")
        .unwrap();
    let mut sink = Vec::new();
    let _ = slow.read_to_end(&mut sink);
    drop(slow);
    settle(
        &relay,
        "mbx_relay_connections_refused_total{reason=\"header_timeout\"}",
        1.0,
    );
}

#[test]
fn metrics_count_requests_refusals_and_a_push_with_clean_labels() {
    let mut args = GENEROUS.to_vec();
    args.extend(["--metrics-listen", "127.0.0.1:0"]);
    let relay = Relay::start(&args);
    assert_eq!(relay.get("/health").status, 200);
    assert_eq!(relay.get("/nope").status, 404);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let res = alice.push_one(&relay, &common::envelope_item(&alice, &[&bob]));
    assert_eq!(res["status"], "accepted", "{res}");
    assert_eq!(bob.pull(&relay, "").status, 200);
    let stranger = Host::new("stranger");
    assert_eq!(
        stranger.call(&relay, "GET", "/v2/relay/items", b"").status,
        401
    );
    let huge = relay.send(
        "POST",
        "/v2/relay/items",
        &[("content-length", "99999999")],
        b"",
    );
    assert_eq!(huge.status, 413, "{}", huge.text());

    let text = settle(&relay, "mbx_relay_connections_open", 0.0);
    assert_eq!(
        must(
            &text,
            "mbx_relay_requests_total{method=\"GET\",path=\"/health\",status=\"200\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "mbx_relay_requests_total{method=\"other\",path=\"other\",status=\"404\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "mbx_relay_requests_total{method=\"POST\",path=\"/v2/relay/items\",status=\"200\"}"
        ),
        1.0
    );
    assert_eq!(
        must(
            &text,
            "mbx_relay_request_seconds_count{method=\"POST\",path=\"/v2/relay/items\"}"
        ),
        2.0,
        "the push and the 413"
    );
    assert_eq!(
        must(
            &text,
            "mbx_relay_request_seconds_bucket{method=\"POST\",path=\"/v2/relay/items\",le=\"+Inf\"}"
        ),
        2.0
    );
    assert!(
        !text.contains("/nope"),
        "a raw path became a label:\n{text}"
    );
    assert_eq!(
        must(&text, "mbx_relay_refusals_total{reason=\"bad_hop\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "mbx_relay_refusals_total{reason=\"body_too_large\"}"),
        1.0
    );
    assert_eq!(
        must(&text, "mbx_relay_items_total{status=\"accepted\"}"),
        1.0
    );
    assert!(!text.contains("=\"\""), "an empty label:\n{text}");
    assert!(!text.contains("route="), "the old route label:\n{text}");
    assert!(must(&text, "mbx_relay_store_write_seconds_count") >= 1.0);
    assert!(
        must(&text, "mbx_relay_store_read_seconds_count") >= 1.0,
        "bob's pull"
    );
    assert_eq!(must(&text, "mbx_relay_enrolments_live"), 2.0);
    assert_eq!(must(&text, "mbx_relay_body_bytes_in_use"), 0.0);
    assert_eq!(must(&text, "mbx_relay_body_budget_bytes"), 268_435_456.0);
    assert_eq!(must(&text, "mbx_relay_waiters"), 0.0);
    assert!(must(&text, "mbx_relay_commit_group_ops_count") >= 1.0);

    // Build and process metrics.
    let build = format!(
        "mbx_relay_build_info{{version=\"{}\",commit=\"{}\"}}",
        env!("CARGO_PKG_VERSION"),
        built_commit()
    );
    assert_eq!(must(&text, &build), 1.0);
    assert!(must(&text, "process_resident_memory_bytes") > 1_000_000.0);
    assert!(must(&text, "process_open_fds") >= 3.0);
    assert!(must(&text, "process_cpu_seconds_total") > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let start = must(&text, "process_start_time_seconds");
    assert!(
        start <= now + 1.0 && start > now - 600.0,
        "{start} vs {now}"
    );

    // Clean bucket labels: each `le` is its bound's shortest text.
    assert!(
        text.contains("mbx_relay_fsync_seconds_bucket{le=\"0.05\"}"),
        "{text}"
    );
    assert!(text.contains("mbx_relay_store_write_seconds_bucket{le=\"0.05\"}"));
    for le in text.lines().filter_map(|l| l.split("le=\"").nth(1)) {
        let v = le.split('"').next().unwrap();
        if v != "+Inf" {
            let f: f64 = v.parse().unwrap();
            assert!(
                format!("{f}").len() <= 6,
                "float noise in le=\"{v}\":\n{text}"
            );
        }
    }
    assert_eq!(promtool(&text), "", "promtool check metrics:\n{text}");
}

/// Every `reason` a request can be refused for (`mbx_relay_refusals_total`).
const REFUSAL_REASONS: [&str; 12] = [
    "public_window",
    "enrol_window",
    "auth_failure_window",
    "body_per_address",
    "body_per_key",
    "body_budget",
    "body_too_large",
    "too_large",
    "bad_hop",
    "bad_enrolment",
    "bad_signature",
    "too_many_other",
];

/// Scrape until `series` is present and `ok` holds for its value (bounded).
fn wait_sample(relay: &Relay, series: &str, ok: impl Fn(f64) -> bool) -> (f64, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = relay.metrics().text();
        match sample(&text, series) {
            Some(v) if ok(v) => return (v, text),
            v if Instant::now() > deadline => panic!("{series} is {v:?}:\n{text}"),
            _ => std::thread::sleep(Duration::from_millis(100)),
        }
    }
}

fn unix_secs() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[test]
fn items_delivered_acked_and_expired_are_counted_every_refusal_reason_starts_at_0_and_the_last_backup_is_a_metric(
) {
    let mut args = GENEROUS.to_vec();
    args.extend([
        "--metrics-listen",
        "127.0.0.1:0",
        "--retention",
        "2s",
        "--sweep-interval",
        "1s",
    ]);
    let relay = Relay::start(&args);
    // Before any request: every refusal reason and item counter has its series, at 0 (a
    // `rate()` alert needs one), and a store never backed up says 0.
    let (never, text) = wait_sample(&relay, "mbx_relay_last_backup_timestamp_seconds", |_| true);
    assert_eq!(never, 0.0, "{text}");
    for reason in REFUSAL_REASONS {
        let series = format!("mbx_relay_refusals_total{{reason=\"{reason}\"}}");
        assert_eq!(sample(&text, &series), Some(0.0), "{series}:\n{text}");
    }
    for name in ["delivered", "acked", "expired"] {
        let series = format!("mbx_relay_items_{name}_total");
        assert_eq!(sample(&text, &series), Some(0.0), "{series}:\n{text}");
    }
    assert_eq!(must(&text, "mbx_relay_store_write_failing"), 0.0);
    let avail = must(&text, "mbx_relay_store_fs_avail_bytes");
    let size = must(&text, "mbx_relay_store_fs_size_bytes");
    assert!(avail > 0.0 && avail <= size, "{avail} of {size}");
    assert_eq!(promtool(&text), "", "promtool check metrics:\n{text}");

    // One item pulled and acked; a second left to expire.
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let res = alice.push_one(&relay, &common::envelope_item(&alice, &[&bob]));
    assert_eq!(res["status"], "accepted", "{res}");
    let page = bob.pull(&relay, "").json();
    assert_eq!(page["items"].as_array().unwrap().len(), 1, "{page}");
    let epoch = page["epoch"].as_str().unwrap();
    let ack = bob.ack(&relay, epoch, page["last_seq"].clone());
    assert_eq!(ack.status, 200, "{}", ack.text());
    let res = alice.push_one(&relay, &common::envelope_item(&alice, &[&bob]));
    assert_eq!(res["status"], "accepted", "{res}");
    let (expired, text) = wait_sample(&relay, "mbx_relay_items_expired_total", |v| v >= 1.0);
    // The item, and perhaps already its expiry notice to alice (notices expire too).
    assert!(expired == 1.0 || expired == 2.0, "{expired}:\n{text}");
    assert_eq!(must(&text, "mbx_relay_items_delivered_total"), 1.0);
    assert_eq!(must(&text, "mbx_relay_items_acked_total"), 1.0);
    assert_eq!(
        must(&text, "mbx_relay_items_total{status=\"accepted\"}"),
        2.0
    );

    // A backup through the running relay is the relay log's newest backup: the gauge follows
    // within one store reading (10 s).
    let before = unix_secs().floor();
    let file = relay.store_dir().with_extension("backup");
    let out = common::relay_tool(&[
        "backup",
        "--store-dir",
        relay.store_dir().to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let after = unix_secs().ceil();
    let (at, text) = wait_sample(&relay, "mbx_relay_last_backup_timestamp_seconds", |v| {
        v > 0.0
    });
    assert!(before <= at && at <= after, "{before} <= {at} <= {after}");
    assert_eq!(promtool(&text), "", "promtool check metrics:\n{text}");
}

/// The relay log's backup entries, newest first (`relay-tool log --json`, through the relay).
fn logged_backups(relay: &Relay) -> Vec<Value> {
    let out = common::relay_tool(&[
        "log",
        "--store-dir",
        relay.store_dir().to_str().unwrap(),
        "--json",
    ]);
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "backup")
        .collect()
}

/// `mbx_relay_last_backup_timestamp_seconds` counts only a backup that was kept: a stream the
/// client took whole but never kept (relay-tool killed before its fsync, a file that did not
/// verify) is no backup, so the relay log records none until `relay-tool backup` has written,
/// fsync'd and verified its file (it then says so: `backup-kept`).
#[test]
fn a_streamed_backup_counts_only_once_relay_tool_kept_it() {
    let mut args = GENEROUS.to_vec();
    args.extend(["--metrics-listen", "127.0.0.1:0"]);
    let relay = Relay::start(&args);
    let request = mbx_relay::admin::proto::Request::Backup;
    let mut reply = mbx_relay::admin::client::request(relay.store_dir(), &request)
        .unwrap()
        .expect("the relay answers on its admin socket");
    let mut bytes = Vec::new();
    reply.read_to_end(&mut bytes).unwrap();
    let done = reply.finish().unwrap();
    assert!(done["checksum"].as_str().is_some(), "{done}");
    assert!(
        logged_backups(&relay).is_empty(),
        "a stream nobody kept was recorded as a backup"
    );

    let file = relay.store_dir().with_extension("kept.mbxbak");
    let out = common::relay_tool(&[
        "backup",
        "--store-dir",
        relay.store_dir().to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let logged = logged_backups(&relay);
    assert_eq!(logged.len(), 1, "{logged:?}");
    let detail = logged[0]["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("kept by relay-tool as {}", file.display())),
        "{detail}"
    );
    let (at, _) = wait_sample(&relay, "mbx_relay_last_backup_timestamp_seconds", |v| {
        v > 0.0
    });
    assert!((at - unix_secs()).abs() < 120.0, "{at}");
}

#[test]
fn status_reports_the_relay_from_the_private_listener() {
    let mut args = GENEROUS.to_vec();
    args.extend([
        "--metrics-listen",
        "127.0.0.1:0",
        "--max-connections",
        "77",
        "--max-enrolments",
        "500",
    ]);
    let relay = Relay::start(&args);
    let alice = Host::enrolled(&relay, "alice");
    let bob = Host::enrolled(&relay, "bob");
    let res = alice.push_one(&relay, &common::envelope_item(&alice, &[&bob]));
    assert_eq!(res["status"], "accepted", "{res}");
    // The public listener does not serve it.
    relay.get("/status").assert_error(404, "not found");
    let t = Instant::now();
    let r = common::send(relay.metrics_addr(), "GET", "/status", &[], b"");
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let s: Value = r.json();
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"), "{s:#}");
    assert_eq!(s["commit"], Value::from(built_commit()));
    assert!(s["uptime_secs"].as_u64().is_some(), "{s:#}");
    assert_eq!(s["epoch"], relay.info()["epoch"], "{s:#}");
    assert_eq!(s["connections"]["max"], 77);
    assert!(s["connections"]["open"].as_i64().is_some());
    assert_eq!(s["connections"]["refused"]["max_connections"], 0);
    assert_eq!(s["waiters"], 0);
    assert_eq!(s["body_bytes_in_use"], 0);
    let store = &s["store"];
    assert_eq!(store["backend"], "directory", "{s:#}");
    assert!(store["size_on_disk_bytes"].as_u64().unwrap() > 0, "{s:#}");
    assert_eq!(store["queued_items"], 1, "{s:#}");
    assert!(store["queued_bytes"].as_u64().unwrap() > 0);
    assert_eq!(store["enrolments"]["live"], 2);
    assert_eq!(store["enrolments"]["max"], 500);
    assert_eq!(s["limits"]["max_connections"], 77);
    assert_eq!(s["limits"]["max_enrolments"], 500);
    assert_eq!(s["limits"]["retention_secs"], 14 * 86_400);
    assert_eq!(s["limits"]["pushes_per_minute"], 1_000_000);
    assert_eq!(s["tls"], Value::Null);
    assert!(s["process"]["resident_memory_bytes"].as_u64().unwrap() > 1_000_000);
    // Served nothing else there but /metrics.
    let post = common::send(relay.metrics_addr(), "POST", "/status", &[], b"");
    assert_eq!(post.status, 404);
}

/// The date (UTC) `days` from now.
fn date_in(days: u64) -> (i32, u8, u8) {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + days * 86_400_000;
    let iso = relay_wire::time::iso_ms(ms);
    let p = |r: std::ops::Range<usize>| iso[r].parse::<u32>().unwrap();
    (p(0..4) as i32, p(5..7) as u8, p(8..10) as u8)
}

#[test]
fn the_tls_certificate_expiry_is_a_metric_and_warned_about_within_fourteen_days() {
    let dir = tempfile::tempdir().unwrap();
    let ca = tls_util::Ca::new("test CA");
    let until = date_in(5);
    let (cert, key) = ca.leaf_until(0x5151, until).write(dir.path());
    let relay = Relay::launch(RelayOpts::args(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--metrics-listen",
        "127.0.0.1:0",
    ]))
    .expect("relay starts");
    let date = format!("{:04}-{:02}-{:02}", until.0, until.1, until.2);
    // The start-up line says https, the subject and the expiry.
    let line = relay.listening_line();
    assert!(
        line.contains("(https, certificate \"CN=relay 20817\""),
        "{line}"
    );
    assert!(
        line.contains(&format!("expires {date}T00:00:00.000Z")),
        "{line}"
    );
    // A warning: it expires within 14 days.
    let log = relay.stderr_log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the TLS certificate expires within 14 days"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(warnings[0].contains("days_left=4"), "{}", warnings[0]);
    // The expiry as a metric: notAfter in seconds since the epoch.
    let text = relay.metrics().text();
    let not_after = must(&text, "mbx_relay_tls_cert_not_after_seconds");
    let expected = relay_wire::time::parse_utc_instant(&format!("{date}T00:00:00Z"))
        .expect("a date") as f64
        / 1000.0;
    assert_eq!(not_after, expected, "{text}");
    // And in /status.
    let s: Value = common::send(relay.metrics_addr(), "GET", "/status", &[], b"").json();
    assert_eq!(s["tls"]["subject"], "CN=relay 20817", "{s:#}");
    let left = s["tls"]["expires_in_secs"].as_i64().unwrap();
    assert!(left > 3 * 86_400 && left <= 5 * 86_400, "{left}");
    // A handshake that fails is counted.
    let mut raw = TcpStream::connect(relay.addr()).unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let _ = raw.read_to_end(&mut Vec::new());
    settle(
        &relay,
        "mbx_relay_connections_refused_total{reason=\"tls_handshake_failed\"}",
        1.0,
    );
}

#[test]
fn a_certificate_far_from_expiry_gives_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let ca = tls_util::Ca::new("test CA");
    let (cert, key) = ca.leaf_until(0x77, date_in(60)).write(dir.path());
    let relay = Relay::launch(RelayOpts::args(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]))
    .expect("relay starts");
    let log = relay.stderr_log();
    assert!(!log.contains("TLS certificate expires"), "{log}");
    assert!(!log.contains("EXPIRED"), "{log}");
}
