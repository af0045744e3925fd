//! End-to-end bench: starts the release `mbx-relay serve` on a temporary store with bench-friendly
//! limits, drives it with `relay-tool bench --json` (the same load generator users run), and prints
//! one table: single-item pushes at 64 senders, batches of 100 × 1 KiB, drain of the queued items,
//! resident memory and start-up time with them queued.
//!
//! Run: `cargo build --release -p relay-tool && cargo bench --bench e2e`.
//! Knobs (environment): MBX_BENCH_DRAIN_ITEMS (items queued then drained, default 100000; the
//! target figure is for 1000000), MBX_BENCH_SINGLE_ITEMS (default 20000), MBX_BENCH_BATCH_SENDERS
//! (default 8), MBX_BENCH_TARGETS (default 8), MBX_BENCH_RELAY_BIN / MBX_BENCH_TOOL_BIN (binaries).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a relay may take to come up or go down before the bench gives up.
const START_LIMIT: Duration = Duration::from_secs(120);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

fn relay_bin() -> PathBuf {
    std::env::var_os("MBX_BENCH_RELAY_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_mbx-relay")),
        PathBuf::from,
    )
}

/// `relay-tool` is another package's binary: cargo does not build it for this bench, so it is
/// looked up next to `mbx-relay` (build it with `cargo build --release -p relay-tool`).
fn tool_bin() -> Result<PathBuf, String> {
    let p = std::env::var_os("MBX_BENCH_TOOL_BIN")
        .map_or_else(|| relay_bin().with_file_name("relay-tool"), PathBuf::from);
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} not found: run `cargo build --release -p relay-tool` first (or set MBX_BENCH_TOOL_BIN)", p.display()))
    }
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| e.to_string())
}

/// A running relay and how long it took to serve.
struct Relay {
    child: Child,
    startup: Duration,
}

impl Drop for Relay {
    /// Never leave a relay behind, even when the bench fails half-way.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `GET /health` answered 200 (plain std TCP: no client library needed for one line).
fn health_ok(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if s.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// Forward the relay's stdout lines to a channel (keeps reading so the pipe never fills).
fn watch_stdout(out: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

/// Start `mbx-relay serve` on `dir`; start-up time runs until `listening on` is printed and
/// `/health` answers 200.
fn start_relay(dir: &Path, port: u16) -> Result<Relay, String> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.with_extension("log"))
        .map_err(|e| format!("relay log: {e}"))?;
    let big = "1000000000000";
    let t0 = Instant::now();
    let mut child = Command::new(relay_bin())
        .arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--store-dir")
        .arg(dir)
        .args([
            "--pushes-per-minute",
            "4000000000",
            "--enrol-per-minute",
            "1000000",
            "--enrol-per-minute-v4-24",
            "1000000",
            "--enrol-per-minute-v6-48",
            "1000000",
            "--max-connections-per-address",
            "1024",
        ])
        .args(["--max-queue-items", big, "--max-queue-bytes", big])
        .args(["--max-sender-items", big, "--max-sender-bytes", big])
        .args(["--max-account-items", big, "--max-account-bytes", big])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", relay_bin().display()))?;
    let lines = watch_stdout(child.stdout.take().ok_or("no relay stdout")?);
    let deadline = t0 + START_LIMIT;
    loop {
        match lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(l) if l.starts_with("listening on") => break,
            Ok(_) => {}
            Err(_) => {
                let _ = child.kill();
                return Err(format!(
                    "relay did not print `listening on` (see {})",
                    dir.with_extension("log").display()
                ));
            }
        }
    }
    while !health_ok(port) {
        if Instant::now() > deadline {
            let _ = child.kill();
            return Err("relay /health did not answer 200".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(Relay {
        child,
        startup: t0.elapsed(),
    })
}

/// SIGTERM (graceful: the relay closes its store) and a bounded wait; SIGKILL on drop if need be.
fn stop_relay(mut r: Relay) {
    let pid = r.child.id() as i32;
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + START_LIMIT;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = r.child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A memory figure of `pid` from /proc (`VmRSS`: resident now, `VmHWM`: peak resident), in MiB.
fn proc_mib(pid: u32, field: &str) -> Result<f64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

/// VmRSS of `pid` in MiB.
fn rss_mib(pid: u32) -> Result<f64, String> {
    proc_mib(pid, "VmRSS")
}

/// How long the bench lets a relay that just finished pushing settle before reading its RSS:
/// one heap-trim period and a second to spare.
const SETTLE: Duration = Duration::from_secs(mbx_relay::memory::TRIM_INTERVAL.as_secs() + 1);

fn bench_cmd(url: &str, args: &[String]) -> Result<Command, String> {
    let mut c = Command::new(tool_bin()?);
    c.args(["bench", "--url", url, "--json"])
        .args(args)
        .stderr(Stdio::inherit());
    Ok(c)
}

/// Run a `--drain --pause-before-drain` bench: `paused` runs while the items sit queued.
fn run_tool_paused(
    url: &str,
    args: &[String],
    paused: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<Value, String> {
    let mut child = bench_cmd(url, args)?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("relay-tool: {e}"))?;
    let mut lines = BufReader::new(child.stdout.take().ok_or("no relay-tool stdout")?).lines();
    let first = lines
        .next()
        .ok_or("relay-tool ended before pausing")?
        .map_err(|e| e.to_string())?;
    let p: Value =
        serde_json::from_str(&first).map_err(|e| format!("relay-tool pause line: {e}"))?;
    let result = paused(p["queued"].as_u64().unwrap_or(0));
    let mut stdin = child.stdin.take().ok_or("no relay-tool stdin")?;
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let rest: String = lines.map_while(Result::ok).collect::<Vec<_>>().join("\n");
    let status = child.wait().map_err(|e| e.to_string())?;
    result?;
    if !status.success() {
        return Err(format!("relay-tool bench failed ({status})"));
    }
    serde_json::from_str(&rest).map_err(|e| format!("relay-tool output: {e}"))
}

fn thousands(x: f64) -> String {
    let s = format!("{:.0}", x.max(0.0));
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// CPU (user + system) the relay process has used so far.
fn relay_cpu(r: Option<&Relay>) -> Result<Duration, String> {
    let pid = r.ok_or("relay not running")?.child.id();
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // Fields after the `(comm)`: state is field 3, utime 14, stime 15.
    let rest = s.rsplit_once(')').map(|(_, r)| r).ok_or("bad /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_millis((ticks(11) + ticks(12)) * 1000 / hz))
}

/// `relay X / generator Y` CPU microseconds per item of a phase.
fn cpu_note(relay: Duration, phase: &Value) -> String {
    let items = phase["items"].as_u64().unwrap_or(0).max(1) as f64;
    let gen = phase["client_cpu_s"].as_f64().unwrap_or(0.0);
    format!(
        "relay {:.0} / gen {:.0}",
        relay.as_secs_f64() * 1e6 / items,
        gen * 1e6 / items
    )
}

/// The 1-minute load average (how busy the shared machine was).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

fn errors_of(phase: &Value) -> u64 {
    phase["errors"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

fn errors_note(phase: &Value) -> String {
    match errors_of(phase) {
        0 => String::new(),
        n => format!(" ({n} errors: {})", phase["errors"]),
    }
}

fn main() -> Result<(), String> {
    let drain_items = env_u64("MBX_BENCH_DRAIN_ITEMS", 100_000);
    let single_items = env_u64("MBX_BENCH_SINGLE_ITEMS", 20_000);
    let batch_senders = env_u64("MBX_BENCH_BATCH_SENDERS", 8);
    let targets = env_u64("MBX_BENCH_TARGETS", 8).to_string();
    tool_bin()?;
    let load_before = load_average();
    let tmp = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let dir = tmp.path().join("store");
    let port = free_port()?;
    let url = format!("http://127.0.0.1:{port}");
    eprintln!(
        "e2e: relay {} on {url}, store {}",
        relay_bin().display(),
        dir.display()
    );

    let relay = start_relay(&dir, port)?;
    let empty_startup = relay.startup;
    let s = |v: &[&str]| v.iter().map(|x| (*x).to_string()).collect::<Vec<_>>();

    // Relay CPU is read around each phase; the relay is idle while the generator builds or checks.
    let mut relay = Some(relay);
    let mut cpu_mark = relay_cpu(relay.as_ref())?;
    let mut single_push_cpu = Duration::ZERO;
    let single = run_tool_paused(
        &url,
        &s(&[
            "--senders",
            "64",
            "--targets",
            &targets,
            "--items",
            &single_items.to_string(),
            "--batch",
            "1",
            "--item-bytes",
            "1024",
            "--drain",
            "--pause-before-drain",
        ]),
        &mut |_| {
            let now = relay_cpu(relay.as_ref())?;
            single_push_cpu = now.saturating_sub(cpu_mark);
            Ok(())
        },
    )?;

    let mut queued = 0u64;
    let (mut rss_pushed, mut rss_peak, mut rss_restarted, mut startup_queued) =
        (0.0, 0.0, 0.0, Duration::ZERO);
    let mut batch_push_cpu = Duration::ZERO;
    cpu_mark = relay_cpu(relay.as_ref())?;
    let batched = run_tool_paused(
        &url,
        &s(&[
            "--senders",
            &batch_senders.to_string(),
            "--targets",
            &targets,
            "--items",
            &drain_items.to_string(),
            "--batch",
            "100",
            "--item-bytes",
            "1024",
            "--drain",
            "--pause-before-drain",
        ]),
        &mut |q| {
            queued = q;
            let r = relay.take().ok_or("relay not running")?;
            batch_push_cpu = relay_cpu(Some(&r))?.saturating_sub(cpu_mark);
            std::thread::sleep(SETTLE);
            rss_pushed = rss_mib(r.child.id())?;
            rss_peak = proc_mib(r.child.id(), "VmHWM")?;
            stop_relay(r);
            let r = start_relay(&dir, port)?;
            startup_queued = r.startup;
            // Let the restarted relay settle (startup sweep, first heartbeat) before reading RSS.
            std::thread::sleep(Duration::from_millis(500));
            rss_restarted = rss_mib(r.child.id())?;
            cpu_mark = relay_cpu(Some(&r))?;
            relay = Some(r);
            Ok(())
        },
    )?;
    let drain_cpu = relay_cpu(relay.as_ref())?.saturating_sub(cpu_mark);
    if let Some(r) = relay.take() {
        stop_relay(r);
    }

    let sp = &single["points"][0]["push"];
    let bp = &batched["points"][0]["push"];
    let dp = &batched["points"][0]["drain"];
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    let rows = [
        (
            "single-item pushes, 64 senders, 1 KiB".to_string(),
            format!(
                "{} items/s, p99 {:.1} ms{}",
                thousands(sp["items_per_s"].as_f64().unwrap_or(0.0)),
                sp["latency_ms"]["p99"].as_f64().unwrap_or(0.0),
                errors_note(sp)
            ),
            cpu_note(single_push_cpu, sp),
            ">= 5,000 items/s, p99 < 50 ms",
        ),
        (
            format!("batches of 100 x 1 KiB, {batch_senders} senders"),
            format!(
                "{} items/s, {:.1} MB/s{}",
                thousands(bp["items_per_s"].as_f64().unwrap_or(0.0)),
                bp["mb_per_s"].as_f64().unwrap_or(0.0),
                errors_note(bp)
            ),
            cpu_note(batch_push_cpu, bp),
            ">= 40,000 items/s",
        ),
        (
            format!(
                "drain (pull + ack) of {} queued items",
                thousands(queued as f64)
            ),
            format!(
                "{} items/s{}",
                thousands(dp["items_per_s"].as_f64().unwrap_or(0.0)),
                errors_note(dp)
            ),
            cpu_note(drain_cpu, dp),
            ">= 100,000 items/s",
        ),
        (
            format!(
                "RSS, {} queued: after pushing (peak while pushing) / after restart",
                thousands(queued as f64)
            ),
            format!("{rss_pushed:.1} ({rss_peak:.1}) MiB / {rss_restarted:.1} MiB"),
            String::new(),
            "< 64 MiB (1,000,000 queued)",
        ),
        (
            format!("start-up, {} queued", thousands(queued as f64)),
            ms(startup_queued),
            String::new(),
            "< 200 ms (1,000,000 queued)",
        ),
        (
            "start-up, empty store".to_string(),
            ms(empty_startup),
            String::new(),
            "",
        ),
    ];
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0);
    let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(22);
    println!(
        "\nmbx-relay e2e bench ({} cores, relay and load generator on this machine)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!(
        "load average before / after: {load_before} / {}",
        load_average()
    );
    println!(
        "| {:w0$} | {:w1$} | {:w2$} | target |",
        "measurement", "result", "CPU per item (µs)"
    );
    println!(
        "|{}|{}|{}|--------|",
        "-".repeat(w0 + 2),
        "-".repeat(w1 + 2),
        "-".repeat(w2 + 2)
    );
    for (a, b, c, d) in &rows {
        println!("| {a:w0$} | {b:w1$} | {c:w2$} | {d} |");
    }
    Ok(())
}
