//! Shared end-to-end harness: start the real `mbx-relay serve` binary, talk HTTP/1.1 to it over a
//! raw socket (so tests can read every status and body, and send hostile bytes), and act as agentmbx
//! hosts (signed hops, enrolment, push, pull, ack) with builders for valid wire items.
//!
//! Every test file uses it with `mod common;`. Nothing here reads the reference docs: the protocol
//! rules are written out in the tests themselves, and only `tests/fixtures/` is read.
//!
//! Main pieces:
//! - [`Relay`]: a running relay process on `127.0.0.1:0` with its own temporary store; killed on drop.
//! - [`Response`], [`send`], [`send_raw`]: a tiny HTTP/1.1 client (one connection per request;
//!   [`read_one_response`] for kept-alive connections, [`parse_response`] for raw bytes).
//! - [`Host`]: a test host identity (Ed25519 key and name) that signs hops ([`Hop`] bends any part
//!   of one) and calls every endpoint.
//! - builders: [`ulid`], [`sealed_envelope`], [`envelope_item`], [`envelope_item_sized`],
//!   [`receipt_item`], [`receipt_wire`], [`item`], [`rotation`], [`pad_json_to`].
//! - checks: [`verify_accept`] (accept statements, field by field, signature included),
//!   [`assert_rejected`], [`assert_keys`], [`is_uuid_v4`], [`is_iso_ms`].
//!
//! Set `MBX_RELAY_TEST_BIN` to run the suite against another relay binary with the same command
//! line (an independent implementation, or an older build).
//!
//! A relay runs on fjall by default, or on PostgreSQL ([`Backend`], [`backend_tests!`]).
#![allow(dead_code)]

mod backend;
#[allow(unused_imports)]
pub(crate) use backend::backend_tests;
#[allow(unused_imports)]
pub(crate) use backend::{fresh_database, postgres_available, psql, Backend};
pub(crate) use relay_testkit::powercut;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::RngCore;
use relay_wire::canonical::canonical_json;
use relay_wire::keys::{b64, parse_pubkey, unb64, verify_canonical, SigningKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Path of the binary built with this package.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_mbx-relay");

/// The binary under test: `MBX_RELAY_TEST_BIN` if set, else [`BIN`].
pub(crate) fn relay_bin() -> String {
    std::env::var("MBX_RELAY_TEST_BIN").unwrap_or_else(|_| BIN.to_string())
}

/// How long a relay may take to print its `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Socket read/write timeout for one HTTP exchange.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response the client accepts (a full pull page is at most ~8 MiB of base64 plus JSON).
const MAX_RESPONSE: usize = 64 << 20;

/// Flags that lift the per-minute rate limits, for tests that make many calls on one relay.
pub(crate) const GENEROUS: &[&str] = &[
    "--pushes-per-minute",
    "1000000",
    "--enrol-per-minute",
    "1000000",
    "--enrol-per-minute-v4-24",
    "1000000",
    "--enrol-per-minute-v6-48",
    "1000000",
];

/// Run `mbx-relay ARGS` with the environment's `MBX_RELAY_*` variables removed and `env` set;
/// the process must end by itself within 20 s (a refused start, or `serve --check`): one that
/// keeps running is killed and fails the test.
pub(crate) fn relay_exits(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(relay_bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("MBX_RELAY_") || k == "NOTIFY_SOCKET" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd.spawn().expect("spawn mbx-relay");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mbx-relay {args:?} kept running instead of exiting");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// The `relay-tool` binary, built next to `mbx-relay` by `cargo test --workspace`.
pub(crate) fn relay_tool_bin() -> PathBuf {
    Path::new(BIN).with_file_name("relay-tool")
}

/// The `powercut` binary (a FUSE filesystem whose power a test can cut), built next to
/// `mbx-relay` by `cargo test --workspace`.
pub(crate) fn powercut_bin() -> PathBuf {
    Path::new(BIN).with_file_name("powercut")
}

/// A powercut mount (see [`powercut::Powercut`]) with these extra arguments.
pub(crate) fn powercut_mount(args: &[&str]) -> powercut::Powercut {
    powercut::Powercut::mount(&powercut_bin(), args)
}

/// Run `relay-tool` with `args` and the variables `env` (no terminal, so no progress display;
/// the store, key and failpoint variables of the test's own environment are not passed on).
pub(crate) fn relay_tool_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    relay_tool_command(args, env)
        .output()
        .expect("run relay-tool")
}

/// [`relay_tool`] with the file-mode creation mask `umask` in the child only.
pub(crate) fn relay_tool_umask(args: &[&str], umask: u32) -> std::process::Output {
    with_umask(&mut relay_tool_command(args, &[]), umask)
        .output()
        .expect("run relay-tool")
}

/// Sets `umask` in the child `cmd` starts, between fork and exec. The test process's own mask
/// is process-wide and shared by every test thread of the binary, so it is never changed.
pub(crate) fn with_umask(cmd: &mut Command, umask: u32) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: runs in the forked child before exec; umask is async-signal-safe and cannot fail.
    unsafe {
        cmd.pre_exec(move || {
            libc::umask(umask as libc::mode_t);
            Ok(())
        })
    }
}

/// The `relay-tool` command of [`relay_tool_env`], not yet run.
pub(crate) fn relay_tool_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let bin = relay_tool_bin();
    assert!(
        bin.exists(),
        "{} missing: run `cargo test --workspace` (or `cargo build -p relay-tool`)",
        bin.display()
    );
    let mut cmd = Command::new(&bin);
    cmd.args(args)
        .env_remove("MBX_RELAY_STORE_DIR")
        .env_remove("MBX_RELAY_KEY")
        .env_remove("MBX_FAILPOINT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// [`relay_tool_env`] without extra variables.
pub(crate) fn relay_tool(args: &[&str]) -> std::process::Output {
    relay_tool_env(args, &[])
}

/// Run the load generator `relay-bench` (relay-bench's binary: `cargo test --workspace` builds
/// it for that package's own tests) with `args`.
pub(crate) fn relay_bench(args: &[&str]) -> std::process::Output {
    Command::new(relay_testkit::bins::path("relay-bench"))
        .args(args)
        .output()
        .expect("run relay-bench")
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// ISO 8601 UTC with milliseconds, as JavaScript `toISOString()` prints it.
pub(crate) fn iso(ms: i64) -> String {
    relay_wire::time::iso_ms(ms as u64)
}

/// Lowercase hex SHA-256 of bytes (the protocol's `wire_hash`).
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `n` random bytes.
pub(crate) fn random_bytes(n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut v);
    v
}

/// A relay whose store fsyncs fail while the returned trigger file exists (the failpoints
/// build's persist-failure watcher checks it every 20 ms), with the work dir holding the trigger.
#[cfg(feature = "failpoints")]
pub(crate) fn relay_with_fsync_trigger() -> (Relay, PathBuf, tempfile::TempDir) {
    let work = tempfile::tempdir().unwrap();
    let trigger = work.path().join("fsync-fails");
    let relay = Relay::launch(RelayOpts::args(GENEROUS).env(
        mbx_relay::failpoint::PERSIST_FAIL_FILE_ENV,
        trigger.to_str().unwrap(),
    ))
    .expect("relay starts");
    (relay, trigger, work)
}

/// Poll `f` every 50 ms until it returns `Some`, for at most `limit` (`None` then): for what a
/// relay does in the background (sweeps, heartbeats, leases), never for a fixed sleep.
pub(crate) fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A line `<name>: <n> kB` of `/proc/<pid>/status` (`VmRSS`, `VmHWM`), in KiB.
pub(crate) fn proc_status_kib(pid: u32, name: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    s.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/{pid}/status"))
}

/// Connects from a chosen loopback source address (std cannot bind before connecting;
/// loopback answers on all of 127/8, so a socket bound to 127.0.0.N is another client address).
pub(crate) struct Dialer {
    rt: tokio::runtime::Runtime,
}

impl Dialer {
    pub(crate) fn new() -> Dialer {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .expect("runtime");
        Dialer { rt }
    }

    /// A blocking connection from `from` to `to`.
    pub(crate) fn connect(
        &self,
        from: std::net::Ipv4Addr,
        to: SocketAddr,
    ) -> std::io::Result<TcpStream> {
        self.rt.block_on(async {
            let s = tokio::net::TcpSocket::new_v4()?;
            s.bind(SocketAddr::new(from.into(), 0))?;
            let stream = s.connect(to).await?.into_std()?;
            stream.set_nonblocking(false)?;
            stream.set_nodelay(true)?;
            Ok(stream)
        })
    }
}

/// A fresh random host public key in protocol form (never enrolled anywhere).
pub(crate) fn random_pubkey() -> String {
    SigningKey::generate().public_b64()
}

// ---------------------------------------------------------------------------------------------
// Relay process
// ---------------------------------------------------------------------------------------------

/// A running `mbx-relay serve` child process. Killed (SIGKILL) on drop; when the test is
/// panicking, the tail of its stderr is printed to help debugging.
pub(crate) struct Relay {
    child: Option<Child>,
    addr: SocketAddr,
    /// The `--metrics-listen` address, when the relay printed `metrics listening on`.
    metrics_addr: Option<SocketAddr>,
    /// The `listening on ...` line of the last start.
    listening_line: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    store: PathBuf,
    /// The PostgreSQL database (`--store`), when the relay runs on [`Backend::Postgres`].
    db: Option<String>,
    stderr_path: PathBuf,
    bare: bool,
    /// The child's umask ([`RelayOpts::umask`]), again at every restart.
    umask: Option<u32>,
    /// Owns the temporary directory holding the store (unless the caller gave one) and the log.
    _work: tempfile::TempDir,
}

/// Options for [`Relay::launch`]: extra arguments, environment and an optional store directory.
#[derive(Default, Clone)]
pub(crate) struct RelayOpts {
    /// Arguments appended after `serve --listen 127.0.0.1:0 --store-dir <dir>`.
    pub args: Vec<String>,
    /// Extra environment variables for the child.
    pub env: Vec<(String, String)>,
    /// Store directory to use instead of a fresh temporary one.
    pub store: Option<PathBuf>,
    /// Pass neither `--listen` nor `--store-dir` (the test sets them another way, e.g. through
    /// `MBX_RELAY_LISTEN` / `MBX_RELAY_STORE_DIR`).
    pub bare: bool,
    /// The store backend (default fjall).
    pub backend: Backend,
    /// The PostgreSQL database to use instead of a fresh one ([`Backend::Postgres`] only).
    pub db: Option<String>,
    /// The child's file-mode creation mask (default: inherited).
    pub umask: Option<u32>,
}

impl RelayOpts {
    /// Options with these extra arguments.
    pub(crate) fn args(args: &[&str]) -> Self {
        RelayOpts {
            args: args.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }
    /// Adds an environment variable.
    pub(crate) fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.to_string(), v.to_string()));
        self
    }
    /// Uses this store directory.
    pub(crate) fn store(mut self, dir: &Path) -> Self {
        self.store = Some(dir.to_path_buf());
        self
    }
    /// Passes neither `--listen` nor `--store-dir`; see [`RelayOpts::bare`].
    pub(crate) fn bare(mut self) -> Self {
        self.bare = true;
        self
    }
    /// Starts the relay with this umask (set in the child only, see [`with_umask`]).
    pub(crate) fn umask(mut self, umask: u32) -> Self {
        self.umask = Some(umask);
        self
    }
    /// Runs the relay on this backend (a fresh database for PostgreSQL unless one is given).
    pub(crate) fn on(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }
    /// Runs the relay on this PostgreSQL database (e.g. a second process on one database).
    pub(crate) fn db(mut self, url: &str) -> Self {
        self.backend = Backend::Postgres;
        self.db = Some(url.to_string());
        self
    }
    /// Uses the store of `relay` (its directory, backend and database), e.g. to start another
    /// process on it after `relay` was stopped, or a second process on one database.
    pub(crate) fn same_store(mut self, relay: &Relay) -> Self {
        self.store = Some(relay.store.clone());
        self.backend = relay.backend();
        self.db = relay.db.clone();
        self
    }
}

impl Relay {
    /// Starts a relay on a free loopback port with a fresh temporary store and these extra
    /// arguments (e.g. `&["--max-queue-items", "3"]`). Panics if it does not come up.
    pub(crate) fn start(args: &[&str]) -> Relay {
        Relay::launch(RelayOpts::args(args)).expect("relay starts")
    }

    /// [`Relay::start`] with [`GENEROUS`] rate limits plus these arguments.
    pub(crate) fn start_generous(args: &[&str]) -> Relay {
        let mut all: Vec<&str> = GENEROUS.to_vec();
        all.extend_from_slice(args);
        Relay::start(&all)
    }

    /// Starts a relay with full options; `Err` carries the exit status and stderr when the
    /// process exits or stays silent instead of printing its `listening on` line.
    pub(crate) fn launch(opts: RelayOpts) -> Result<Relay, String> {
        let work = tempfile::tempdir().map_err(|e| e.to_string())?;
        let store = opts
            .store
            .clone()
            .unwrap_or_else(|| work.path().join("store"));
        let stderr_path = work.path().join("relay.stderr");
        let db = match opts.backend {
            Backend::Fjall => None,
            Backend::Postgres => Some(opts.db.clone().unwrap_or_else(fresh_database)),
        };
        let mut relay = Relay {
            child: None,
            addr: "127.0.0.1:0".parse().expect("addr"),
            metrics_addr: None,
            listening_line: String::new(),
            args: opts.args,
            env: opts.env,
            store,
            db,
            stderr_path,
            bare: opts.bare,
            umask: opts.umask,
            _work: work,
        };
        relay.spawn()?;
        Ok(relay)
    }

    /// The `serve` command line of this relay (store, arguments, environment, umask).
    fn command(&self) -> Result<Command, String> {
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.stderr_path)
            .map_err(|e| e.to_string())?;
        let bin = relay_bin();
        let mut cmd = Command::new(&bin);
        cmd.arg("serve");
        if !self.bare {
            cmd.arg("--listen")
                .arg("127.0.0.1:0")
                .arg("--store-dir")
                .arg(&self.store);
            if let Some(db) = &self.db {
                cmd.arg("--store").arg(db);
            }
        }
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(m) = self.umask {
            with_umask(&mut cmd, m);
        }
        Ok(cmd)
    }

    /// Starts the relay on its store and SIGKILLs it `after` later, listening or not: a crash
    /// at a chosen moment of its start-up (e.g. inside a schema migration). Returns whether it
    /// had printed `listening on` by then.
    pub(crate) fn start_killed_after(&mut self, after: Duration) -> bool {
        assert!(self.child.is_none(), "relay still running");
        let mut child = self
            .command()
            .and_then(|mut c| c.spawn().map_err(|e| e.to_string()))
            .expect("spawn the relay");
        let stdout = child.stdout.take().expect("piped stdout");
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .any(|l| l.starts_with("listening on "))
        });
        std::thread::sleep(after);
        let _ = child.kill();
        let _ = child.wait();
        reader.join().unwrap_or(false)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let bin = relay_bin();
        let mut child = self
            .command()?
            .spawn()
            .map_err(|e| format!("spawn {bin}: {e}"))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            // Forward the listening line, then keep draining so the child never blocks on stdout.
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(a) = line.trim().strip_prefix("metrics listening on ") {
                        self.metrics_addr = a.trim().parse().ok();
                    }
                    if let Some(a) = line.trim().strip_prefix("listening on ") {
                        // The address is the first word (a TLS relay adds its certificate).
                        self.addr = a
                            .split_whitespace()
                            .next()
                            .unwrap_or("")
                            .parse()
                            .map_err(|e| format!("bad listening line {line:?}: {e}"))?;
                        self.listening_line = line.trim().to_owned();
                        self.child = Some(child);
                        return Ok(());
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // stdout closed: the process is exiting.
                    let status = child.wait().map_err(|e| e.to_string())?;
                    return Err(format!(
                        "relay exited ({status}) before listening; stderr:\n{}",
                        self.stderr_log()
                    ));
                }
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "relay exited ({status}) before listening; stderr:\n{}",
                    self.stderr_log()
                ));
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "relay did not print `listening on` within {START_TIMEOUT:?}; stderr:\n{}",
                    self.stderr_log()
                ));
            }
        }
    }

    /// The address the relay listens on.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The `listening on ...` line the relay printed at its last start.
    pub(crate) fn listening_line(&self) -> &str {
        &self.listening_line
    }

    /// The private metrics address (started with `--metrics-listen 127.0.0.1:0`).
    pub(crate) fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
            .expect("relay started with --metrics-listen")
    }

    /// `GET /metrics` on the private metrics listener.
    pub(crate) fn metrics(&self) -> Response {
        send(self.metrics_addr(), "GET", "/metrics", &[], b"")
    }

    /// The store directory (on PostgreSQL: where relay.key and the admin socket are).
    pub(crate) fn store_dir(&self) -> &Path {
        &self.store
    }

    /// The backend the relay's store is on.
    pub(crate) fn backend(&self) -> Backend {
        if self.db.is_some() {
            Backend::Postgres
        } else {
            Backend::Fjall
        }
    }

    /// The PostgreSQL database URL, on [`Backend::Postgres`].
    pub(crate) fn db_url(&self) -> Option<&str> {
        self.db.as_deref()
    }

    /// Everything the relay wrote to stderr so far (all runs of this `Relay`).
    pub(crate) fn stderr_log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The child's process id, while running.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Kills the process with SIGKILL (no chance to clean up) and waits for it.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends SIGTERM and waits up to `timeout` for a clean exit; returns the exit code
    /// (`None` if killed by a signal). Falls back to SIGKILL after the timeout and panics.
    pub(crate) fn terminate(&mut self, timeout: Duration) -> Option<i32> {
        let mut c = self.child.take()?;
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return st.code();
            }
            if Instant::now() >= deadline {
                let _ = c.kill();
                let _ = c.wait();
                panic!("relay did not exit within {timeout:?} after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the relay (SIGKILL) and starts it again on the same store with the same arguments
    /// and environment. The port may change; [`Relay::addr`] follows it.
    pub(crate) fn restart(&mut self) {
        self.kill9();
        self.spawn().expect("relay restarts");
    }

    /// A power cut under a running relay: SIGKILL, then `pc` forgets everything not durable,
    /// then the relay starts again on the same store (which must be on `pc`). Returns the bytes
    /// written but not synced when the power went (see [`powercut::Powercut::cut`]).
    pub(crate) fn power_cut(&mut self, pc: &mut powercut::Powercut) -> u64 {
        self.kill9();
        let unsynced = pc.cut();
        self.spawn().expect("relay restarts after a power cut");
        unsynced
    }

    /// [`Relay::power_cut`] in the other order: the power goes while the relay runs (its
    /// fsyncs in flight fail, its open handles write nothing more), then SIGKILL and a restart.
    /// A kill first lets every fsync already sent complete (the kernel waits for the answer).
    pub(crate) fn power_cut_while_running(&mut self, pc: &mut powercut::Powercut) -> u64 {
        let unsynced = pc.cut();
        self.kill9();
        self.spawn().expect("relay restarts after a power cut");
        unsynced
    }

    /// Starts the relay again after [`Relay::kill9`] or [`Relay::terminate`].
    pub(crate) fn start_again(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "relay still running");
        self.spawn()
    }

    /// One HTTP request (see [`send`]).
    pub(crate) fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        send(self.addr, method, path, headers, body)
    }

    /// Unauthenticated GET.
    pub(crate) fn get(&self, path: &str) -> Response {
        self.send("GET", path, &[], b"")
    }

    /// Unauthenticated POST of raw bytes as JSON.
    pub(crate) fn post(&self, path: &str, body: &[u8]) -> Response {
        self.send("POST", path, &[], body)
    }

    /// Unauthenticated POST of a JSON value.
    pub(crate) fn post_json(&self, path: &str, body: &Value) -> Response {
        self.post(path, body.to_string().as_bytes())
    }

    /// `GET /v2/relay/info` (asserted 200), parsed.
    pub(crate) fn info(&self) -> Value {
        let r = self.get("/v2/relay/info");
        assert_eq!(r.status, 200, "info: {}", r.text());
        r.json()
    }

    /// The relay's public key, from info.
    pub(crate) fn pubkey(&self) -> String {
        self.info()["relay_pubkey"]
            .as_str()
            .expect("relay_pubkey")
            .to_string()
    }

    /// The current epoch, from info.
    pub(crate) fn epoch(&self) -> String {
        self.info()["epoch"].as_str().expect("epoch").to_string()
    }

    /// Asserts the relay still answers `GET /v2/relay/info` with 200 (used after hostile input).
    pub(crate) fn assert_alive(&self) {
        let r = self.get("/v2/relay/info");
        assert_eq!(r.status, 200, "relay stopped serving: {}", r.text());
        assert!(r.json()["relay_pubkey"].is_string());
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.kill9();
        if std::thread::panicking() {
            let log = self.stderr_log();
            let tail: String = {
                let lines: Vec<&str> = log.lines().collect();
                let from = lines.len().saturating_sub(40);
                lines[from..].join("\n")
            };
            // The whole log kept for a failure that needs more than its tail.
            let kept = std::env::temp_dir().join(format!(
                "relay-{}-{}.stderr",
                std::process::id(),
                self.addr().port()
            ));
            let kept = std::fs::write(&kept, &log).map(|()| kept.display().to_string());
            eprintln!("---- relay stderr (last 40 lines; all of it: {kept:?}) ----\n{tail}\n----");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP client
// ---------------------------------------------------------------------------------------------

/// One HTTP response: status, headers (names lowercased) and the de-chunked body.
#[derive(Debug, Clone)]
pub(crate) struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The body as (lossy) text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON; panics with the body text if it is not JSON.
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {} body is not JSON ({e}): {}",
                self.status,
                self.text()
            )
        })
    }

    /// The first value of a header (name case-insensitive).
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Asserts the status and that the body is exactly the JSON object `{"error": msg}`.
    pub(crate) fn assert_error(&self, status: u16, msg: &str) {
        assert_eq!(self.status, status, "body: {}", self.text());
        assert_eq!(self.json(), json!({ "error": msg }), "status {status}");
    }

    /// Asserts the status and that the body is a JSON object with a non-empty `error` string;
    /// returns the parsed body.
    pub(crate) fn assert_some_error(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "body: {}", self.text());
        let v = self.json();
        let e = v["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error string: {v}"));
        assert!(!e.is_empty(), "empty error string");
        v
    }

    /// Asserts 200 and returns the parsed body.
    pub(crate) fn ok(&self) -> Value {
        assert_eq!(self.status, 200, "expected 200, body: {}", self.text());
        self.json()
    }
}

/// Sends one HTTP/1.1 request on a fresh connection (`Connection: close`) and reads the whole
/// answer. Adds `Host`, `Content-Length` (for a body or a POST) and, for a non-empty body,
/// `Content-Type: application/json` unless the caller gives its own. Panics on I/O errors.
pub(crate) fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    try_send(addr, method, path, headers, body).unwrap_or_else(|e| panic!("{e}"))
}

/// [`send`], with I/O and parse failures as `Err` instead of a panic (for requests to a relay
/// that may be killed meanwhile).
pub(crate) fn try_send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Response, String> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !body.is_empty() && !has("content-type") {
        head.push_str("Content-Type: application/json\r\n");
    }
    if (!body.is_empty() || method != "GET") && !has("content-length") {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body);
    let raw = send_raw(addr, &bytes).map_err(|e| format!("{method} {path}: {e}"))?;
    parse_response(&raw).map_err(|e| {
        format!(
            "{method} {path}: unparseable response ({e}): {:?}",
            String::from_utf8_lossy(&raw[..raw.len().min(500)])
        )
    })
}

/// Writes exactly `bytes` on a new connection, half-closes nothing, and reads until the server
/// closes (or the read timeout). Returns what came back, possibly empty.
pub(crate) fn send_raw(addr: SocketAddr, bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(IO_TIMEOUT))?;
    s.set_write_timeout(Some(IO_TIMEOUT))?;
    s.set_nodelay(true)?;
    let write_result = s.write_all(bytes);
    let out = read_until_close(&mut s);
    match (write_result, out) {
        (_, Ok(v)) if !v.is_empty() => Ok(v),
        (Err(e), _) => Err(e),
        (Ok(()), r) => r,
    }
}

/// Reads until EOF, a connection reset after some data, or the read timeout.
pub(crate) fn read_until_close(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(out),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                if out.len() > MAX_RESPONSE {
                    return Err(std::io::Error::other("response too large"));
                }
                // A complete response is enough even if the server keeps the socket open.
                if response_complete(&out) {
                    return Ok(out);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                if out.is_empty() {
                    return Err(e);
                }
                return Ok(out);
            }
        }
    }
}

/// Reads exactly one response from a kept-alive connection (its length must be known from
/// Content-Length or chunked framing) and parses it.
pub(crate) fn read_one_response(s: &mut TcpStream) -> Result<Response, String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !response_complete(&out) {
        match s.read(&mut buf) {
            Ok(0) => return Err(format!("connection closed after {} bytes", out.len())),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.to_string()),
        }
        if out.len() > MAX_RESPONSE {
            return Err("response too large".into());
        }
    }
    parse_response(&out)
}

fn header_end(raw: &[u8]) -> Option<usize> {
    raw.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// True once `raw` holds a full response whose length is known (Content-Length or chunked end).
fn response_complete(raw: &[u8]) -> bool {
    let Some(end) = header_end(raw) else {
        return false;
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
    let body = &raw[end..];
    if head.contains("transfer-encoding: chunked") {
        return dechunk(body).is_ok();
    }
    for line in head.lines() {
        if let Some(v) = line.strip_prefix("content-length:") {
            if let Ok(n) = v.trim().parse::<usize>() {
                return body.len() >= n;
            }
        }
    }
    false
}

/// Parses an HTTP/1.1 response (status line, headers, body by Content-Length or chunked).
pub(crate) fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = header_end(raw).ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "non-UTF-8 head")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty")?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(format!("bad status line {status_line:?}"));
    }
    let status: u16 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| format!("bad header {line:?}"))?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let rest = &raw[end..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.to_ascii_lowercase().contains("chunked"));
    let body = if chunked {
        dechunk(rest)?
    } else if let Some((_, v)) = headers.iter().find(|(k, _)| k == "content-length") {
        let n: usize = v.parse().map_err(|_| "bad content-length")?;
        if rest.len() < n {
            return Err(format!("body truncated: {} of {n}", rest.len()));
        }
        rest[..n].to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let p = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("chunk size line incomplete")?;
        let size_s = std::str::from_utf8(&b[..p]).map_err(|_| "bad chunk size")?;
        let size_s = size_s.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_s, 16).map_err(|_| "bad chunk size")?;
        b = &b[p + 2..];
        if size == 0 {
            return Ok(out);
        }
        if b.len() < size + 2 {
            return Err("chunk incomplete".into());
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

// ---------------------------------------------------------------------------------------------
// Host identity and signed hops
// ---------------------------------------------------------------------------------------------

/// A test host: a name and an Ed25519 host key.
pub(crate) struct Host {
    pub name: String,
    pub key: SigningKey,
}

/// How to sign one hop; the defaults make a valid v2 hop (with `x-mbx-key`, fresh `ts`).
#[derive(Default)]
pub(crate) struct Hop {
    /// `x-mbx-ts` to send (default: now).
    pub ts_ms: Option<i64>,
    /// Leave out `x-mbx-key` (a v1 caller, found by name).
    pub v1: bool,
    /// Sign this path instead of the protocol's signed path.
    pub signed_path: Option<String>,
    /// Sign this body instead of the one sent.
    pub signed_body: Option<String>,
    /// Send this `x-mbx-host` instead of the host's name.
    pub host_header: Option<String>,
    /// Sign with this key instead of the host's (headers still name the host's key).
    pub signer: Option<SigningKey>,
}

/// The path a hop signs: with its query for `/v2/...`, bare for `/v1/...` (docs/protocol.md §2).
pub(crate) fn hop_signed_path(path: &str) -> String {
    if path.starts_with("/v2/") {
        path.to_string()
    } else {
        path.split('?').next().unwrap_or(path).to_string()
    }
}

/// The signed hop payload: canonical of `{"method","path","ts","body": M:P:TS:BODY}`.
pub(crate) fn hop_payload(method: &str, path: &str, ts: &str, body: &str) -> String {
    canonical_json(&json!({
        "method": method,
        "path": path,
        "ts": ts,
        "body": format!("{method}:{path}:{ts}:{body}"),
    }))
}

impl Host {
    /// A new host with a fresh random key.
    pub(crate) fn new(name: &str) -> Host {
        Host {
            name: name.to_string(),
            key: SigningKey::generate(),
        }
    }

    /// A new host, enrolled on `relay` (asserts success).
    pub(crate) fn enrolled(relay: &Relay, name: &str) -> Host {
        let h = Host::new(name);
        h.enrol(relay);
        h
    }

    /// The host public key in protocol form.
    pub(crate) fn pubkey(&self) -> String {
        self.key.public_b64()
    }

    /// The hop headers for one request.
    pub(crate) fn hop_headers(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        hop: &Hop,
    ) -> Vec<(String, String)> {
        let ts = hop.ts_ms.unwrap_or_else(now_ms).to_string();
        let spath = hop
            .signed_path
            .clone()
            .unwrap_or_else(|| hop_signed_path(path));
        let sbody = hop
            .signed_body
            .clone()
            .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
        let payload = hop_payload(method, &spath, &ts, &sbody);
        let sig = hop
            .signer
            .as_ref()
            .unwrap_or(&self.key)
            .sign(payload.as_bytes());
        let mut h = vec![
            (
                "x-mbx-host".to_string(),
                hop.host_header.clone().unwrap_or_else(|| self.name.clone()),
            ),
            ("x-mbx-ts".to_string(), ts),
            ("x-mbx-sig".to_string(), sig),
        ];
        if !hop.v1 {
            h.push(("x-mbx-key".to_string(), self.pubkey()));
        }
        h
    }

    /// A request with a hop signed as `hop` says, plus extra headers.
    pub(crate) fn call_with(
        &self,
        relay: &Relay,
        method: &str,
        path: &str,
        body: &[u8],
        hop: &Hop,
        extra: &[(&str, &str)],
    ) -> Response {
        let hh = self.hop_headers(method, path, body, hop);
        let mut headers: Vec<(&str, &str)> =
            hh.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        headers.extend_from_slice(extra);
        relay.send(method, path, &headers, body)
    }

    /// A request with a valid v2 hop to the relay at `addr`; `Err` on an I/O failure (a relay
    /// killed meanwhile) instead of a panic.
    pub(crate) fn try_call_at(
        &self,
        addr: SocketAddr,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> Result<Response, String> {
        let hh = self.hop_headers(method, path, body, &Hop::default());
        let headers: Vec<(&str, &str)> = hh.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        try_send(addr, method, path, &headers, body)
    }

    /// A request with a valid v2 hop (`x-mbx-key` included).
    pub(crate) fn call(&self, relay: &Relay, method: &str, path: &str, body: &[u8]) -> Response {
        self.call_with(relay, method, path, body, &Hop::default(), &[])
    }

    /// A request with a valid v1 hop (no `x-mbx-key`; the relay finds the host by name).
    pub(crate) fn call_v1(&self, relay: &Relay, method: &str, path: &str, body: &[u8]) -> Response {
        let hop = Hop {
            v1: true,
            ..Hop::default()
        };
        self.call_with(relay, method, path, body, &hop, &[])
    }

    /// Signed GET.
    pub(crate) fn get(&self, relay: &Relay, path: &str) -> Response {
        self.call(relay, "GET", path, b"")
    }

    /// Signed POST of a JSON value.
    pub(crate) fn post_json(&self, relay: &Relay, path: &str, body: &Value) -> Response {
        self.call(relay, "POST", path, body.to_string().as_bytes())
    }

    /// `POST /v1/relay/challenge {"host","pubkey"}`.
    pub(crate) fn challenge(&self, relay: &Relay) -> Response {
        relay.post_json(
            "/v1/relay/challenge",
            &json!({"host": self.name, "pubkey": self.pubkey()}),
        )
    }

    /// The enrol body for a challenge: `{"host","pubkey","owner_fp","sig"}` with `sig` over
    /// canonical(`{"v":1,"challenge","host","pubkey","owner_fp"}`) by `signer` (default: own key).
    pub(crate) fn enrol_body(
        &self,
        challenge: &str,
        owner_fp: &str,
        signer: Option<&SigningKey>,
    ) -> Value {
        let stmt = json!({
            "v": 1, "challenge": challenge, "host": self.name,
            "pubkey": self.pubkey(), "owner_fp": owner_fp,
        });
        let sig = signer
            .unwrap_or(&self.key)
            .sign(canonical_json(&stmt).as_bytes());
        json!({"host": self.name, "pubkey": self.pubkey(), "owner_fp": owner_fp, "sig": sig})
    }

    /// Challenge then enrol with this owner_fp; returns the enrol response (the challenge is
    /// asserted 200).
    pub(crate) fn try_enrol(&self, relay: &Relay, owner_fp: &str) -> Response {
        let c = self.challenge(relay);
        assert_eq!(c.status, 200, "challenge for {}: {}", self.name, c.text());
        let challenge = c.json()["challenge"]
            .as_str()
            .expect("challenge")
            .to_string();
        relay.post_json(
            "/v1/relay/enrol",
            &self.enrol_body(&challenge, owner_fp, None),
        )
    }

    /// Challenge and enrol; asserts `200 {"ok":true}`.
    pub(crate) fn enrol(&self, relay: &Relay) {
        let r = self.try_enrol(relay, "");
        assert_eq!(r.status, 200, "enrol {}: {}", self.name, r.text());
        assert_eq!(r.json(), json!({"ok": true}));
    }

    /// `POST /v2/relay/items {"items": items}`.
    pub(crate) fn push(&self, relay: &Relay, items: &[Value]) -> Response {
        self.post_json(relay, "/v2/relay/items", &json!({ "items": items }))
    }

    /// Pushes and returns the `results` array (asserts 200 and one result per item).
    pub(crate) fn push_results(&self, relay: &Relay, items: &[Value]) -> Vec<Value> {
        let r = self.push(relay, items).ok();
        let res = r["results"]
            .as_array()
            .cloned()
            .unwrap_or_else(|| panic!("no results: {r}"));
        assert_eq!(res.len(), items.len(), "one result per item: {r}");
        res
    }

    /// Pushes one item and returns its result.
    pub(crate) fn push_one(&self, relay: &Relay, item: &Value) -> Value {
        self.push_results(relay, std::slice::from_ref(item))
            .remove(0)
    }

    /// `GET /v2/relay/items<query>` (query including its leading `?`, or empty).
    pub(crate) fn pull(&self, relay: &Relay, query: &str) -> Response {
        self.get(relay, &format!("/v2/relay/items{query}"))
    }

    /// Pulls every item after `after` by following `last_seq` (bounded to 1,000 pages).
    pub(crate) fn pull_all(&self, relay: &Relay, after: u64) -> Vec<Value> {
        let mut out = Vec::new();
        let mut after = after;
        for _ in 0..1000 {
            let p = self.pull(relay, &format!("?after={after}")).ok();
            let items = p["items"].as_array().cloned().unwrap_or_default();
            out.extend(items.iter().cloned());
            after = p["last_seq"].as_u64().expect("last_seq");
            if !p["more"].as_bool().expect("more") {
                return out;
            }
            assert!(!items.is_empty(), "more=true with an empty page: {p}");
        }
        panic!("pull_all did not finish in 1000 pages");
    }

    /// `POST /v2/relay/ack {"epoch","through"}`.
    pub(crate) fn ack(&self, relay: &Relay, epoch: &str, through: Value) -> Response {
        self.post_json(
            relay,
            "/v2/relay/ack",
            &json!({"epoch": epoch, "through": through}),
        )
    }

    /// `POST /v1/relay/enc-key {"enc_pub","sig"}` with a valid signature.
    pub(crate) fn publish_enc(&self, relay: &Relay, enc_pub: &str) -> Response {
        let sig = self.key.sign(
            canonical_json(&json!({"v":1, "host": self.name, "enc_pub": enc_pub})).as_bytes(),
        );
        self.post_json(
            relay,
            "/v1/relay/enc-key",
            &json!({"enc_pub": enc_pub, "sig": sig}),
        )
    }

    /// The sender-list body signed by this host: `{"list":{...},"sig"}`.
    pub(crate) fn sender_list(&self, senders: &[String], iat_ms: i64) -> Value {
        let list = json!({
            "v": 1, "type": "relay-senders", "host_pubkey": self.pubkey(),
            "senders": senders, "iat": iso(iat_ms),
        });
        let sig = self.key.sign(canonical_json(&list).as_bytes());
        json!({"list": list, "sig": sig})
    }

    /// `POST /v2/relay/senders` with a list signed by this host.
    pub(crate) fn publish_senders(
        &self,
        relay: &Relay,
        senders: &[String],
        iat_ms: i64,
    ) -> Response {
        self.post_json(
            relay,
            "/v2/relay/senders",
            &self.sender_list(senders, iat_ms),
        )
    }

    /// A sealed envelope from this host to `agent@<target name>` for each target, as an
    /// `envelope` item for those targets (same wire bytes for all), with a fresh ULID.
    pub(crate) fn envelope_to(&self, targets: &[&Host]) -> Value {
        envelope_item(self, targets)
    }

    /// `info` with this host's hop (so it includes `you`).
    pub(crate) fn info(&self, relay: &Relay) -> Value {
        self.get(relay, "/v2/relay/info").ok()
    }
}

// ---------------------------------------------------------------------------------------------
// Wire item builders
// ---------------------------------------------------------------------------------------------

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// A fresh ULID (26 Crockford base32 chars: 48-bit ms time, 80 random bits).
pub(crate) fn ulid() -> String {
    let t = now_ms() as u128;
    let r = u128::from_be_bytes({
        let mut b = [0u8; 16];
        rand::thread_rng().fill_bytes(&mut b[6..]);
        b
    });
    let v: u128 = (t << 80) | r;
    (0..26)
        .rev()
        .map(|i| CROCKFORD[((v >> (5 * i)) & 31) as usize] as char)
        .collect()
}

/// A valid sealed agentmbx v3 envelope (random 32-byte epk, 24-byte nonce, non-empty body).
pub(crate) fn sealed_envelope(id: &str, from: &str, to: &[String]) -> Value {
    let cipher = b64(&random_bytes(48));
    json!({
        "v": 3, "id": id, "ts": iso(now_ms()), "from": from, "to": to,
        "thread": id, "reply_to": null, "kind": "message", "subject": "hello",
        "body": cipher, "needs_reply": false, "refs": [],
        "meta": {"mentions": [], "directives": [], "tags": [], "task_refs": []},
        "authority": null,
        "enc": {
            "v": 1, "alg": "x25519+xchacha20poly1305",
            "epk": b64(&random_bytes(32)), "nonce": b64(&random_bytes(24)),
            "body": cipher,
        },
    })
}

/// Serialises `v` (an object) to exactly `len` bytes by adding an unknown `"pad"` string field
/// (unknown fields are allowed in envelopes). Panics if `v` is already longer.
pub(crate) fn pad_json_to(v: &Value, len: usize) -> Vec<u8> {
    let mut v = v.clone();
    v["pad"] = json!("");
    let base = serde_json::to_vec(&v).expect("json").len();
    assert!(base <= len, "object is {base} bytes, cannot pad to {len}");
    v["pad"] = json!("x".repeat(len - base));
    let out = serde_json::to_vec(&v).expect("json");
    assert_eq!(out.len(), len);
    out
}

/// A push item `{"kind","item_id","targets":[{"host_pubkey","wire_b64"}]}`.
pub(crate) fn item(kind: &str, item_id: &str, targets: &[(String, Vec<u8>)]) -> Value {
    let t: Vec<Value> = targets
        .iter()
        .map(|(pk, wire)| json!({"host_pubkey": pk, "wire_b64": b64(wire)}))
        .collect();
    json!({"kind": kind, "item_id": item_id, "targets": t})
}

/// The sealed envelope wire bytes (compact JSON) from `sender` to `agent@<target>` for targets.
pub(crate) fn envelope_wire(id: &str, sender: &Host, targets: &[&Host]) -> Vec<u8> {
    let to: Vec<String> = targets
        .iter()
        .map(|t| format!("agent@{}", t.name))
        .collect();
    serde_json::to_vec(&sealed_envelope(id, &format!("agent@{}", sender.name), &to)).expect("json")
}

/// An `envelope` item with a fresh ULID for these targets (same wire bytes for each).
pub(crate) fn envelope_item(sender: &Host, targets: &[&Host]) -> Value {
    let id = ulid();
    let wire = envelope_wire(&id, sender, targets);
    item(
        "envelope",
        &id,
        &targets
            .iter()
            .map(|t| (t.pubkey(), wire.clone()))
            .collect::<Vec<_>>(),
    )
}

/// An `envelope` item whose wire is exactly `len` bytes (padded), for size and quota tests.
pub(crate) fn envelope_item_sized(sender: &Host, targets: &[&Host], len: usize) -> Value {
    let id = ulid();
    let to: Vec<String> = targets
        .iter()
        .map(|t| format!("agent@{}", t.name))
        .collect();
    let env = sealed_envelope(&id, &format!("agent@{}", sender.name), &to);
    let wire = pad_json_to(&env, len);
    item(
        "envelope",
        &id,
        &targets
            .iter()
            .map(|t| (t.pubkey(), wire.clone()))
            .collect::<Vec<_>>(),
    )
}

/// The wire bytes of an item's first target.
pub(crate) fn item_wire(item: &Value) -> Vec<u8> {
    unb64(item["targets"][0]["wire_b64"].as_str().expect("wire_b64")).expect("base64")
}

/// A receipt record `{"v":1,"type":"receipt","msg","recipient","state","at","seq"}`.
pub(crate) fn receipt_record(msg: &str, recipient: &str, seq: u64) -> Value {
    json!({
        "v": 1, "type": "receipt", "msg": msg, "recipient": recipient,
        "state": "delivered", "at": iso(now_ms()), "seq": seq,
    })
}

/// The item id of a receipt record: `receipt:<msg>:<recipient>:<seq>`.
pub(crate) fn receipt_item_id(rec: &Value) -> String {
    format!(
        "receipt:{}:{}:{}",
        rec["msg"].as_str().unwrap_or(""),
        rec["recipient"].as_str().unwrap_or(""),
        rec["seq"]
    )
}

/// Receipt wire bytes: canonical(`{"rec","sig"}`) with `sig` by `signer` over canonical(rec).
pub(crate) fn receipt_wire(rec: &Value, signer: &SigningKey) -> Vec<u8> {
    let sig = signer.sign(canonical_json(rec).as_bytes());
    canonical_json(&json!({"rec": rec, "sig": sig})).into_bytes()
}

/// A valid `receipt` item pushed by `sender` (who signs it) to `target`; returns the item.
pub(crate) fn receipt_item(sender: &Host, target: &Host) -> Value {
    let rec = receipt_record(&ulid(), &format!("agent@{}", sender.name), 1);
    let wire = receipt_wire(&rec, &sender.key);
    item(
        "receipt",
        &receipt_item_id(&rec),
        &[(target.pubkey(), wire)],
    )
}

/// A rotation body `{"rotation":{"rec","old_sig","new_sig"}}` for `rec.host = host_name`, from
/// `old` to `new`, signed by both keys (override with `old_signer`/`new_signer`).
pub(crate) fn rotation(
    host_name: &str,
    old: &SigningKey,
    new: &SigningKey,
    old_signer: Option<&SigningKey>,
    new_signer: Option<&SigningKey>,
) -> Value {
    let rec = json!({
        "v": 1, "type": "host-rotation", "host": host_name,
        "old_pub": old.public_b64(), "new_pub": new.public_b64(),
        "new_enc_pub": b64(&random_bytes(32)), "iat": iso(now_ms()),
    });
    rotation_from_rec(&rec, old_signer.unwrap_or(old), new_signer.unwrap_or(new))
}

/// A rotation body for an arbitrary record, signed by the two given keys.
pub(crate) fn rotation_from_rec(
    rec: &Value,
    old_signer: &SigningKey,
    new_signer: &SigningKey,
) -> Value {
    let c = canonical_json(rec);
    json!({"rotation": {
        "rec": rec,
        "old_sig": old_signer.sign(c.as_bytes()),
        "new_sig": new_signer.sign(c.as_bytes()),
    }})
}

// ---------------------------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------------------------

/// True for a UUID v4 string (`xxxxxxxx-xxxx-4xxx-[89ab]xxx-xxxxxxxxxxxx`, lowercase hex).
pub(crate) fn is_uuid_v4(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    for (i, c) in b.iter().enumerate() {
        let ok = match i {
            8 | 13 | 18 | 23 => *c == b'-',
            14 => *c == b'4',
            19 => matches!(c, b'8' | b'9' | b'a' | b'b'),
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
        };
        if !ok {
            return false;
        }
    }
    true
}

/// True for `YYYY-MM-DDTHH:MM:SS.mmmZ`.
pub(crate) fn is_iso_ms(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 24
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            19 => *c == b'.',
            23 => *c == b'Z',
            _ => c.is_ascii_digit(),
        })
}

/// Sorted key names of a JSON object (for exact-field assertions).
pub(crate) fn keys_of(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .cloned()
        .collect();
    k.sort();
    k
}

/// Asserts an object has exactly these keys.
pub(crate) fn assert_keys(v: &Value, expected: &[&str]) {
    let mut e: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    e.sort();
    assert_eq!(keys_of(v), e, "fields of {v}");
}

/// Checks one accepted/duplicate push result against the protocol, field by field:
/// `{"item_id","status","targets":[{"host_pubkey","seq"}],"accept","sig"}`, the accept statement
/// `{"v":1,"type":"relay-accept","relay_pubkey","epoch","sender_pubkey","item_id",
/// "targets":[{"host_pubkey","seq","wire_hash"}],"at"}` matching the pushed `item` (wire hash of
/// each target's decoded wire), and `sig` verifying with `relay_pubkey` over canonical(accept).
/// Returns the seqs per target, in order.
pub(crate) fn verify_accept(
    result: &Value,
    item: &Value,
    sender: &Host,
    relay_pubkey: &str,
    epoch: &str,
) -> Vec<u64> {
    assert_keys(result, &["item_id", "status", "targets", "accept", "sig"]);
    let item_id = item["item_id"].as_str().expect("item_id");
    assert_eq!(result["item_id"], json!(item_id));
    let accept = &result["accept"];
    assert_keys(
        accept,
        &[
            "v",
            "type",
            "relay_pubkey",
            "epoch",
            "sender_pubkey",
            "item_id",
            "targets",
            "at",
        ],
    );
    assert_eq!(accept["v"], json!(1));
    assert_eq!(accept["type"], json!("relay-accept"));
    assert_eq!(accept["relay_pubkey"], json!(relay_pubkey));
    assert_eq!(accept["epoch"], json!(epoch));
    assert_eq!(accept["sender_pubkey"], json!(sender.pubkey()));
    assert_eq!(accept["item_id"], json!(item_id));
    assert!(
        is_iso_ms(accept["at"].as_str().expect("at string")),
        "at: {}",
        accept["at"]
    );
    let pushed = item["targets"].as_array().expect("targets");
    let rt = result["targets"].as_array().expect("result targets");
    let at = accept["targets"].as_array().expect("accept targets");
    assert_eq!(rt.len(), pushed.len());
    assert_eq!(at.len(), pushed.len());
    let mut seqs = Vec::new();
    for ((p, r), a) in pushed.iter().zip(rt).zip(at) {
        assert_keys(r, &["host_pubkey", "seq"]);
        assert_keys(a, &["host_pubkey", "seq", "wire_hash"]);
        assert_eq!(r["host_pubkey"], p["host_pubkey"]);
        assert_eq!(a["host_pubkey"], p["host_pubkey"]);
        let seq = r["seq"]
            .as_u64()
            .unwrap_or_else(|| panic!("seq not an unsigned integer: {r}"));
        assert!(seq > 0);
        assert_eq!(a["seq"], json!(seq));
        let wire = unb64(p["wire_b64"].as_str().expect("wire_b64")).expect("b64");
        assert_eq!(a["wire_hash"], json!(sha256_hex(&wire)));
        seqs.push(seq);
    }
    let pk = parse_pubkey(relay_pubkey).expect("relay pubkey valid");
    let sig = result["sig"].as_str().expect("sig string");
    assert!(
        verify_canonical(&pk, accept, sig),
        "accept signature does not verify"
    );
    seqs
}

/// Asserts a result is `rejected:<reason>` with `"targets":[]` and no accept/sig.
pub(crate) fn assert_rejected(result: &Value, reason: &str) {
    assert_eq!(
        result["status"],
        json!(format!("rejected:{reason}")),
        "result: {result}"
    );
    assert_eq!(
        result["targets"],
        json!([]),
        "rejected results carry targets []: {result}"
    );
    assert!(
        result.get("accept").is_none(),
        "rejected result has an accept: {result}"
    );
    assert!(
        result.get("sig").is_none(),
        "rejected result has a sig: {result}"
    );
}

/// The reference wire vectors (copied into `tests/fixtures/`).
pub(crate) fn wire_vectors() -> Value {
    serde_json::from_str(include_str!("../../fixtures/wire-vectors.json")).expect("vectors parse")
}

pub(crate) use relay_testkit::files::{modes, reachable_by_others};
