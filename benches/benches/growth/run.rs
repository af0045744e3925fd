//! One store's growth run: the relay, the generator's rounds, the figures read between them,
//! the end-of-run operations (backup, verify, restart, sweep, drain) and the text table.

use std::io::{BufRead, BufReader, Lines, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use relay_testkit::cluster::PgCluster;
use relay_testkit::host::RelayProc;
use relay_testkit::procfs;
use serde::Serialize;
use serde_json::Value;

use crate::Config;

/// Retention the relays run with: the sweep restarts the relay this much later by its clock.
const RETENTION_SECS: u64 = 86_400;
/// How much longer the items of the rounds after the first are kept when a sweep follows: the
/// sweep's fake clock then finds the first round due and nothing else however long it runs
/// (its calls each read the clock; a PostgreSQL sweep of 100,000 items ran for minutes and
/// took the later rounds' items too, leaving the drain nothing).
const LATER_ROUNDS_EXTRA_SECS: u64 = 30 * 86_400;
/// Longest wait for the sweep's log line after the faked-clock start.
const SWEEP_LIMIT: Duration = Duration::from_secs(1800);
/// A relay that just stopped pushing is left this long before its resting memory is read: one
/// heap-trim period and a second to spare.
const SETTLE: Duration = Duration::from_secs(mbx_relay::memory::TRIM_INTERVAL.as_secs() + 1);

/// One round of pushes, with the relay's figures over it.
#[derive(Serialize, Clone, Default)]
pub(crate) struct Round {
    pub(crate) round: u64,
    /// Items queued when the round ended.
    pub(crate) queued: u64,
    /// The store's bytes on disk when the round ended.
    pub(crate) store_bytes: u64,
    pub(crate) items_per_s: f64,
    pub(crate) p50_ms: f64,
    pub(crate) p99_ms: f64,
    /// Relay CPU (user + system, all threads) per item of the round, in µs.
    pub(crate) relay_cpu_us: f64,
    /// PostgreSQL's CPU per item (all its processes), in µs; 0 on fjall.
    pub(crate) pg_cpu_us: f64,
    /// Bytes written to disk (relay, and PostgreSQL's processes) per byte accepted.
    pub(crate) write_amp: f64,
    pub(crate) rss_mib: f64,
    /// The machine's 1-minute load average when the round ended.
    pub(crate) load: f64,
    pub(crate) errors: u64,
}

/// A drain of everything queued.
#[derive(Serialize, Clone, Default)]
pub(crate) struct Drain {
    pub(crate) items: u64,
    /// Items a sweep took before the drain (not errors).
    pub(crate) missing: u64,
    pub(crate) items_per_s: f64,
    pub(crate) p99_ms: f64,
    pub(crate) relay_cpu_us: f64,
    pub(crate) pg_cpu_us: f64,
    pub(crate) errors: u64,
}

/// The retention sweep of the first round's items.
#[derive(Serialize, Clone, Default)]
pub(crate) struct Sweep {
    pub(crate) expired: u64,
    pub(crate) notices: u64,
    pub(crate) seconds: f64,
    pub(crate) items_per_s: f64,
    /// The relay's log line when the sweep run failed part way (then `expired` is unknown).
    pub(crate) failed: Option<String>,
}

/// What the run measured once everything was queued.
#[derive(Serialize, Clone, Default)]
pub(crate) struct End {
    pub(crate) queued: u64,
    pub(crate) store_bytes: u64,
    /// Resident memory with everything queued, the relay at rest, and the peak of the run.
    pub(crate) rss_rest_mib: f64,
    pub(crate) rss_peak_mib: f64,
    pub(crate) backup_s: f64,
    pub(crate) backup_bytes: u64,
    pub(crate) verify_s: f64,
    /// From the kill -9 to `/health` answering 200 on the restarted relay.
    pub(crate) restart_ms: Option<f64>,
    pub(crate) rss_restarted_mib: Option<f64>,
    pub(crate) sweep: Option<Sweep>,
    pub(crate) drain: Drain,
}

/// Enrolment of the hosts.
#[derive(Serialize, Clone, Default)]
pub(crate) struct Enrol {
    pub(crate) hosts: u64,
    pub(crate) seconds: f64,
    pub(crate) per_s: f64,
    pub(crate) relay_cpu_us: f64,
}

/// One run on one store (the growth run, or the baseline's single round).
#[derive(Serialize, Clone, Default)]
pub(crate) struct Run {
    pub(crate) items: u64,
    pub(crate) hosts: u64,
    pub(crate) item_bytes: u64,
    pub(crate) enrol: Enrol,
    pub(crate) rounds: Vec<Round>,
    pub(crate) end: End,
}

/// The document of one store.
#[derive(Serialize, Clone, Default)]
pub(crate) struct Doc {
    pub(crate) store: String,
    pub(crate) commit: String,
    /// The relay binary measured (another build's when MBX_BENCH_RELAY_BIN names one).
    pub(crate) relay_bin: String,
    pub(crate) started_unix: u64,
    pub(crate) cores: usize,
    pub(crate) senders: u64,
    pub(crate) batch: u64,
    /// The empty-store baseline: a round's items over a round's share of the hosts.
    pub(crate) baseline: Option<Run>,
    pub(crate) growth: Run,
}

/// `git describe`-like name of the code measured (with `-dirty` when it has changes).
fn commit() -> String {
    let dir = env!("CARGO_MANIFEST_DIR");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let head = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

/// Measure one store: the baseline (unless skipped), then the growth run.
///
/// # Errors
/// A relay, generator or tool that fails; the message says which.
pub(crate) fn store(cfg: &Config, kind: &str, pg: Option<&PgCluster>) -> Result<Doc, String> {
    let mut doc = Doc {
        store: kind.to_string(),
        commit: commit(),
        relay_bin: relay_testkit::bins::relay().display().to_string(),
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        senders: cfg.senders,
        batch: cfg.batch,
        ..Doc::default()
    };
    if cfg.baseline && cfg.rounds > 1 {
        let (items, hosts) = (cfg.items / cfg.rounds, (cfg.hosts / cfg.rounds).max(1));
        eprintln!("growth: {kind} baseline: {items} items over {hosts} hosts on an empty store");
        doc.baseline = Some(grow(cfg, kind, pg, items, hosts, 1, false)?);
    }
    eprintln!(
        "growth: {kind}: {} items over {} hosts in {} rounds",
        cfg.items, cfg.hosts, cfg.rounds
    );
    doc.growth = grow(cfg, kind, pg, cfg.items, cfg.hosts, cfg.rounds, true)?;
    Ok(doc)
}

/// The relay under test and the PostgreSQL cluster behind it, if any.
struct Target<'a> {
    relay: RelayProc,
    pg: Option<&'a PgCluster>,
    pg_url: Option<String>,
    dir: PathBuf,
}

impl Target<'_> {
    fn pid(&self) -> Result<u32, String> {
        self.relay
            .pid()
            .ok_or_else(|| "the relay is not running".into())
    }

    /// Relay CPU, PostgreSQL CPU, bytes written by both, now.
    fn marks(&self) -> Result<Marks, String> {
        let pid = self.pid()?;
        let (pg_cpu, pg_written) = match self.pg.and_then(PgCluster::pid) {
            Some(pm) => (procfs::cluster_cpu(pm)?, procfs::cluster_write_bytes(pm)?),
            None => (Duration::ZERO, 0),
        };
        Ok(Marks {
            relay_cpu: procfs::cpu(pid, false)?,
            pg_cpu,
            written: procfs::write_bytes(pid)? + pg_written,
        })
    }

    /// The store's bytes on disk: the fjall directory, or the PostgreSQL database.
    fn store_bytes(&self) -> Result<u64, String> {
        match (self.pg, &self.pg_url) {
            (Some(c), Some(url)) => {
                let bindir = relay_testkit::cluster::find_bindir().ok_or("no PostgreSQL")?;
                let db = url.rsplit('/').next().unwrap_or_default();
                let out = relay_testkit::cluster::psql(
                    &bindir,
                    &c.url(),
                    &format!("SELECT pg_database_size('{db}')"),
                )?;
                out.trim()
                    .parse()
                    .map_err(|_| format!("pg_database_size: {out}"))
            }
            _ => Ok(procfs::disk_bytes(&self.relay.store)),
        }
    }

    fn rss(&self, field: &str) -> Result<f64, String> {
        procfs::mib(self.pid()?, field)
    }

    /// The store flags of relay-tool.
    fn tool_store_args(&self) -> Vec<String> {
        let mut v = vec![
            "--store-dir".to_string(),
            self.relay.store.display().to_string(),
        ];
        if let Some(url) = &self.pg_url {
            v.extend(["--store".to_string(), url.clone()]);
        }
        v
    }

    /// kill -9, start again (with `env`), and wait for `/health`; how long that took.
    fn restart(&mut self, env: Vec<(String, String)>) -> Result<Duration, String> {
        self.relay.kill9();
        self.relay.env = env;
        let t0 = Instant::now();
        self.relay.spawn(None);
        wait_health(self.relay.port)?;
        Ok(t0.elapsed())
    }
}

/// Figures read at one moment, to subtract.
struct Marks {
    relay_cpu: Duration,
    pg_cpu: Duration,
    written: u64,
}

fn us_per(d: Duration, n: u64) -> f64 {
    d.as_secs_f64() * 1e6 / n.max(1) as f64
}

/// `GET /health` answered 200 within a minute.
fn wait_health(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if health_ok(port) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("relay /health did not answer 200".into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

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

/// The load generator in growth mode, its stdout read line by line.
struct Generator {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Generator {
    fn start(url: &str, items: u64, hosts: u64, rounds: u64, cfg: &Config) -> Result<Self, String> {
        let bin = env!("CARGO_BIN_EXE_relay-bench");
        let round = items.div_ceil(rounds).max(1);
        let mut child = Command::new(bin)
            .args(["--url", url, "--json", "--drain", "--pause-before-drain"])
            .args(["--senders", &cfg.senders.to_string()])
            .args(["--batch", &cfg.batch.to_string()])
            .args([
                "--targets",
                &hosts.to_string(),
                "--items",
                &items.to_string(),
            ])
            .args(["--round-items", &round.to_string(), "--item-bytes", "1024"])
            .args(["--timeout", "300"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{bin}: {e}"))?;
        let stdin = child.stdin.take().ok_or("no relay-bench stdin")?;
        let out = child.stdout.take().ok_or("no relay-bench stdout")?;
        Ok(Generator {
            child,
            stdin,
            lines: BufReader::new(out).lines(),
        })
    }

    fn next(&mut self) -> Result<Value, String> {
        let line = self
            .lines
            .next()
            .ok_or("relay-bench ended early")?
            .map_err(|e| e.to_string())?;
        serde_json::from_str(&line).map_err(|e| format!("relay-bench line `{line}`: {e}"))
    }

    fn go(&mut self) -> Result<(), String> {
        self.stdin
            .write_all(b"go\n")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("relay-bench stdin: {e}"))
    }
}

impl Drop for Generator {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

fn f(v: &Value, path: &[&str]) -> f64 {
    path.iter().fold(v, |v, k| &v[*k]).as_f64().unwrap_or(0.0)
}

fn errors(v: &Value) -> u64 {
    v["errors"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(Value::as_u64).sum())
}

/// Start a relay on a fresh store (a new directory, or a new database on `pg`).
fn start<'a>(
    cfg: &Config,
    kind: &str,
    pg: Option<&'a PgCluster>,
    hosts: u64,
) -> Result<Target<'a>, String> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("growth-{kind}-"))
        .tempdir_in(&cfg.dir)
        .map_err(|e| format!("{}: {e}", cfg.dir.display()))?
        .keep();
    let big = "1000000000000";
    let enrolments = (hosts + cfg.senders + 1000).to_string();
    let retention = format!("{RETENTION_SECS}s");
    let pg_url = pg.map(PgCluster::fresh_db);
    let mut args = vec![
        "--max-queue-items",
        big,
        "--max-queue-bytes",
        big,
        "--max-sender-items",
        big,
        "--max-sender-bytes",
        big,
        "--max-account-items",
        big,
        "--max-account-bytes",
        big,
        "--max-enrolments",
        &enrolments,
        "--max-connections-per-address",
        "1024",
        "--retention",
        &retention,
        // Only the start-up sweeps: one at the end is what the bench measures.
        "--sweep-interval",
        "30d",
    ];
    if let Some(url) = &pg_url {
        args.extend(["--store", url]);
    }
    let relay = RelayProc::start(&dir, &args);
    wait_health(relay.port)?;
    Ok(Target {
        relay,
        pg,
        pg_url,
        dir,
    })
}

/// Push `items` over `hosts` in `rounds`, reading the figures after each; then (with `full`)
/// the end-of-run operations; then drain.
fn grow(
    cfg: &Config,
    kind: &str,
    pg: Option<&PgCluster>,
    items: u64,
    hosts: u64,
    rounds: u64,
    full: bool,
) -> Result<Run, String> {
    let mut t = start(cfg, kind, pg, hosts)?;
    let result = drive(cfg, &mut t, items, hosts, rounds, full);
    t.relay.kill9();
    // The store is gigabytes: it goes once measured (PostgreSQL's with the cluster).
    if cfg.keep {
        eprintln!("growth: kept {}", t.dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&t.dir);
    }
    result
}

fn drive(
    cfg: &Config,
    t: &mut Target,
    items: u64,
    hosts: u64,
    rounds: u64,
    full: bool,
) -> Result<Run, String> {
    let mut run = Run {
        items,
        hosts,
        ..Run::default()
    };
    let cpu0 = procfs::cpu(t.pid()?, false)?;
    let mut gen = Generator::start(&t.relay.url(), items, hosts, rounds, cfg)?;
    let enrolled = gen.next()?;
    let cpu = procfs::cpu(t.pid()?, false)?.saturating_sub(cpu0);
    run.item_bytes = enrolled["item_bytes"].as_u64().unwrap_or(0);
    let n = enrolled["enrolled"].as_u64().unwrap_or(0);
    run.enrol = Enrol {
        hosts: n,
        seconds: f(&enrolled, &["seconds"]),
        per_s: n as f64 / f(&enrolled, &["seconds"]).max(1e-9),
        relay_cpu_us: us_per(cpu, n),
    };
    eprintln!(
        "growth: enrolled {n} hosts in {:.1} s ({:.0}/s)",
        run.enrol.seconds, run.enrol.per_s
    );
    let mut marks = t.marks()?;
    let mut bytes_before = 0u64;
    // When the first round ended and the second began (the sweep's cut between them).
    let mut first_round_cut: Option<SystemTime> = None;
    let paused = loop {
        let line = gen.next()?;
        if line["paused"].as_bool() == Some(true) {
            break line;
        }
        let ended = SystemTime::now();
        let now = t.marks()?;
        let push = &line["push"];
        let pushed = push["items"].as_u64().unwrap_or(0);
        let queued_bytes = line["queued_bytes"].as_u64().unwrap_or(0);
        let r = Round {
            round: line["round"].as_u64().unwrap_or(0),
            queued: line["queued"].as_u64().unwrap_or(0),
            store_bytes: t.store_bytes()?,
            items_per_s: f(push, &["items_per_s"]),
            p50_ms: f(push, &["latency_ms", "p50"]),
            p99_ms: f(push, &["latency_ms", "p99"]),
            relay_cpu_us: us_per(now.relay_cpu.saturating_sub(marks.relay_cpu), pushed),
            pg_cpu_us: us_per(now.pg_cpu.saturating_sub(marks.pg_cpu), pushed),
            write_amp: now.written.saturating_sub(marks.written) as f64
                / queued_bytes.saturating_sub(bytes_before).max(1) as f64,
            rss_mib: t.rss("VmRSS")?,
            load: procfs::load_average(),
            errors: errors(push),
        };
        eprintln!("growth: {}", round_line(&r));
        run.rounds.push(r);
        bytes_before = queued_bytes;
        marks = t.marks()?;
        if first_round_cut.is_none() {
            // Halfway between the first round's last answer and the second round's start.
            if full && cfg.faketime.is_some() && !cfg.rounds_only {
                keep_later_rounds_longer(t)?;
                marks = t.marks()?;
            }
            let gap = ended.elapsed().unwrap_or_default();
            first_round_cut = Some(ended + gap / 2);
        }
        gen.go()?;
    };
    let e = &mut run.end;
    e.queued = paused["queued"].as_u64().unwrap_or(0);
    e.store_bytes = t.store_bytes()?;
    e.rss_peak_mib = t.rss("VmHWM")?;
    std::thread::sleep(SETTLE);
    e.rss_rest_mib = t.rss("VmRSS")?;
    if cfg.rounds_only {
        // The generator, left waiting to drain, is stopped when it is dropped.
        return Ok(run);
    }
    backup_and_verify(cfg, t, e)?;
    if full {
        let restart = t.restart(Vec::new())?;
        e.restart_ms = Some(restart.as_secs_f64() * 1000.0);
        std::thread::sleep(Duration::from_millis(500));
        e.rss_restarted_mib = Some(t.rss("VmRSS")?);
        eprintln!(
            "growth: restart after kill -9: {:.0} ms",
            restart.as_secs_f64() * 1000.0
        );
        if let (Some(lib), Some(cut)) = (&cfg.faketime, first_round_cut) {
            e.sweep = Some(sweep(t, lib, cut)?);
            t.restart(Vec::new())?;
        }
    }
    let marks = t.marks()?;
    gen.go()?;
    let last = gen.next()?;
    let now = t.marks()?;
    let d = &last["drain"];
    let drained = d["items"].as_u64().unwrap_or(0);
    e.drain = Drain {
        items: drained,
        missing: last["missing"].as_u64().unwrap_or(0),
        items_per_s: f(d, &["items_per_s"]),
        p99_ms: f(d, &["latency_ms", "p99"]),
        relay_cpu_us: us_per(now.relay_cpu.saturating_sub(marks.relay_cpu), drained),
        pg_cpu_us: us_per(now.pg_cpu.saturating_sub(marks.pg_cpu), drained),
        errors: errors(d),
    };
    let status = gen.child.wait().map_err(|e| e.to_string())?;
    let swept = e.sweep.as_ref().map_or(0, |s| s.expired);
    let sweep_failed = e.sweep.as_ref().is_some_and(|s| s.failed.is_some());
    // After a failed sweep the drain's missing items are those its committed calls expired.
    if e.drain.missing != swept && !sweep_failed {
        return Err(format!(
            "the drain missed {} items, the sweep expired {swept}",
            e.drain.missing
        ));
    }
    if !status.success() {
        return Err(format!("relay-bench failed ({status})"));
    }
    eprintln!(
        "growth: drained {drained} items at {:.0}/s, {:.1} µs relay CPU each",
        e.drain.items_per_s, e.drain.relay_cpu_us
    );
    Ok(run)
}

/// An online backup through the running relay, then its offline verify; the file goes after.
fn backup_and_verify(cfg: &Config, t: &Target, e: &mut End) -> Result<(), String> {
    let tool = relay_testkit::bins::path("relay-tool");
    let file = cfg.dir.join(format!(
        "growth-{}.mbxbak",
        t.dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("backup")
    ));
    let t0 = Instant::now();
    let out = Command::new(&tool)
        .arg("backup")
        .args(t.tool_store_args())
        .arg(&file)
        .args(["--json", "--force"])
        .output()
        .map_err(|e| format!("relay-tool: {e}"))?;
    e.backup_s = t0.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "relay-tool backup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    e.backup_bytes = std::fs::metadata(&file).map_or(0, |m| m.len());
    let t0 = Instant::now();
    let out = Command::new(&tool)
        .arg("verify")
        .arg(&file)
        .arg("--json")
        .output()
        .map_err(|e| format!("relay-tool: {e}"))?;
    e.verify_s = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        return Err(format!(
            "relay-tool verify failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    eprintln!(
        "growth: backup {:.1} s ({:.0} MB), verify {:.1} s",
        e.backup_s,
        e.backup_bytes as f64 / 1e6,
        e.verify_s
    );
    Ok(())
}

/// Restart the relay (between the first and second rounds) with the later rounds' longer
/// retention ([`LATER_ROUNDS_EXTRA_SECS`]).
fn keep_later_rounds_longer(t: &mut Target) -> Result<(), String> {
    let later = format!("{}s", RETENTION_SECS + LATER_ROUNDS_EXTRA_SECS);
    let args = &mut t.relay.args;
    let at = args
        .iter()
        .position(|a| a == "--retention")
        .ok_or("the relay runs without --retention")?;
    args[at + 1] = later;
    t.restart(Vec::new()).map(|_| ())
}

/// Restart the relay with its clock a retention period past `cut` (libfaketime): its start-up
/// sweep expires what was accepted before `cut` (the first round). Timed from `/health` to the
/// sweep's log line.
fn sweep(t: &mut Target, lib: &Path, cut: SystemTime) -> Result<Sweep, String> {
    let behind = cut.elapsed().unwrap_or_default().as_secs();
    let offset = RETENTION_SECS.saturating_sub(behind);
    let log_len = t.relay.log_text().len();
    let env = vec![
        ("LD_PRELOAD".to_string(), lib.display().to_string()),
        ("FAKETIME".to_string(), format!("+{offset}")),
        ("FAKETIME_DONT_FAKE_MONOTONIC".to_string(), "1".to_string()),
    ];
    eprintln!("growth: sweep: the relay's clock {offset} s ahead");
    t.restart(env)?;
    let t0 = Instant::now();
    loop {
        let log = t.relay.log_text();
        if let Some(line) = log
            .get(log_len..)
            .and_then(|s| s.lines().find(|l| l.contains("retention sweep")))
        {
            // "retention sweep failed": the run stopped at a failed call (the calls before it
            // committed their expiries, how many is not logged); the rest waits for the next
            // run, which the bench does not wait for.
            if line.contains("retention sweep failed") {
                eprintln!(
                    "growth: sweep failed after {:.1} s: {line}",
                    t0.elapsed().as_secs_f64()
                );
                return Ok(Sweep {
                    seconds: t0.elapsed().as_secs_f64(),
                    failed: Some(line.to_string()),
                    ..Sweep::default()
                });
            }
            let seconds = t0.elapsed().as_secs_f64();
            let field = |k: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(k)?.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            let s = Sweep {
                expired: field("expired"),
                notices: field("notices"),
                seconds,
                items_per_s: field("expired") as f64 / seconds.max(1e-9),
                failed: None,
            };
            eprintln!(
                "growth: sweep expired {} items ({} notices) in {:.1} s",
                s.expired, s.notices, s.seconds
            );
            return Ok(s);
        }
        if t0.elapsed() > SWEEP_LIMIT {
            return Err("no retention sweep line in the relay's log".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn round_line(r: &Round) -> String {
    format!(
        "| {:>3} | {:>10} | {:>7.2} | {:>7.0} | {:>7.1} | {:>7.1} | {:>6.1} | {:>6.1} | {:>5.1} | {:>6.1} | {:>4.1} |",
        r.round,
        r.queued,
        r.store_bytes as f64 / 1e9,
        r.items_per_s,
        r.p50_ms,
        r.p99_ms,
        r.relay_cpu_us,
        r.pg_cpu_us,
        r.write_amp,
        r.rss_mib,
        r.load
    )
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

/// The table of one store's run, with the targets of issue 40 beside the figures.
pub(crate) fn table(d: &Doc) -> String {
    let g = &d.growth;
    let mut s = format!(
        "\nmbx-relay growth bench, {} store, commit {}, {} cores shared with the generator; \
         {} senders, batches of {} x {} B items over {} hosts\n\
         | rnd |     queued | store GB | items/s | p50 ms | p99 ms | CPU µs | PG µs | WA | RSS MiB | load |\n\
         |----:|-----------:|---------:|--------:|-------:|-------:|-------:|------:|---:|--------:|-----:|\n",
        d.store, d.commit, d.cores, d.senders, d.batch, g.item_bytes, g.hosts
    );
    if let Some(b) = &d.baseline {
        for r in &b.rounds {
            s.push_str(&round_line(r).replacen("|   1 |", "| base |", 1));
            s.push('\n');
        }
    }
    for r in &g.rounds {
        s.push_str(&round_line(r));
        s.push('\n');
    }
    let e = &g.end;
    let first = g.rounds.first().cloned().unwrap_or_default();
    let last = g.rounds.last().cloned().unwrap_or_default();
    let max_rss = g
        .rounds
        .iter()
        .map(|r| r.rss_mib)
        .fold(e.rss_peak_mib, f64::max);
    s.push_str(&format!(
        "enrolment: {} hosts in {:.1} s ({:.0}/s, {:.0} µs relay CPU each)\n",
        g.enrol.hosts, g.enrol.seconds, g.enrol.per_s, g.enrol.relay_cpu_us
    ));
    s.push_str(&format!(
        "largest vs first round: relay CPU per item {} (target <= 1.2x), p99 {} (target <= 2x); \
         RSS peak {:.0} MiB, at rest {:.0} MiB (target <= 256)\n",
        ratio(last.relay_cpu_us, first.relay_cpu_us),
        ratio(last.p99_ms, first.p99_ms),
        max_rss,
        e.rss_rest_mib
    ));
    if let Some(ms) = e.restart_ms {
        s.push_str(&format!(
            "restart after kill -9 with {} queued: {ms:.0} ms (target < 1000)\n",
            e.queued
        ));
    }
    let per_gb = |secs: f64, bytes: u64| secs / (bytes as f64 / 1e9).max(1e-9);
    s.push_str(&format!(
        "online backup: {:.1} s for {:.2} GB ({:.1} s/GB), verify {:.1} s ({:.1} s/GB)",
        e.backup_s,
        e.backup_bytes as f64 / 1e9,
        per_gb(e.backup_s, e.backup_bytes),
        e.verify_s,
        per_gb(e.verify_s, e.backup_bytes)
    ));
    if let Some(b) = &d.baseline {
        s.push_str(&format!(
            "; baseline {:.1} s/GB and {:.1} s/GB",
            per_gb(b.end.backup_s, b.end.backup_bytes),
            per_gb(b.end.verify_s, b.end.backup_bytes)
        ));
    }
    s.push('\n');
    match &e.sweep {
        Some(sw) if sw.failed.is_some() => s.push_str(&format!(
            "retention sweep: FAILED after {:.1} s ({} items missing from the drain were expired by its committed calls)\n",
            sw.seconds, e.drain.missing
        )),
        Some(sw) => s.push_str(&format!(
            "retention sweep: {} expired ({} notices) in {:.1} s, {:.0} items/s\n",
            sw.expired, sw.notices, sw.seconds, sw.items_per_s
        )),
        None => {}
    }
    s.push_str(&format!(
        "drain of {} items: {:.0} items/s, p99 {:.1} ms, relay CPU {:.1} µs/item, PostgreSQL {:.1}",
        e.drain.items, e.drain.items_per_s, e.drain.p99_ms, e.drain.relay_cpu_us, e.drain.pg_cpu_us
    ));
    if let Some(b) = &d.baseline {
        s.push_str(&format!(
            "; empty-store baseline ({} items): {:.0} items/s, {:.1} µs/item (CPU {})",
            b.end.drain.items,
            b.end.drain.items_per_s,
            b.end.drain.relay_cpu_us,
            ratio(e.drain.relay_cpu_us, b.end.drain.relay_cpu_us)
        ));
    }
    s.push('\n');
    s
}
