//! A throwaway PostgreSQL cluster for tests (of relay-pgstore and of the crates above it): `initdb`
//! into a temp dir, `postgres` on 127.0.0.1 with a free port, `fsync` and `synchronous_commit`
//! on, the unix socket inside the temp dir; stopped (`pg_ctl stop -m fast`, then kill) on drop.
//!
//! PostgreSQL refuses to run as root, and CI runs as root: the cluster then runs as `nobody`
//! and owns its temp dir.

use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The uid/gid of `nobody`/`nogroup`: who runs the cluster when we are root.
const NOBODY: u32 = 65_534;
/// How long the server may take to accept connections after a start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running throwaway cluster.
pub struct PgCluster {
    bindir: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// Databases handed out so far (each test takes a fresh one).
    next_db: std::sync::atomic::AtomicU32,
}

/// Where the PostgreSQL server binaries are: `$MBX_PG_BINDIR`, `pg_config --bindir`, the
/// Debian path of PostgreSQL 15, or any other Debian-packaged version. `None` when no `initdb`
/// is found.
pub fn find_bindir() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("MBX_PG_BINDIR") {
        candidates.push(PathBuf::from(d));
    }
    if let Ok(out) = Command::new("pg_config").arg("--bindir").output() {
        if out.status.success() {
            candidates.push(PathBuf::from(
                String::from_utf8_lossy(&out.stdout).trim().to_string(),
            ));
        }
    }
    candidates.push(PathBuf::from("/usr/lib/postgresql/15/bin"));
    // Any other Debian-packaged version, newest first.
    if let Ok(dirs) = std::fs::read_dir("/usr/lib/postgresql") {
        let mut found: Vec<PathBuf> = dirs.flatten().map(|d| d.path().join("bin")).collect();
        found.sort();
        candidates.extend(found.into_iter().rev());
    }
    candidates
        .into_iter()
        .find(|d| d.join("initdb").is_file() && d.join("postgres").is_file())
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn chown_tree(path: &Path) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY))?;
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            chown_tree(&e?.path())?;
        }
    }
    Ok(())
}

impl PgCluster {
    /// Start a cluster, or print a skip line and return `None` when the binaries are missing.
    ///
    /// # Panics
    /// When the binaries exist but the cluster cannot start (a test failure, not a skip).
    pub fn start_or_skip(test: &str) -> Option<PgCluster> {
        let Some(bindir) = find_bindir() else {
            eprintln!(
                "SKIP {test}: PostgreSQL server binaries not found (set MBX_PG_BINDIR or install \
                 the postgresql package; .ci/run does)"
            );
            return None;
        };
        match PgCluster::start(&bindir) {
            Ok(c) => Some(c),
            Err(e) => panic!(
                "starting a throwaway PostgreSQL cluster from {}: {e}",
                bindir.display()
            ),
        }
    }

    /// `initdb` and start a cluster with the binaries in `bindir`.
    ///
    /// # Errors
    /// What failed, with the server's log when it did not come up.
    pub fn start(bindir: &Path) -> Result<PgCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("mbx-pg-")
            .tempdir()
            .map_err(|e| format!("temp dir: {e}"))?;
        let data = dir.path().join("data");
        std::fs::create_dir(dir.path().join("sock")).map_err(|e| format!("socket dir: {e}"))?;
        if running_as_root() {
            chown_tree(dir.path()).map_err(|e| format!("chown to nobody: {e}"))?;
        }
        let mut initdb = Command::new(bindir.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale=C"]);
        let out = as_cluster_user(&mut initdb)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let mut cluster = PgCluster {
            bindir: bindir.to_path_buf(),
            dir,
            port: free_port().map_err(|e| format!("free port: {e}"))?,
            child: None,
            next_db: std::sync::atomic::AtomicU32::new(0),
        };
        cluster.launch()?;
        Ok(cluster)
    }

    /// Start the server process on the existing data dir and wait until it accepts connections.
    fn launch(&mut self) -> Result<(), String> {
        let data = self.dir.path().join("data");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("server log: {e}"))?;
        if running_as_root() {
            let _ = std::os::unix::fs::chown(self.log_path(), Some(NOBODY), Some(NOBODY));
        }
        let log2 = log.try_clone().map_err(|e| format!("server log: {e}"))?;
        let mut cmd = Command::new(self.bindir.join("postgres"));
        cmd.arg("-D")
            .arg(&data)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-p", &self.port.to_string()])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().join("sock").display()
            ))
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(["-c", "max_connections=200", "-c", "shared_buffers=32MB"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        let child = as_cluster_user(&mut cmd)
            .spawn()
            .map_err(|e| format!("starting postgres: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = Command::new(self.bindir.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ready {
                return Ok(());
            }
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(status)) = c.try_wait() {
                    return Err(format!(
                        "postgres exited ({status}) before accepting connections: {}",
                        self.server_log()
                    ));
                }
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "postgres did not accept connections within {START_TIMEOUT:?}: {}",
                    self.server_log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// The server's log so far (for failure messages).
    pub fn server_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The TCP port the server listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's pid while the server runs (benches read its and its backends' CPU).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A URL of the cluster's default database.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// A URL of database `db`.
    pub fn url_of(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Create a new empty database and return its URL (each test or relay takes its own).
    ///
    /// # Panics
    /// When `createdb` fails.
    pub fn fresh_db(&self) -> String {
        let n = self
            .next_db
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("relay{n}");
        let out = Command::new(self.bindir.join("createdb"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .arg(&name)
            .output()
            .unwrap_or_else(|e| panic!("running createdb: {e}"));
        assert!(
            out.status.success(),
            "createdb {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        self.url_of(&name)
    }

    /// Kill the server with SIGKILL (a crash), without restarting it.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the server again on the same data dir and port (after [`PgCluster::kill9`]).
    ///
    /// # Errors
    /// As [`PgCluster::start`].
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill9();
        // A crashed postmaster leaves its pid file; postgres removes a stale one itself. Its
        // backends outlive it for a moment and keep its shared memory, so a start then exits
        // ("pre-existing shared memory block is still in use"): try again until they are gone.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.launch() {
                Err(e) if e.contains("still in use") && Instant::now() < deadline => {
                    self.kill9();
                    std::thread::sleep(Duration::from_millis(200));
                }
                done => return done,
            }
        }
    }

    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let mut pg_ctl = Command::new(self.bindir.join("pg_ctl"));
        pg_ctl
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["stop", "-m", "fast", "-w", "-t", "10"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let _ = as_cluster_user(&mut pg_ctl).status();
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }
}

/// Run `cmd` as the cluster's user: `nobody` when we are root, else ourselves.
fn as_cluster_user(cmd: &mut Command) -> &mut Command {
    if running_as_root() {
        cmd.uid(NOBODY).gid(NOBODY).env("HOME", "/tmp");
    }
    cmd
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop();
    }
}
