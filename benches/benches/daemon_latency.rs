//! Daemon-to-daemon delivery latency (issue 15): a release `mbx-relay serve` and two release
//! `mbx-relay host run` daemons on loopback; `alpha`'s daemon is asked to send over its socket,
//! as `host send` does, and the figure is the time from that request to the moment `beta`'s
//! daemon has the message durably in its inbox (its receive commit returned). Both daemons write
//! stage marks (`MBX_HOST_TRACE`, host/src/trace.rs) so the table also says where the time goes.
//!
//! Run: `cargo build --release -p mbx-relay && cargo bench -p relay-bench --bench daemon_latency`.
//! Knobs (environment): MBX_DLAT_N (messages per run, default 200), MBX_DLAT_GAP_MS (between sends, default 100: each delivery measured on its own),
//! MBX_DLAT_RUNS (runs, each on a fresh relay and fresh hosts, default 3).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark: a panic aborts the measurement, nothing to recover"
)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use mbx_host::local::{socket_path, Request};
use mbx_host::trace::{unix_us, TRACE_ENV};
use relay_testkit::daemon::{wait_until, Daemon};
use relay_testkit::host::{pair, RelayProc};
use serde_json::Value;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The 1-minute load average now.
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// Ask a daemon to send one message, as `host send` does; the message id.
fn send(dir: &Path, i: u64) -> String {
    let mut s = UnixStream::connect(socket_path(dir)).expect("daemon socket");
    let req = Request::Send {
        to: "beta".into(),
        subject: "latency".into(),
        body: format!("message {i}"),
    };
    let mut line = serde_json::to_vec(&req).unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).unwrap();
    let v: Value = serde_json::from_str(&reply).unwrap();
    v["value"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("send refused: {reply}"))
        .to_string()
}

/// Stage marks of a trace file: (stage, item) -> first time in µs.
fn marks(path: &Path) -> HashMap<(String, String), u64> {
    let mut m = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if let [stage, item, t] = f[..] {
            if let Ok(t) = t.parse() {
                m.entry((stage.to_string(), item.to_string())).or_insert(t);
            }
        }
    }
    m
}

/// p50, p99 and max of `v` in ms.
fn pct(v: &mut [u64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    v.sort_unstable();
    let at = |p: usize| v[(v.len() * p / 100).min(v.len() - 1)] as f64 / 1000.0;
    format!(
        "p50 {:7.2}  p99 {:7.2}  max {:7.2}",
        at(50),
        at(99),
        v[v.len() - 1] as f64 / 1000.0
    )
}

/// One run: fresh relay and hosts, `n` messages `gap` apart.
fn run(n: u64, gap: Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (mut a, mut b) = pair(tmp.path(), &relay);
    let (ta, tb) = (
        tmp.path().join("alpha.trace"),
        tmp.path().join("beta.trace"),
    );
    a.env.push((TRACE_ENV.into(), ta.display().to_string()));
    b.env.push((TRACE_ENV.into(), tb.display().to_string()));
    a.sync();
    b.sync();
    let _da = Daemon::start(&a, &[]);
    let _db = Daemon::start(&b, &[]);
    std::thread::sleep(Duration::from_millis(500));
    let load_start = load();
    let mut asked = Vec::new();
    for i in 0..n {
        let t0 = unix_us();
        let id = send(&a.dir, i);
        asked.push((id, t0, unix_us()));
        std::thread::sleep(gap);
    }
    let all_in = wait_until(Duration::from_secs(60), || {
        let m = marks(&tb);
        asked
            .iter()
            .all(|(id, ..)| m.contains_key(&("received-durable".into(), id.clone())))
    });
    assert!(all_in, "not every message reached beta's inbox");
    let load_end = load();
    // One map of both daemons' marks (a message id is marked by one side per stage) and the
    // bench's own: when `send` was asked and answered.
    let mut m = marks(&ta);
    m.extend(marks(&tb));
    for (id, t0, t1) in &asked {
        m.insert(("asked".into(), id.clone()), *t0);
        m.insert(("answered".into(), id.clone()), *t1);
    }
    println!(
        "run: {n} messages {} ms apart, load average {load_start} -> {load_end}",
        gap.as_millis()
    );
    for (from, to) in STAGES {
        let mut v: Vec<u64> = asked
            .iter()
            .filter_map(|(id, ..)| {
                let t = |s: &str| m.get(&(s.to_string(), id.clone())).copied();
                Some(t(to)?.saturating_sub(t(from)?))
            })
            .collect();
        let label = format!("{from} -> {to}");
        let all = if v.len() == asked.len() {
            String::new()
        } else {
            format!("  (n={})", v.len())
        };
        println!("  {label:<36} {}{all}", pct(&mut v));
    }
    // Where the slowest delivery spent its time: every mark of both daemons in its window.
    let slowest = asked.iter().max_by_key(|(id, t0, _)| {
        m.get(&("received-durable".to_string(), id.clone()))
            .map_or(0, |t| t.saturating_sub(*t0))
    });
    if let Some((id, t0, _)) = slowest {
        let end = m
            .get(&("received-durable".to_string(), id.clone()))
            .copied()
            .unwrap_or(*t0);
        println!("  slowest delivery {id}: marks from its request on (ms)");
        for (who, path) in [("alpha", &ta), ("beta", &tb)] {
            for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
                let f: Vec<&str> = line.split(' ').collect();
                if let [stage, item, t] = f[..] {
                    if let Ok(t) = t.parse::<u64>() {
                        if t >= *t0 && t <= end {
                            let ms = (t - t0) as f64 / 1000.0;
                            println!("    {ms:8.2} {who} {stage} {item}");
                        }
                    }
                }
            }
        }
    }
}

/// The intervals printed, between marks of alpha's daemon (send-durable, seal-durable (only for a
/// draft sealed by a pass), push-sent, push-answered, accept-durable), beta's (wake,
/// pull-answered, received-durable) and the bench (asked, answered). The last line is delivery.
const STAGES: [(&str, &str); 11] = [
    ("asked", "send-durable"),
    ("asked", "answered"),
    ("send-durable", "seal-durable"),
    ("send-durable", "push-sent"),
    ("push-sent", "push-answered"),
    ("push-answered", "accept-durable"),
    ("push-answered", "wake"),
    ("wake", "pull-answered"),
    ("pull-answered", "received-durable"),
    ("asked", "pull-answered"),
    ("asked", "received-durable"),
];

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let n = env_u64("MBX_DLAT_N", 200).clamp(10, 5_000);
    let gap = Duration::from_millis(env_u64("MBX_DLAT_GAP_MS", 100));
    for _ in 0..env_u64("MBX_DLAT_RUNS", 3).clamp(1, 20) {
        run(n, gap);
    }
}
