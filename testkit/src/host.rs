//! Support for the host end-to-end tests (the host test binary, relay-tool and TLS tests, the
//! daemon latency bench): a relay child process on a fixed loopback port (so it
//! comes back at the same URL after a crash), and hosts driven through the real `mbx-relay host`
//! command as child processes. Failpoints are chosen per process with `MBX_FAILPOINT`.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

/// Fast retries and short timeouts so crash tests settle in seconds.
pub const HOST_ENV: &[(&str, &str)] = &[
    ("MBX_HOST_TIMEOUT_MS", "5000"),
    ("MBX_HOST_BACKOFF_MS", "20"),
    ("MBX_HOST_BACKOFF_CAP_MS", "100"),
];

/// The retry backoff cap above, as a duration.
pub const BACKOFF_CAP: Duration = Duration::from_millis(100);

/// Sleep until a row whose push failed a moment ago is due again (past the capped backoff), so
/// the next pass retries it however fast the relay came back.
pub fn past_backoff() {
    std::thread::sleep(BACKOFF_CAP + Duration::from_millis(50));
}

/// A free loopback port (bound and released; the relay binds it right after).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A relay child process on a fixed port and store; killed on drop.
pub struct RelayProc {
    /// The fixed loopback port (the same after a restart).
    pub port: u16,
    /// The store directory.
    pub store: PathBuf,
    /// The `serve` arguments it was started with (a restart reuses them).
    pub args: Vec<String>,
    /// Extra environment of the next starts (a bench's fake clock).
    pub env: Vec<(String, String)>,
    child: Option<Child>,
    log: PathBuf,
}

impl RelayProc {
    /// Start a relay on a fresh port with its store under `dir`.
    pub fn start(dir: &Path, args: &[&str]) -> RelayProc {
        Self::start_on(dir, free_port(), "relay-store", args)
    }

    /// Start a relay on `port` with the store `dir/store_name`.
    pub fn start_on(dir: &Path, port: u16, store_name: &str, args: &[&str]) -> RelayProc {
        let mut r = RelayProc {
            port,
            store: dir.join(store_name),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            child: None,
            log: dir.join(format!("{store_name}.log")),
        };
        r.spawn(None);
        r
    }

    /// The URL hosts use.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Start (again) on the same port and store, optionally with a failpoint armed.
    pub fn spawn(&mut self, failpoint: Option<&str>) {
        assert!(self.child.is_none(), "relay already running");
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            match self.try_spawn(failpoint) {
                Ok(()) => return,
                // The port can stay busy for a moment after a kill; retry until the deadline.
                Err(e) if Instant::now() < deadline => {
                    eprintln!("relay start retry: {e}");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("relay does not start: {e}\n{}", self.log_text()),
            }
        }
    }

    fn try_spawn(&mut self, failpoint: Option<&str>) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(crate::bins::relay());
        cmd.arg("serve")
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--store-dir")
            .arg(&self.store)
            .args([
                "--pushes-per-minute",
                "1000000",
                "--enrol-per-minute",
                "1000000",
                "--enrol-per-minute-v4-24",
                "1000000",
                "--enrol-per-minute-v6-48",
                "1000000",
            ])
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("MBX_FAILPOINT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log));
        if let Some(fp) = failpoint {
            cmd.env("MBX_FAILPOINT", fp);
        }
        let mut child = cmd.spawn().map_err(|e| e.to_string())?;
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) if line.starts_with("listening on") => {
                self.child = Some(child);
                Ok(())
            }
            other => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("no listening line: {other:?}"))
            }
        }
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Wait (bounded) for the relay to exit by itself (a failpoint abort); true if it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    self.child = None;
                    return true;
                }
            } else {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process is running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The relay's stderr so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for RelayProc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A host driven through `mbx-relay host --dir DIR ...`.
#[derive(Clone)]
pub struct HostCli {
    /// The host's name.
    pub name: String,
    /// Its host directory.
    pub dir: PathBuf,
    /// Extra environment for every command of this host.
    pub env: Vec<(String, String)>,
    /// The umask its commands start with (`None`: the test process's).
    pub umask: Option<u32>,
}

impl HostCli {
    /// `init --name NAME` in `root/NAME`.
    pub fn init(root: &Path, name: &str) -> HostCli {
        Self::init_under_umask(root, name, None)
    }

    /// `init` as [`HostCli::init`], this and every later command of the host started with
    /// `umask` (e.g. the permissive 022 most systems give processes).
    pub fn init_under_umask(root: &Path, name: &str, umask: Option<u32>) -> HostCli {
        let h = HostCli {
            name: name.into(),
            dir: root.join(name),
            env: Vec::new(),
            umask,
        };
        h.ok(&["init", "--name", name]);
        h
    }

    /// Give `cmd` this host's environment (the fast timings, its own variables) and umask.
    pub fn prepare(&self, cmd: &mut Command) {
        cmd.env_remove("MBX_FAILPOINT");
        for (k, v) in HOST_ENV {
            cmd.env(k, v);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(mask) = self.umask {
            use std::os::unix::process::CommandExt as _;
            // SAFETY: umask(2) between fork and exec only replaces the child's creation mask.
            unsafe {
                cmd.pre_exec(move || {
                    libc::umask(mask as libc::mode_t);
                    Ok(())
                });
            }
        }
    }

    /// Run one command with an optional failpoint; returns the raw output.
    pub fn run_fp(&self, args: &[&str], failpoint: Option<&str>) -> Output {
        let mut cmd = Command::new(crate::bins::relay());
        cmd.arg("host")
            .arg("--dir")
            .arg(&self.dir)
            .arg("--json")
            .args(args);
        self.prepare(&mut cmd);
        if let Some(fp) = failpoint {
            cmd.env("MBX_FAILPOINT", fp);
        }
        cmd.output().expect("run host command")
    }

    /// Run one command; `Ok(json)` on exit 0, `Err(stderr)` otherwise.
    pub fn run(&self, args: &[&str]) -> Result<Value, String> {
        let out = self.run_fp(args, None);
        if out.status.success() {
            Ok(serde_json::from_slice(&out.stdout).expect("host prints JSON"))
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Run one command that must succeed.
    pub fn ok(&self, args: &[&str]) -> Value {
        self.run(args)
            .unwrap_or_else(|e| panic!("{} {args:?} failed: {e}", self.name))
    }

    /// Run a command that must die at `failpoint` (abort, not a clean exit).
    pub fn crash_at(&self, args: &[&str], failpoint: &str) {
        let out = self.run_fp(args, Some(failpoint));
        assert!(
            !out.status.success(),
            "{} {args:?} did not stop at {failpoint}",
            self.name
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("failpoint {failpoint}")),
            "expected abort at {failpoint}, got: {err}"
        );
    }

    /// The host's public key.
    pub fn pubkey(&self) -> String {
        self.ok(&["status"])["pubkey"].as_str().unwrap().to_string()
    }

    /// One sync pass that must succeed.
    pub fn sync(&self) -> Value {
        self.ok(&["sync"])
    }

    /// `status` as JSON.
    pub fn status(&self) -> Value {
        self.ok(&["status"])
    }

    /// Inbox message ids.
    pub fn inbox_ids(&self) -> Vec<String> {
        self.ok(&["inbox"])["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_string())
            .collect()
    }

    /// Queue a message; returns its id.
    pub fn send(&self, to: &str, subject: &str, body: &str) -> String {
        self.ok(&["send", "--to", to, "--subject", subject, "--body", body])["id"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// Count of outbox rows `<kind>_<state>` from `status`.
    pub fn count(&self, key: &str) -> u64 {
        self.status()["outbox"][key].as_u64().unwrap_or(0)
    }
}

/// `relay-tool` from the same build, when it was built (`cargo test --workspace` builds it only
/// if asked; `cargo build -p relay-tool` does).
/// `MBX_TEST_NO_RELAY_TOOL=1` forces the library fallback.
pub fn relay_tool() -> Option<PathBuf> {
    if std::env::var_os("MBX_TEST_NO_RELAY_TOOL").is_some() {
        return None;
    }
    let p = crate::bins::dir().join("relay-tool");
    p.exists().then_some(p)
}

/// Two hosts that pinned each other and the relay.
pub fn pair(root: &Path, relay: &RelayProc) -> (HostCli, HostCli) {
    let a = HostCli::init(root, "alpha");
    let b = HostCli::init(root, "beta");
    let (apk, bpk) = (a.pubkey(), b.pubkey());
    a.ok(&["peer", "add", "beta", &bpk]);
    b.ok(&["peer", "add", "alpha", &apk]);
    a.ok(&["relay", "set", &relay.url()]);
    b.ok(&["relay", "set", &relay.url()]);
    (a, b)
}

/// Two hosts paired on a relay ([`pair`]), each having synced once (enrolled, ads published).
pub fn paired(root: &Path, relay: &RelayProc) -> (HostCli, HostCli) {
    let (a, b) = pair(root, relay);
    a.sync();
    b.sync();
    (a, b)
}

/// Sync both hosts in turns until `done` holds (at most `rounds` rounds); failures are tolerated
/// (the relay may be down). Returns whether `done` held.
pub fn sync_until(hosts: &[&HostCli], rounds: usize, mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..rounds {
        for h in hosts {
            let _ = h.run(&["sync"]);
        }
        if done() {
            return true;
        }
    }
    false
}
