//! `relay-bench --latency`: live delivery (docs/protocol.md §8) measured from the outside.
//!
//! - **Push-to-receive latency**: senders push single-item batches at a fixed offered rate,
//!   round robin over the targets; every target has one receiver thread. For each item the
//!   latency is the receiver's clock from the moment the push's answer arrived to the moment
//!   the pull answer holding the item arrived (same machine, one monotonic clock; an item a
//!   receiver holds before its push answer is back counts 0). Three receiver kinds, one run
//!   each, each with fresh targets: long-poll pulls (`wait=`), the events stream (a pull on each
//!   `queued` event), and plain polling every second.
//! - **Idle cost** (`--idle-waiters N --relay-pid P`): N receivers waiting (long-poll pulls, or
//!   event streams with `--idle-streams`) on raw sockets; the relay's RSS before and with them
//!   and its CPU over `--idle-secs`, read from `/proc/P` (same machine only).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use ureq::tls::TlsConfig;

use relay_core::{MAX_WAIT_SECS, PER_KEY_WAITERS};

use super::client::{Conn, Host};
use super::latency_svg::{self, Bars};
use super::payload::{build_batches, calibrate, Target};
use super::stats::{percentiles, Errors, Percentiles};
use super::{hosts, progress, relay_err, usage, BenchArgs};
use crate::fail::Failure;

/// Senders pushing at once (each paced to its share of the rate).
const SENDERS: usize = 16;
/// `wait` of the long-poll receivers, in seconds (short, so they notice the end of a run).
const WAIT_SECS: u64 = 2;
/// How long receivers keep going after the last push (more than one poll interval).
const GRACE: Duration = Duration::from_millis(2500);
/// The polling receivers' interval.
const POLL_EVERY: Duration = Duration::from_secs(1);
/// Most bytes read from one events stream.
const STREAM_LIMIT: u64 = 64 << 20;
/// Most idle waiters a run may ask for.
const MAX_IDLE: usize = 100_000;
/// Idle waiters per enrolled host: the relay's per-key cap of waits and streams.
const IDLE_PER_KEY: usize = PER_KEY_WAITERS;
/// Longest idle measurement (waiting pulls ask for the longest wait, 60 s, and must not expire
/// meanwhile).
const MAX_IDLE_SECS: u64 = 50;

/// How a receiver learns of new items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Kind {
    LongPoll,
    Stream,
    Poll1s,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::LongPoll => "long-poll (wait=)",
            Kind::Stream => "events stream",
            Kind::Poll1s => "polling every 1 s",
        }
    }
}

/// One receiver kind's run.
#[derive(Serialize, Debug)]
struct Run {
    kind: Kind,
    offered_per_s: u64,
    targets: usize,
    pushed: u64,
    received: u64,
    latency_ms: Percentiles,
    errors: std::collections::BTreeMap<String, u64>,
}

/// The idle-cost measurement.
#[derive(Serialize, Debug)]
struct Idle {
    waiters: usize,
    streams: bool,
    still_waiting: usize,
    rss_before_kib: u64,
    rss_with_kib: u64,
    bytes_per_waiter: f64,
    /// VmRSS at the end of `--idle-secs`, the waiters still held (settled: transient blocking
    /// threads and freed memory of the opening burst are gone by then).
    rss_end_kib: u64,
    seconds: u64,
    cpu_percent: f64,
}

#[derive(Serialize, Debug)]
struct Report {
    url: String,
    item_bytes: usize,
    runs: Vec<Run>,
    idle: Option<Idle>,
}

/// Push answers and receptions by item id; the latency once both are known.
#[derive(Default)]
struct Clock {
    seen: Mutex<HashMap<String, Side>>,
    lat_us: Mutex<Vec<u32>>,
    received: AtomicU64,
}

enum Side {
    Pushed(Instant),
    Received(Instant),
}

impl Clock {
    fn note(&self, id: &str, side: Side) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let (pushed, received) = match (seen.remove(id), side) {
            (Some(Side::Pushed(p)), Side::Received(r))
            | (Some(Side::Received(r)), Side::Pushed(p)) => (p, r),
            (None, side) => {
                seen.insert(id.to_string(), side);
                return;
            }
            // The same side twice (a page repeated): keep the first.
            (Some(first), _) => {
                seen.insert(id.to_string(), first);
                return;
            }
        };
        drop(seen);
        let us = received.saturating_duration_since(pushed).as_micros();
        self.lat_us
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(u32::try_from(us).unwrap_or(u32::MAX));
        self.received.fetch_add(1, Ordering::Relaxed);
    }
}

/// Run the latency bench and print its report.
///
/// # Errors
/// Usage errors, an unreachable relay, a refused enrolment.
pub(super) fn run(a: &BenchArgs) -> Result<(), Failure> {
    super::validate(a)?;
    if a.rate == 0 || a.duration == 0 {
        return Err(usage("--rate, --duration and --targets must be at least 1"));
    }
    if a.idle_waiters > MAX_IDLE || a.idle_secs == 0 || a.idle_secs > MAX_IDLE_SECS {
        return Err(usage(format!(
            "--idle-waiters at most {MAX_IDLE}; --idle-secs 1..={MAX_IDLE_SECS}"
        )));
    }
    if a.idle_waiters > 0 && a.relay_pid.is_none() {
        return Err(usage("--idle-waiters needs --relay-pid (read from /proc)"));
    }
    let timeout = Duration::from_secs(a.timeout.max(WAIT_SECS + 10));
    let tls = super::tls_of(a)?;
    let conn = Conn::new(&a.url, timeout, tls.clone());
    hosts::relay_info(&conn).map_err(relay_err)?;
    let tag = hosts::run_tag();
    let senders = hosts::enrol_many(&conn, &format!("lat-{tag}-s"), SENDERS).map_err(relay_err)?;
    let mut runs = Vec::new();
    let mut item_bytes = 0;
    for (n, kind) in [Kind::LongPoll, Kind::Stream, Kind::Poll1s]
        .into_iter()
        .enumerate()
    {
        if !a.kinds.is_empty() && !a.kinds.iter().any(|k| k == kind_flag(kind)) {
            continue;
        }
        progress(&format!(
            "{}: enrolling {} targets",
            kind.label(),
            a.targets
        ));
        let targets: Vec<Target> = hosts::enrol_many(&conn, &format!("lat-{tag}-{n}-t"), a.targets)
            .map_err(relay_err)?
            .into_iter()
            .map(Target::new)
            .collect();
        let (plain_len, bytes) =
            calibrate(&senders[0], &targets[0], a.item_bytes).map_err(relay_err)?;
        item_bytes = bytes;
        runs.push(one_run(
            a, &tls, kind, &senders, &targets, plain_len, timeout,
        )?);
    }
    let idle = match a.relay_pid {
        Some(pid) if a.idle_waiters > 0 => Some(idle_cost(a, &conn, pid, &tag)?),
        _ => None,
    };
    let report = Report {
        url: a.url.clone(),
        item_bytes,
        runs,
        idle,
    };
    if let Some(path) = a.svg.as_ref().filter(|_| !report.runs.is_empty()) {
        let bars: Vec<Bars> = report
            .runs
            .iter()
            .map(|r| Bars {
                label: r.kind.label().to_string(),
                p50: r.latency_ms.p50,
                p99: r.latency_ms.p99,
                max: r.latency_ms.max,
            })
            .collect();
        let title = format!(
            "mbx-relay live delivery: {} items/s over {} targets, {}-byte items",
            a.rate, a.targets, report.item_bytes
        );
        std::fs::write(
            path,
            latency_svg::render(&title, &bars, &super::svg::provenance()),
        )
        .map_err(|e| Failure::io("cannot write", path, &e))?;
    }
    super::print_report(a, &report, text)?;
    super::failed_requests(report.runs.iter().flat_map(|r| r.errors.values()).sum())
}

/// The `--kinds` spelling of a receiver kind.
fn kind_flag(k: Kind) -> &'static str {
    match k {
        Kind::LongPoll => "long-poll",
        Kind::Stream => "stream",
        Kind::Poll1s => "poll",
    }
}

/// Push `rate × duration` items while the receivers of `kind` collect them.
fn one_run(
    a: &BenchArgs,
    tls: &TlsConfig,
    kind: Kind,
    senders: &[Host],
    targets: &[Target],
    plain_len: usize,
    timeout: Duration,
) -> Result<Run, Failure> {
    let total = a.rate * a.duration;
    let per_sender = total.div_ceil(SENDERS as u64);
    progress(&format!("{}: building {total} items", kind.label()));
    let plans = senders
        .iter()
        .enumerate()
        .map(|(i, s)| build_batches(s, targets, i, 0, per_sender, 1, plain_len))
        .collect::<Result<Vec<_>, _>>()
        .map_err(relay_err)?;
    let clock = Clock::default();
    let errors = Mutex::new(Errors::default());
    let pushed = AtomicU64::new(0);
    let interval = Duration::from_secs_f64(SENDERS as f64 / a.rate as f64);
    let run_for = Duration::from_secs(a.duration);
    progress(&format!(
        "{}: {} items/s over {} targets for {} s",
        kind.label(),
        a.rate,
        targets.len(),
        a.duration
    ));
    std::thread::scope(|s| {
        let start = Instant::now() + Duration::from_millis(500);
        let end = start + run_for + GRACE;
        for t in targets {
            let (clock, errors) = (&clock, &errors);
            s.spawn(move || {
                let r = receive(&a.url, tls, timeout, kind, &t.host, end, clock);
                if let Err(e) = r {
                    errors.lock().unwrap_or_else(|p| p.into_inner()).add(&e, 1);
                }
            });
        }
        for (i, plan) in plans.iter().enumerate() {
            let (clock, errors, pushed) = (&clock, &errors, &pushed);
            let conn = Conn::new(&a.url, timeout, tls.clone());
            let sender = &senders[i];
            s.spawn(move || {
                // Sender i's item j is due at start + (j·SENDERS + i) / rate.
                let offset = interval.mul_f64(i as f64 / SENDERS as f64);
                for (j, batch) in plan.iter().enumerate() {
                    let due = start + offset + interval * j as u32;
                    if due >= start + run_for {
                        break;
                    }
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    match conn.post("/v2/relay/items", &batch.body, Some(sender)) {
                        Ok(r) if r.status == 200 && r.body.contains("\"accepted\"") => {
                            pushed.fetch_add(1, Ordering::Relaxed);
                            for it in &batch.items {
                                clock.note(&it.id, Side::Pushed(Instant::now()));
                            }
                        }
                        Ok(r) => errors
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .add(&format!("push {}", r.error_kind()), 1),
                        Err(e) => errors
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .add(&format!("push {e}"), 1),
                    }
                }
            });
        }
    });
    let mut lat = clock.lat_us.into_inner().unwrap_or_else(|p| p.into_inner());
    Ok(Run {
        kind,
        offered_per_s: a.rate,
        targets: targets.len(),
        pushed: pushed.into_inner(),
        received: clock.received.into_inner(),
        latency_ms: percentiles(&mut lat),
        errors: errors.into_inner().unwrap_or_else(|p| p.into_inner()).0,
    })
}

/// One receiver until `end`: pull what its kind tells it to, noting each item's arrival.
///
/// # Errors
/// The first transport or HTTP failure, as an error kind.
fn receive(
    url: &str,
    tls: &TlsConfig,
    timeout: Duration,
    kind: Kind,
    host: &Host,
    end: Instant,
    clock: &Clock,
) -> Result<(), String> {
    let conn = Conn::new(url, timeout, tls.clone());
    let mut after = 0u64;
    match kind {
        Kind::LongPoll => {
            while Instant::now() < end {
                after = pull(&conn, host, after, WAIT_SECS, clock)?;
            }
        }
        Kind::Poll1s => {
            let mut next = Instant::now();
            while next < end {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += POLL_EVERY;
                after = pull(&conn, host, after, 0, clock)?;
            }
        }
        Kind::Stream => {
            // The stream's own connection ends with the run (its timeout), not at a heartbeat.
            let left = end.saturating_duration_since(Instant::now());
            let sconn = Conn::new(url, left, tls.clone());
            let (status, body) = sconn.get_stream("/v2/relay/events", host, STREAM_LIMIT)?;
            if status != 200 {
                return Err(format!("events http {status}"));
            }
            let mut lines = BufReader::new(body).lines();
            let mut queued = false;
            while let Some(Ok(line)) = lines.next() {
                if line == "event: queued" {
                    queued = true;
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let head = serde_json::from_str::<serde_json::Value>(data)
                        .ok()
                        .and_then(|v| v.get("head_seq").and_then(|h| h.as_u64()))
                        .unwrap_or(0);
                    if queued && head > after {
                        after = pull(&conn, host, after, 0, clock)?;
                    }
                    queued = false;
                }
                if Instant::now() >= end {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// One pull after `after` (waiting `wait` s); notes every item; the new `after`.
fn pull(conn: &Conn, host: &Host, after: u64, wait: u64, clock: &Clock) -> Result<u64, String> {
    let q = if wait > 0 {
        format!("/v2/relay/items?after={after}&wait={wait}")
    } else {
        format!("/v2/relay/items?after={after}")
    };
    let r = conn.get(&q, Some(host))?;
    let at = Instant::now();
    if r.status != 200 {
        return Err(format!("pull {}", r.error_kind()));
    }
    let v: serde_json::Value =
        serde_json::from_str(&r.body).map_err(|_| "pull: not JSON".to_string())?;
    for it in v["items"].as_array().into_iter().flatten() {
        if let Some(id) = it["item_id"].as_str() {
            clock.note(id, Side::Received(at));
        }
    }
    Ok(v["last_seq"].as_u64().unwrap_or(after))
}

/// Hold `--idle-waiters` receivers waiting and read the relay's RSS and CPU from `/proc`.
fn idle_cost(a: &BenchArgs, conn: &Conn, pid: u32, tag: &str) -> Result<Idle, Failure> {
    let n = a.idle_waiters;
    raise_fd_limit(n + 256)?;
    let keys = n.div_ceil(IDLE_PER_KEY);
    progress(&format!("idle: enrolling {keys} hosts"));
    let hosts = hosts::enrol_many(conn, &format!("idle-{tag}-"), keys).map_err(relay_err)?;
    let addr = a
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    std::thread::sleep(Duration::from_secs(2));
    let rss_before = rss_kib(pid)?;
    let path = if a.idle_streams {
        "/v2/relay/events".to_string()
    } else {
        format!("/v2/relay/items?wait={MAX_WAIT_SECS}")
    };
    progress(&format!("idle: opening {n} waiters ({path})"));
    let mut socks = Vec::with_capacity(n);
    for i in 0..n {
        let host = &hosts[i / IDLE_PER_KEY];
        let mut s = TcpStream::connect(&addr).map_err(|e| relay_err(format!("connect: {e}")))?;
        let mut req = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\n");
        for (k, v) in Conn::sign(host, "GET", &path, "").headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        req.push_str("\r\n");
        s.write_all(req.as_bytes())
            .map_err(|e| relay_err(format!("send: {e}")))?;
        socks.push(s);
    }
    std::thread::sleep(Duration::from_secs(3));
    let rss_with = rss_kib(pid)?;
    let cpu0 = cpu_ticks(pid)?;
    progress(&format!("idle: measuring CPU for {} s", a.idle_secs));
    std::thread::sleep(Duration::from_secs(a.idle_secs));
    let cpu1 = cpu_ticks(pid)?;
    let rss_end = rss_kib(pid)?;
    // SAFETY: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let still = socks.iter().filter(|s| waiting(s, a.idle_streams)).count();
    drop(socks);
    Ok(Idle {
        waiters: n,
        streams: a.idle_streams,
        still_waiting: still,
        rss_before_kib: rss_before,
        rss_with_kib: rss_with,
        bytes_per_waiter: (rss_with.saturating_sub(rss_before) * 1024) as f64 / n as f64,
        rss_end_kib: rss_end,
        seconds: a.idle_secs,
        cpu_percent: (cpu1.saturating_sub(cpu0)) as f64 / hz / a.idle_secs as f64 * 100.0,
    })
}

/// Whether a waiter is still held: a pull has no answer yet; a stream's answer has not ended.
fn waiting(s: &TcpStream, stream: bool) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let mut buf = [0u8; 4096];
    let mut got = Vec::new();
    loop {
        match (&*s).read(&mut buf) {
            Ok(0) => break false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                break if stream {
                    !got.ends_with(b"0\r\n\r\n")
                } else {
                    got.is_empty()
                };
            }
            Err(_) => break false,
        }
        if got.len() > 1 << 20 {
            break false;
        }
    }
}

/// Resident set of `pid` in KiB (`VmRSS` of `/proc/pid/status`).
fn rss_kib(pid: u32) -> Result<u64, Failure> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| relay_err(format!("/proc/{pid}/status: {e}")))?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| relay_err(format!("/proc/{pid}/status has no VmRSS")))
}

/// User plus system CPU of `pid`, in clock ticks (`/proc/pid/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> Result<u64, Failure> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| relay_err(format!("/proc/{pid}/stat: {e}")))?;
    // Fields after the `(comm)`, which may hold spaces.
    let rest = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
    // After `)`: state is field 3, so utime (14) and stime (15) are at 11 and 12.
    match (num(11), num(12)) {
        (Some(u), Some(s)) => Ok(u + s),
        _ => Err(relay_err(format!("/proc/{pid}/stat: unexpected format"))),
    }
}

/// Raise this process's open-file limit to at least `want` (up to the hard limit).
fn raise_fd_limit(want: usize) -> Result<(), Failure> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(relay_err("getrlimit failed".into()));
        }
        let want = want as libc::rlim_t;
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(relay_err("setrlimit failed".into()));
            }
        }
        if lim.rlim_cur < want {
            return Err(usage(format!(
                "--idle-waiters needs {want} open files; the hard limit is {} (raise `ulimit -Hn`)",
                lim.rlim_max
            )));
        }
    }
    Ok(())
}

/// The text report.
fn text(r: &Report) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "relay {} — items of {} bytes", r.url, r.item_bytes);
    let _ = writeln!(
        out,
        "{:<20} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9}  errors",
        "receivers", "offered", "pushed", "recvd", "p50 ms", "p99 ms", "max ms"
    );
    for run in &r.runs {
        let _ = writeln!(
            out,
            "{:<20} {:>8} {:>8} {:>8} {:>9.2} {:>9.2} {:>9.2}  {:?}",
            run.kind.label(),
            run.offered_per_s,
            run.pushed,
            run.received,
            run.latency_ms.p50,
            run.latency_ms.p99,
            run.latency_ms.max,
            run.errors
        );
    }
    if let Some(i) = &r.idle {
        let _ = writeln!(
            out,
            "idle: {} {} ({} still held): relay RSS {} -> {} KiB ({:.0} bytes per waiter), {} KiB at the end, CPU {:.2} % of a core over {} s",
            i.waiters,
            if i.streams { "event streams" } else { "waiting pulls" },
            i.still_waiting,
            i.rss_before_kib,
            i.rss_with_kib,
            i.bytes_per_waiter,
            i.rss_end_kib,
            i.cpu_percent,
            i.seconds
        );
    }
    out
}
