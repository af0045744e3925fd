//! End-to-end bench: starts the release `mbx-relay serve` with bench-friendly limits on a fjall
//! store, and/or on a throwaway PostgreSQL with one or two relay processes sharing one database,
//! drives each with `relay-bench --json` (the same load generator users run; one generator
//! per relay process, the load split evenly), and prints the figures of every store side by side:
//! single-item pushes at 64 senders (MBX_BENCH_SINGLE_SENDERS), batches of 100 × 1 KiB, drain
//! of the queued items, resident memory and start-up time with them queued, and the CPU per
//! item of the relays and PostgreSQL. The report names the binary's commit and the machine, holds
//! each fjall figure against its target (met / NOT met / n/a) and draws the figures against the
//! targets as an SVG (`MBX_BENCH_PLOT`, default `e2e.svg` beside the relay binary).
//!
//! Run: `cargo build --release -p mbx-relay && cargo bench -p relay-bench --bench e2e`.
//! Knobs (environment): MBX_BENCH_STORE (`fjall`, the default, `postgres` or `both`),
//! MBX_BENCH_RELAYS (relay processes on PostgreSQL: `1`, `2` or `1,2`; default 1),
//! MBX_BENCH_ROUNDS (default 1: the stores take turns each round, the table shows medians),
//! MBX_BENCH_DRAIN_ITEMS (items queued then drained, default 100000; the target figure is for
//! 1000000), MBX_BENCH_SINGLE_ITEMS (default 20000), MBX_BENCH_SINGLE_SENDERS (default 64),
//! MBX_BENCH_BATCH_SENDERS (default 8),
//! MBX_BENCH_TARGETS (default 8), MBX_BENCH_RELAY_BIN / MBX_BENCH_TOOL_BIN (binaries),
//! MBX_PG_BINDIR (PostgreSQL's binaries, as the tests' cluster finds them),
//! MBX_BENCH_PG_SETTINGS (extra `name=value` server settings, separated by spaces),
//! MBX_BENCH_PLOT (where the SVG goes), MBX_BENCH_LOG_DIR (keep the relays' logs there).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use relay_testkit::cluster::PgCluster;
use relay_testkit::procfs::{cluster_cpu, cpu as proc_cpu, load_average, mib as proc_mib};
use serde_json::Value;

#[path = "e2e/report.rs"]
mod report;

/// How long a relay may take to come up or go down before the bench gives up.
const START_LIMIT: Duration = Duration::from_secs(120);

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.replace(['_', ','], "").parse().ok())
        .unwrap_or(default)
}

/// `mbx-relay` is another package's binary: cargo does not build it for this bench, so it is
/// looked up in this build's `target/release/` (`cargo build --release -p mbx-relay`), or
/// `MBX_BENCH_RELAY_BIN`.
fn relay_bin() -> PathBuf {
    relay_testkit::bins::relay()
}

/// The load generator: this package's own binary, which cargo builds for the bench.
fn tool_bin() -> Result<PathBuf, String> {
    let p = std::env::var_os("MBX_BENCH_TOOL_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_relay-bench")),
        PathBuf::from,
    );
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found (set MBX_BENCH_TOOL_BIN)",
            p.display()
        ))
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

/// Where a relay process keeps its state: a fjall directory, or a PostgreSQL url (the directory
/// then holds only its admin socket) with the relay key every process on that database shares.
#[derive(Clone)]
struct StoreArgs {
    dir: PathBuf,
    postgres: Option<(String, String)>,
}

/// Start `mbx-relay serve` on `store`; start-up time runs until `listening on` is printed and
/// `/health` answers 200.
fn start_relay(store: &StoreArgs, port: u16) -> Result<Relay, String> {
    let dir = &store.dir;
    // MBX_BENCH_LOG_DIR keeps the relays' logs after the run (else they go with the store).
    let log_path = match std::env::var_os("MBX_BENCH_LOG_DIR") {
        Some(d) => PathBuf::from(d).join(format!("relay-{port}.log")),
        None => dir.with_extension("log"),
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .map_err(|e| format!("relay log: {e}"))?;
    let big = "1000000000000";
    let t0 = Instant::now();
    let mut cmd = Command::new(relay_bin());
    cmd.arg("serve")
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--store-dir")
        .arg(dir);
    if let Some((url, key)) = &store.postgres {
        cmd.args(["--store", url]).env("MBX_RELAY_KEY", key);
    }
    let mut child = cmd
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

/// How long the bench lets a relay that just finished pushing settle before reading its RSS:
/// one heap-trim period and a second to spare.
const SETTLE: Duration = Duration::from_secs(mbx_relay::memory::TRIM_INTERVAL.as_secs() + 1);

fn bench_cmd(url: &str, args: &[String]) -> Result<Command, String> {
    let mut c = Command::new(tool_bin()?);
    c.args(["--url", url, "--json"])
        .args(args)
        .stderr(Stdio::inherit());
    Ok(c)
}

/// Run one `--drain --pause-before-drain` generator per url at once (`args_of(n)`: the flags of
/// each of `n` generators); `paused` runs while every generator's items sit queued, with their
/// total. The answer is the generators' reports combined into one ([`combine`]).
fn run_tools_paused(
    urls: &[String],
    args_of: &dyn Fn(usize) -> Vec<String>,
    paused: &mut dyn FnMut(u64) -> Result<(), String>,
) -> Result<Value, String> {
    let mut gens = Vec::new();
    for url in urls {
        let mut child = bench_cmd(url, &args_of(urls.len()))?
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("relay-bench: {e}"))?;
        let lines = BufReader::new(child.stdout.take().ok_or("no relay-bench stdout")?).lines();
        gens.push((child, lines));
    }
    let mut queued = 0;
    for (_, lines) in &mut gens {
        let first = lines
            .next()
            .ok_or("relay-bench ended before pausing")?
            .map_err(|e| e.to_string())?;
        let p: Value =
            serde_json::from_str(&first).map_err(|e| format!("relay-bench pause line: {e}"))?;
        queued += p["queued"].as_u64().unwrap_or(0);
    }
    let result = paused(queued);
    for (child, _) in &mut gens {
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(b"go\n");
        }
    }
    let mut reports = Vec::new();
    for (mut child, lines) in gens {
        let rest: String = lines.map_while(Result::ok).collect::<Vec<_>>().join("\n");
        let status = child.wait().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err(format!("relay-bench failed ({status})"));
        }
        reports.push(
            serde_json::from_str::<Value>(&rest).map_err(|e| format!("relay-bench output: {e}"))?,
        );
    }
    result?;
    let phase = |name: &str| {
        combine(
            &reports
                .iter()
                .map(|r| &r["points"][0][name])
                .collect::<Vec<_>>(),
        )
    };
    Ok(serde_json::json!({"points": [{"push": phase("push"), "drain": phase("drain")}]}))
}

/// The phases of generators that ran at the same time as one: items and errors add up, the
/// time is the slowest generator's, p99 latency the worst, generator CPU the sum.
fn combine(phases: &[&Value]) -> Value {
    let sum = |f: &dyn Fn(&Value) -> f64| phases.iter().map(|p| f(p)).sum::<f64>();
    let max = |f: &dyn Fn(&Value) -> f64| phases.iter().map(|p| f(p)).fold(0.0, f64::max);
    let items = sum(&|p| p["items"].as_f64().unwrap_or(0.0));
    let seconds = max(&|p| p["seconds"].as_f64().unwrap_or(0.0));
    let mb = sum(&|p| p["mb_per_s"].as_f64().unwrap_or(0.0) * p["seconds"].as_f64().unwrap_or(0.0));
    let mut errors = serde_json::Map::new();
    for p in phases {
        for (k, v) in p["errors"].as_object().into_iter().flatten() {
            let n = errors.get(k).and_then(Value::as_u64).unwrap_or(0) + v.as_u64().unwrap_or(0);
            errors.insert(k.clone(), n.into());
        }
    }
    let per_s = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    serde_json::json!({
        "items": items,
        "seconds": seconds,
        "items_per_s": per_s(items),
        "mb_per_s": per_s(mb),
        "latency_ms": {"p99": max(&|p| p["latency_ms"]["p99"].as_f64().unwrap_or(0.0))},
        "errors": errors,
        "client_cpu_s": sum(&|p| p["client_cpu_s"].as_f64().unwrap_or(0.0)),
    })
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

fn errors_of(phase: &Value) -> u64 {
    phase["errors"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// The stores a run compares.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Fjall,
    /// This many relay processes on one PostgreSQL database.
    Postgres(usize),
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::Fjall => "fjall".into(),
            Kind::Postgres(1) => "PostgreSQL, 1 relay".into(),
            Kind::Postgres(n) => format!("PostgreSQL, {n} relays"),
        }
    }
}

/// The stores MBX_BENCH_STORE and MBX_BENCH_RELAYS ask for, in the order they take turns.
fn kinds() -> Result<Vec<Kind>, String> {
    let store = std::env::var("MBX_BENCH_STORE").unwrap_or_else(|_| "fjall".into());
    let relays = std::env::var("MBX_BENCH_RELAYS").unwrap_or_else(|_| "1".into());
    let mut pg = Vec::new();
    for r in relays.split(',') {
        match r.trim().parse::<usize>() {
            Ok(n @ 1..=2) => pg.push(Kind::Postgres(n)),
            _ => return Err(format!("MBX_BENCH_RELAYS: `{r}` is not 1 or 2")),
        }
    }
    match store.as_str() {
        "fjall" => Ok(vec![Kind::Fjall]),
        "postgres" => Ok(pg),
        "both" => Ok(std::iter::once(Kind::Fjall).chain(pg).collect()),
        other => Err(format!(
            "MBX_BENCH_STORE: `{other}` is not fjall, postgres or both"
        )),
    }
}

/// The relay processes of one store under test, each on its own port.
struct Deployment {
    stores: Vec<StoreArgs>,
    ports: Vec<u16>,
    relays: Vec<Relay>,
    /// Holds the relays' directories.
    _tmp: tempfile::TempDir,
}

impl Deployment {
    /// Start the relays of `kind`: a fresh fjall directory, or a fresh database on `cluster`
    /// with one relay key for all its processes.
    fn start(kind: Kind, cluster: Option<&PgCluster>) -> Result<Deployment, String> {
        let tmp = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
        let stores = match kind {
            Kind::Fjall => vec![StoreArgs {
                dir: tmp.path().join("store"),
                postgres: None,
            }],
            Kind::Postgres(n) => {
                let url = cluster.ok_or("no PostgreSQL cluster")?.fresh_db();
                let key = relay_wire::keys::SigningKey::generate().seed_b64();
                (0..n)
                    .map(|i| StoreArgs {
                        dir: tmp.path().join(format!("relay{i}")),
                        postgres: Some((url.clone(), key.clone())),
                    })
                    .collect()
            }
        };
        let ports = stores
            .iter()
            .map(|_| free_port())
            .collect::<Result<Vec<_>, _>>()?;
        let mut relays = Vec::new();
        for (s, p) in stores.iter().zip(&ports) {
            relays.push(start_relay(s, *p)?);
        }
        Ok(Deployment {
            stores,
            ports,
            relays,
            _tmp: tmp,
        })
    }

    fn urls(&self) -> Vec<String> {
        self.ports
            .iter()
            .map(|p| format!("http://127.0.0.1:{p}"))
            .collect()
    }

    /// CPU (user + system) of all relay processes so far.
    fn cpu(&self) -> Result<Duration, String> {
        self.relays
            .iter()
            .map(|r| proc_cpu(r.child.id(), false))
            .sum()
    }

    /// The largest of a memory figure over the relay processes.
    fn mib(&self, field: &str) -> Result<f64, String> {
        self.relays
            .iter()
            .map(|r| proc_mib(r.child.id(), field))
            .try_fold(0.0, |m, x| x.map(|x| f64::max(m, x)))
    }

    fn startup(&self) -> Duration {
        self.relays
            .iter()
            .map(|r| r.startup)
            .max()
            .unwrap_or_default()
    }

    fn stop(&mut self) {
        for r in self.relays.drain(..) {
            stop_relay(r);
        }
    }

    /// Stop every relay, then start them again on the same stores.
    fn restart(&mut self) -> Result<(), String> {
        self.stop();
        for (s, p) in self.stores.iter().zip(&self.ports) {
            self.relays.push(start_relay(s, *p)?);
        }
        Ok(())
    }
}

/// The figures of one store in one round.
#[derive(Default, Clone)]
struct Figures {
    single_ips: f64,
    single_p99: f64,
    batch_ips: f64,
    batch_mbps: f64,
    drain_ips: f64,
    /// CPU per item (µs) of each phase (single, batch, drain): relays, PostgreSQL, generators.
    relay_us: [f64; 3],
    pg_us: [f64; 3],
    gen_us: [f64; 3],
    queued: f64,
    rss_pushed: f64,
    rss_peak: f64,
    rss_restarted: f64,
    startup_queued_ms: f64,
    startup_empty_ms: f64,
    errors: f64,
    load: [f64; 2],
}

/// Microseconds of `cpu` per item of `phase`.
fn per_item(cpu: Duration, phase: &Value) -> f64 {
    cpu.as_secs_f64() * 1e6 / phase["items"].as_f64().unwrap_or(0.0).max(1.0)
}

/// Relay and PostgreSQL CPU, read around each phase.
struct CpuMarks {
    postmaster: Option<u32>,
    relay: Duration,
    pg: Duration,
}

impl CpuMarks {
    fn new(d: &Deployment, postmaster: Option<u32>) -> Result<Self, String> {
        Ok(CpuMarks {
            postmaster,
            relay: d.cpu()?,
            pg: postmaster.map(cluster_cpu).transpose()?.unwrap_or_default(),
        })
    }

    /// (relay, PostgreSQL) CPU since the marks were taken.
    fn since(&self, d: &Deployment) -> Result<(Duration, Duration), String> {
        let pg = self
            .postmaster
            .map(cluster_cpu)
            .transpose()?
            .unwrap_or_default();
        Ok((
            d.cpu()?.saturating_sub(self.relay),
            pg.saturating_sub(self.pg),
        ))
    }
}

/// Counts of the three phases (env knobs).
struct Sizes {
    single_items: u64,
    single_senders: u64,
    drain_items: u64,
    batch_senders: u64,
    targets: String,
}

/// The flags of one of `n` generators sharing `senders` and `items` of a phase.
fn phase_args(sizes: &Sizes, senders: u64, items: u64, batch: &str, n: usize) -> Vec<String> {
    let n = n.max(1) as u64;
    [
        "--senders",
        &(senders / n).max(1).to_string(),
        "--targets",
        &sizes.targets,
        "--items",
        &(items / n).max(1).to_string(),
        "--batch",
        batch,
        "--item-bytes",
        "1024",
        "--drain",
        "--pause-before-drain",
    ]
    .iter()
    .map(|x| (*x).to_string())
    .collect()
}

/// One round of one store: start it, single pushes, batches (left queued: RSS, restart), drain.
fn measure(kind: Kind, cluster: Option<&PgCluster>, sizes: &Sizes) -> Result<Figures, String> {
    let load_before = load_average();
    let postmaster = match kind {
        Kind::Fjall => None,
        Kind::Postgres(_) => cluster.and_then(PgCluster::pid),
    };
    let mut d = Deployment::start(kind, cluster)?;
    eprintln!("e2e: {} on {}", kind.name(), d.urls().join(" "));
    let mut f = Figures {
        startup_empty_ms: d.startup().as_secs_f64() * 1000.0,
        ..Figures::default()
    };
    let urls = d.urls();

    let marks = CpuMarks::new(&d, postmaster)?;
    let mut single_cpu = (Duration::ZERO, Duration::ZERO);
    let single = run_tools_paused(
        &urls,
        &|n| phase_args(sizes, sizes.single_senders, sizes.single_items, "1", n),
        &mut |_| {
            single_cpu = marks.since(&d)?;
            Ok(())
        },
    )?;

    let marks = CpuMarks::new(&d, postmaster)?;
    let mut batch_cpu = (Duration::ZERO, Duration::ZERO);
    let mut drain_marks = None;
    let batched = run_tools_paused(
        &urls,
        &|n| phase_args(sizes, sizes.batch_senders, sizes.drain_items, "100", n),
        &mut |q| {
            f.queued = q as f64;
            batch_cpu = marks.since(&d)?;
            std::thread::sleep(SETTLE);
            f.rss_pushed = d.mib("VmRSS")?;
            f.rss_peak = d.mib("VmHWM")?;
            d.restart()?;
            f.startup_queued_ms = d.startup().as_secs_f64() * 1000.0;
            // Let the restarted relays settle (startup sweep, first heartbeat) before reading RSS.
            std::thread::sleep(Duration::from_millis(500));
            f.rss_restarted = d.mib("VmRSS")?;
            drain_marks = Some(CpuMarks::new(&d, postmaster)?);
            Ok(())
        },
    )?;
    let drain_cpu = drain_marks.ok_or("no drain")?.since(&d)?;
    d.stop();

    let sp = &single["points"][0]["push"];
    let bp = &batched["points"][0]["push"];
    let dp = &batched["points"][0]["drain"];
    f.single_ips = sp["items_per_s"].as_f64().unwrap_or(0.0);
    f.single_p99 = sp["latency_ms"]["p99"].as_f64().unwrap_or(0.0);
    f.batch_ips = bp["items_per_s"].as_f64().unwrap_or(0.0);
    f.batch_mbps = bp["mb_per_s"].as_f64().unwrap_or(0.0);
    f.drain_ips = dp["items_per_s"].as_f64().unwrap_or(0.0);
    for (i, (p, (relay, pg))) in [(sp, single_cpu), (bp, batch_cpu), (dp, drain_cpu)]
        .into_iter()
        .enumerate()
    {
        f.relay_us[i] = per_item(relay, p);
        f.pg_us[i] = per_item(pg, p);
        f.gen_us[i] = p["client_cpu_s"].as_f64().unwrap_or(0.0) * 1e6
            / p["items"].as_f64().unwrap_or(0.0).max(1.0);
    }
    f.errors = [sp, bp, dp, &single["points"][0]["drain"]]
        .iter()
        .map(|p| errors_of(p) as f64)
        .sum();
    f.load = [load_before, load_average()];
    Ok(f)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// With `shared_preload_libraries=pg_stat_statements` in MBX_BENCH_PG_SETTINGS: the statements
/// that cost PostgreSQL most over the whole run (calls, times planned, execution and planning
/// ms, rows; planning is counted with `pg_stat_statements.track_planning=on`).
fn print_statements(cluster: &PgCluster) -> Result<(), String> {
    let settings = std::env::var("MBX_BENCH_PG_SETTINGS").unwrap_or_default();
    if !settings.contains("pg_stat_statements") {
        return Ok(());
    }
    let bindir = relay_testkit::cluster::find_bindir().ok_or("PostgreSQL binaries not found")?;
    let url = cluster.url();
    relay_testkit::cluster::psql(
        &bindir,
        &url,
        "CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
    )?;
    let top = relay_testkit::cluster::psql(
        &bindir,
        &url,
        "SELECT calls, plans, round(total_exec_time), round(total_plan_time), rows, \
         left(regexp_replace(query, '\\s+', ' ', 'g'), 110) FROM pg_stat_statements \
         ORDER BY total_exec_time + total_plan_time DESC LIMIT 15",
    )?;
    println!("\nPostgreSQL statements (calls | plans | exec ms | plan ms | rows | query):\n{top}");
    let deadlocks = relay_testkit::cluster::psql(
        &bindir,
        &url,
        "SELECT sum(deadlocks), sum(xact_rollback) FROM pg_stat_database",
    )?;
    println!("deadlocks | rollbacks: {deadlocks}");
    Ok(())
}

fn main() -> Result<(), String> {
    let sizes = Sizes {
        single_items: env_u64("MBX_BENCH_SINGLE_ITEMS", 20_000),
        single_senders: env_u64("MBX_BENCH_SINGLE_SENDERS", 64).max(1),
        drain_items: env_u64("MBX_BENCH_DRAIN_ITEMS", 100_000),
        batch_senders: env_u64("MBX_BENCH_BATCH_SENDERS", 8),
        targets: env_u64("MBX_BENCH_TARGETS", 8).to_string(),
    };
    let rounds = env_u64("MBX_BENCH_ROUNDS", 1).max(1);
    let kinds = kinds()?;
    tool_bin()?;
    let cluster = if kinds.iter().any(|k| matches!(k, Kind::Postgres(_))) {
        let bindir = relay_testkit::cluster::find_bindir()
            .ok_or("PostgreSQL server binaries not found (set MBX_PG_BINDIR)")?;
        let settings = std::env::var("MBX_BENCH_PG_SETTINGS").unwrap_or_default();
        let settings: Vec<&str> = settings.split_whitespace().collect();
        Some(PgCluster::start_with(&bindir, &settings)?)
    } else {
        None
    };
    eprintln!("e2e: relay {}", relay_bin().display());

    // Rounds alternate the stores, so a change in the machine's load hits all of them alike.
    let mut all: Vec<Vec<Figures>> = vec![Vec::new(); kinds.len()];
    for round in 1..=rounds {
        for (k, kind) in kinds.iter().enumerate() {
            eprintln!("e2e: round {round}/{rounds}, {}", kind.name());
            all[k].push(measure(*kind, cluster.as_ref(), &sizes)?);
        }
    }
    print_table(&kinds, &all, &sizes, rounds);
    if let Some(c) = &cluster {
        print_statements(c)?;
    }
    Ok(())
}

/// A table row's cell of store `k`.
type Cell<'a> = Box<dyn Fn(usize) -> String + 'a>;

/// One column per store (medians over the rounds), the loads seen, and the ratios asked for.
fn print_table(kinds: &[Kind], all: &[Vec<Figures>], sizes: &Sizes, rounds: u64) {
    let med = |k: usize, f: &dyn Fn(&Figures) -> f64| median(all[k].iter().map(f).collect());
    let cpu = |k: usize, i: usize| {
        let (r, p, g) = (
            med(k, &|f| f.relay_us[i]),
            med(k, &|f| f.pg_us[i]),
            med(k, &|f| f.gen_us[i]),
        );
        if kinds[k] == Kind::Fjall {
            format!("{r:.0} / - / {g:.0}")
        } else {
            format!("{r:.0} / {p:.0} / {g:.0}")
        }
    };
    let queued = thousands(med(0, &|f| f.queued));
    let rows: Vec<(String, Cell)> = vec![
        (
            format!(
                "single-item pushes, {} senders, 1 KiB: items/s (p99 ms)",
                sizes.single_senders
            ),
            Box::new(|k| {
                format!(
                    "{} ({:.1})",
                    thousands(med(k, &|f| f.single_ips)),
                    med(k, &|f| f.single_p99)
                )
            }),
        ),
        (
            "  CPU µs per item: relays / PostgreSQL / generators".into(),
            Box::new(|k| cpu(k, 0)),
        ),
        (
            format!(
                "batches of 100 x 1 KiB, {} senders: items/s (MB/s)",
                sizes.batch_senders
            ),
            Box::new(|k| {
                format!(
                    "{} ({:.1})",
                    thousands(med(k, &|f| f.batch_ips)),
                    med(k, &|f| f.batch_mbps)
                )
            }),
        ),
        (
            "  CPU µs per item: relays / PostgreSQL / generators".into(),
            Box::new(|k| cpu(k, 1)),
        ),
        (
            format!("drain (pull + ack) of {queued} queued items: items/s"),
            Box::new(|k| thousands(med(k, &|f| f.drain_ips))),
        ),
        (
            "  CPU µs per item: relays / PostgreSQL / generators".into(),
            Box::new(|k| cpu(k, 2)),
        ),
        (
            "RSS MiB per relay: after pushing (peak) / after restart".into(),
            Box::new(|k| {
                format!(
                    "{:.1} ({:.1}) / {:.1}",
                    med(k, &|f| f.rss_pushed),
                    med(k, &|f| f.rss_peak),
                    med(k, &|f| f.rss_restarted)
                )
            }),
        ),
        (
            "start-up ms: empty / with the items queued".into(),
            Box::new(|k| {
                format!(
                    "{:.0} / {:.0}",
                    med(k, &|f| f.startup_empty_ms),
                    med(k, &|f| f.startup_queued_ms)
                )
            }),
        ),
        (
            "errors (all phases, all rounds)".into(),
            Box::new(|k| format!("{:.0}", all[k].iter().map(|f| f.errors).sum::<f64>())),
        ),
    ];
    let medians = |k: usize| report::Medians {
        single_ips: med(k, &|f| f.single_ips),
        single_p99_ms: med(k, &|f| f.single_p99),
        batch_ips: med(k, &|f| f.batch_ips),
        drain_ips: med(k, &|f| f.drain_ips),
        rss_pushed_mib: med(k, &|f| f.rss_pushed),
        rss_restarted_mib: med(k, &|f| f.rss_restarted),
        startup_queued_ms: med(k, &|f| f.startup_queued_ms),
        queued: med(k, &|f| f.queued),
        errors: all[k].iter().map(|f| f.errors).sum(),
    };
    let fjall = kinds.iter().position(|k| *k == Kind::Fjall);
    // The fjall targets and whether the fjall column meets each (two more columns).
    let targets = fjall.map(|fj| report::targets(&medians(fj)));
    let mut names: Vec<String> = kinds.iter().map(|k| k.name()).collect();
    let mut cells: Vec<Vec<String>> = rows
        .iter()
        .map(|(_, f)| (0..kinds.len()).map(f).collect())
        .collect();
    if let Some(targets) = &targets {
        names.extend(["fjall target".to_owned(), "fjall met?".to_owned()]);
        for (row, t) in cells.iter_mut().zip(targets) {
            match t {
                Some((what, verdict)) => row.extend([what.clone(), verdict.text()]),
                None => row.extend([String::new(), String::new()]),
            }
        }
    }
    let columns = names.len();
    let w0 = rows.iter().map(|r| r.0.chars().count()).max().unwrap_or(0);
    let wk: Vec<usize> = (0..columns)
        .map(|k| {
            cells
                .iter()
                .map(|c| c[k].chars().count())
                .chain([names[k].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let loads: Vec<f64> = all.iter().flatten().flat_map(|f| f.load).collect();
    println!(
        "\nmbx-relay e2e bench ({} cores shared by the relays, PostgreSQL and the load generators; \
         {rounds} round(s), stores alternating, medians)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let version = report::binary_version(&relay_bin());
    let machine = report::machine();
    println!("binary: {version}; machine: {machine}");
    println!(
        "load average (1 min) while measuring: {:.2} .. {:.2}",
        loads.iter().copied().fold(f64::INFINITY, f64::min),
        loads.iter().copied().fold(0.0, f64::max)
    );
    let line = |first: &str, rest: &[String]| {
        let mut s = format!("| {first:w0$} |");
        for (c, w) in rest.iter().zip(&wk) {
            s.push_str(&format!(" {c:>w$} |"));
        }
        s
    };
    println!("{}", line("measurement", &names));
    println!(
        "|{}|{}",
        "-".repeat(w0 + 2),
        wk.iter()
            .map(|w| format!("{}:|", "-".repeat(w + 1)))
            .collect::<String>()
    );
    for ((label, _), c) in rows.iter().zip(&cells) {
        println!("{}", line(label, c));
    }
    if targets
        .iter()
        .flatten()
        .flatten()
        .any(|(_, v)| matches!(v, report::Verdict::NotApplicable(_)))
    {
        println!("{}", report::NOT_APPLICABLE_NOTE);
    }
    for (k, kind) in kinds.iter().enumerate() {
        if rounds > 1 {
            let each = |f: &dyn Fn(&Figures) -> f64| {
                all[k]
                    .iter()
                    .map(|x| thousands(f(x)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            println!(
                "{}: single {}; batches {}; drain {} items/s",
                kind.name(),
                each(&|f| f.single_ips),
                each(&|f| f.batch_ips),
                each(&|f| f.drain_ips)
            );
        }
    }
    let find = |want: Kind| kinds.iter().position(|k| *k == want);
    let ratio = |a: usize, b: usize, what: &str, f: &dyn Fn(&Figures) -> f64| {
        let (x, y) = (med(a, f), med(b, f));
        if y > 0.0 {
            format!("{what} {:.1}x", x / y)
        } else {
            format!("{what} -")
        }
    };
    let ratios = |a: usize, b: usize| {
        [
            ratio(a, b, "single pushes", &|f| f.single_ips),
            ratio(a, b, "batches", &|f| f.batch_ips),
            ratio(a, b, "drain", &|f| f.drain_ips),
        ]
        .join(", ")
    };
    if let (Some(fj), Some(p1)) = (find(Kind::Fjall), find(Kind::Postgres(1))) {
        println!("fjall / PostgreSQL with 1 relay: {}", ratios(fj, p1));
    }
    if let (Some(p1), Some(p2)) = (find(Kind::Postgres(1)), find(Kind::Postgres(2))) {
        println!("PostgreSQL, 2 relays / 1 relay: {}", ratios(p2, p1));
    }
    let groups = plot_groups(kinds, &medians);
    let footer = [
        format!(
            "{}; {rounds} round(s), medians; {queued} items queued for the drain",
            version
        ),
        format!(
            "{machine}; load average {:.2} .. {:.2}",
            loads.iter().copied().fold(f64::INFINITY, f64::min),
            loads.iter().copied().fold(0.0, f64::max)
        ),
    ];
    let plot = std::env::var_os("MBX_BENCH_PLOT")
        .map_or_else(|| relay_bin().with_file_name("e2e.svg"), PathBuf::from);
    let svg = report::svg("mbx-relay e2e bench against its targets", &groups, &footer);
    match std::fs::write(&plot, svg) {
        Ok(()) => println!("plot: {}", plot.display()),
        Err(e) => eprintln!("e2e: plot not written to {}: {e}", plot.display()),
    }
}

/// The plot's groups: each measurement with a target, one bar per store.
fn plot_groups(kinds: &[Kind], medians: &dyn Fn(usize) -> report::Medians) -> Vec<report::Group> {
    let m: Vec<report::Medians> = (0..kinds.len()).map(medians).collect();
    let group = |title: &str, unit, target, higher_is_better, get: fn(&report::Medians) -> f64| {
        report::Group {
            title: title.to_owned(),
            unit,
            target: Some(target),
            higher_is_better,
            bars: kinds
                .iter()
                .zip(&m)
                .map(|(k, m)| (k.name(), get(m)))
                .collect(),
        }
    };
    vec![
        group("single-item pushes", "items/s", 5_000.0, true, |m| {
            m.single_ips
        }),
        group("single-item push p99", "ms", 50.0, false, |m| {
            m.single_p99_ms
        }),
        group("batches of 100", "items/s", 40_000.0, true, |m| m.batch_ips),
        group("drain (pull + ack)", "items/s", 100_000.0, true, |m| {
            m.drain_ips
        }),
        group("RSS after restart, queued", "MiB", 64.0, false, |m| {
            m.rss_restarted_mib
        }),
        group("start-up, queued", "ms", 200.0, false, |m| {
            m.startup_queued_ms
        }),
    ]
}
