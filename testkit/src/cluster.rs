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

use crate::privilege::running_as_root;

/// The uid/gid of `nobody`/`nogroup`: who runs the cluster when we are root.
const NOBODY: u32 = 65_534;
/// How long the server may take to accept connections after a start.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running throwaway cluster.
pub struct PgCluster {
    pub(crate) bindir: PathBuf,
    pub(crate) dir: tempfile::TempDir,
    pub(crate) port: u16,
    pub(crate) child: Option<Child>,
    /// Databases handed out so far (each test takes a fresh one).
    pub(crate) next_db: std::sync::atomic::AtomicU32,
    /// Extra `name=value` settings the server starts with (`-c`), e.g. a primary's
    /// `synchronous_standby_names` (crate::standby).
    pub(crate) settings: Vec<String>,
    /// The address the server listens on and clients use: 127.0.0.1, or the inside of the
    /// network namespace it runs in.
    pub(crate) host: String,
    /// The network namespace the server runs in (its file), when not the root's.
    pub(crate) netns: Option<PathBuf>,
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

pub(crate) fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn chown_tree(path: &Path) -> std::io::Result<()> {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY))?;
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            chown_tree(&e?.path())?;
        }
    }
    Ok(())
}

/// [`find_bindir`], or print a skip line for `test` and answer `None`.
pub fn bindir_or_skip(test: &str) -> Option<PathBuf> {
    let found = find_bindir();
    if found.is_none() {
        eprintln!(
            "SKIP {test}: PostgreSQL server binaries not found (set MBX_PG_BINDIR or install \
             the postgresql package; .ci/run does)"
        );
    }
    found
}

/// Run `sql` with the `psql` of `bindir` on the database `url`: unaligned, tuples only (`|`
/// between columns, one row a line), trimmed.
///
/// # Errors
/// psql's stderr, or why it could not run.
pub fn psql(bindir: &Path, url: &str, sql: &str) -> Result<String, String> {
    let out = Command::new(bindir.join("psql"))
        .args([
            "-X",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            url,
            "-c",
            sql,
        ])
        .output()
        .map_err(|e| format!("running psql: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl PgCluster {
    /// Start a cluster, or print a skip line and return `None` when the binaries are missing.
    ///
    /// # Panics
    /// When the binaries exist but the cluster cannot start (a test failure, not a skip).
    pub fn start_or_skip(test: &str) -> Option<PgCluster> {
        let bindir = bindir_or_skip(test)?;
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
        PgCluster::start_with(bindir, &[])
    }

    /// [`PgCluster::start`] with extra server settings (`name=value`, passed as `-c`).
    ///
    /// # Errors
    /// As [`PgCluster::start`].
    pub fn start_with(bindir: &Path, settings: &[&str]) -> Result<PgCluster, String> {
        PgCluster::start_in(bindir, node_dir()?, settings.iter().map(|s| s.to_string()))
    }

    /// A cluster running inside the network namespace `ns`, listening on its inner address
    /// and trusting connections from the root namespace's end of the pair (partition tests).
    ///
    /// # Errors
    /// As [`PgCluster::start`], or `pg_hba.conf` could not be extended.
    pub fn start_in_netns(bindir: &Path, ns: &crate::netns::Netns) -> Result<PgCluster, String> {
        let dir = node_dir()?;
        let data = dir.path().join("data");
        let mut cluster = PgCluster::node(bindir, dir, std::iter::empty())?;
        cluster.host = ns.inner_addr().to_string();
        cluster.netns = Some(ns.path());
        cluster.initdb()?;
        let hba = data.join("pg_hba.conf");
        let mut text =
            std::fs::read_to_string(&hba).map_err(|e| format!("reading pg_hba.conf: {e}"))?;
        text.push_str(&format!("host all all {}/32 trust\n", ns.outer_addr()));
        std::fs::write(&hba, text).map_err(|e| format!("writing pg_hba.conf: {e}"))?;
        cluster.launch()?;
        Ok(cluster)
    }

    /// A cluster serving TLS (`ssl=on`) with the PEM certificate chain `cert` and key `key`
    /// (copied into the node's directory, owner-only, as the server demands).
    ///
    /// # Errors
    /// As [`PgCluster::start`], or the files could not be copied.
    pub fn start_with_tls(bindir: &Path, cert: &Path, key: &Path) -> Result<PgCluster, String> {
        let dir = node_dir()?;
        let mut settings = vec!["ssl=on".to_string()];
        for (from, name, setting) in [
            (cert, "server.pem", "ssl_cert_file"),
            (key, "server.key", "ssl_key_file"),
        ] {
            let to = dir.path().join(name);
            std::fs::copy(from, &to).map_err(|e| format!("copying {}: {e}", from.display()))?;
            std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .map_err(|e| format!("chmod {name}: {e}"))?;
            if running_as_root() {
                chown_tree(&to).map_err(|e| format!("chown {name}: {e}"))?;
            }
            settings.push(format!("{setting}={}", to.display()));
        }
        PgCluster::start_in(bindir, dir, settings.into_iter())
    }

    /// `initdb` into `dir` and start the server with `settings`.
    fn start_in(
        bindir: &Path,
        dir: tempfile::TempDir,
        settings: impl Iterator<Item = String>,
    ) -> Result<PgCluster, String> {
        let mut cluster = PgCluster::node(bindir, dir, settings)?;
        cluster.initdb()?;
        cluster.launch()?;
        Ok(cluster)
    }

    /// `initdb` into the node's `data`.
    fn initdb(&self) -> Result<(), String> {
        let mut initdb = Command::new(self.bindir.join("initdb"));
        initdb
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale=C"]);
        run_as_cluster_user(&mut initdb, "initdb")
    }

    /// A stopped node of `bindir`'s binaries on `dir` (its `data` filled already) with a free
    /// port and these settings.
    pub(crate) fn node(
        bindir: &Path,
        dir: tempfile::TempDir,
        settings: impl Iterator<Item = String>,
    ) -> Result<PgCluster, String> {
        Ok(PgCluster {
            bindir: bindir.to_path_buf(),
            dir,
            port: free_port().map_err(|e| format!("free port: {e}"))?,
            child: None,
            next_db: std::sync::atomic::AtomicU32::new(0),
            settings: settings.collect(),
            host: "127.0.0.1".to_string(),
            netns: None,
        })
    }

    /// Start the server process on the existing data dir and wait until it accepts connections.
    pub(crate) fn launch(&mut self) -> Result<(), String> {
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
            .arg("-c")
            .arg(format!("listen_addresses={}", self.host))
            .args(["-p", &self.port.to_string()])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.dir.path().join("sock").display()
            ))
            .args(["-c", "fsync=on", "-c", "synchronous_commit=on"])
            .args(["-c", "max_connections=200", "-c", "shared_buffers=32MB"]);
        for s in &self.settings {
            cmd.arg("-c").arg(s);
        }
        cmd.stdin(Stdio::null()).stdout(log).stderr(log2);
        let child = match &self.netns {
            None => as_cluster_user(&mut cmd).spawn(),
            Some(ns) => in_netns_as_cluster_user(&mut cmd, ns).and_then(|c| c.spawn()),
        }
        .map_err(|e| format!("starting postgres: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let ready = Command::new(self.bindir.join("pg_isready"))
                .args(["-q", "-h", &self.host, "-p", &self.port.to_string()])
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

    /// `-h 127.0.0.1 -p PORT -U postgres`: how the client programs reach this server.
    pub(crate) fn client_args(&self) -> [String; 6] {
        [
            "-h",
            &self.host,
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
        ]
        .map(String::from)
    }

    /// The TCP port the server listens on (on [`PgCluster::url`]'s host).
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
        format!("postgres://postgres@{}:{}/{db}", self.host, self.port)
    }

    /// Create a new empty database and return its URL (each test or relay takes its own).
    ///
    /// # Panics
    /// When `createdb` fails.
    pub fn fresh_db(&self) -> String {
        self.url_of(&self.fresh_db_name())
    }

    /// [`PgCluster::fresh_db`], answering the new database's name.
    ///
    /// # Panics
    /// When `createdb` fails.
    pub fn fresh_db_name(&self) -> String {
        let n = self
            .next_db
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("relay{n}");
        let out = Command::new(self.bindir.join("createdb"))
            .args(self.client_args())
            .arg(&name)
            .output()
            .unwrap_or_else(|e| panic!("running createdb: {e}"));
        assert!(
            out.status.success(),
            "createdb {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        name
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

/// A new node directory (the data dir goes in `data`, the unix socket in `sock`), owned by the
/// cluster's user.
pub(crate) fn node_dir() -> Result<tempfile::TempDir, String> {
    let dir = tempfile::Builder::new()
        .prefix("mbx-pg-")
        .tempdir()
        .map_err(|e| format!("temp dir: {e}"))?;
    std::fs::create_dir(dir.path().join("sock")).map_err(|e| format!("socket dir: {e}"))?;
    if running_as_root() {
        chown_tree(dir.path()).map_err(|e| format!("chown to nobody: {e}"))?;
    }
    Ok(dir)
}

/// Run `cmd` (named `what` in errors) as the cluster's user to its end; `Err` with its
/// stderr when it failed.
pub(crate) fn run_as_cluster_user(cmd: &mut Command, what: &str) -> Result<(), String> {
    run_checked(as_cluster_user(cmd), what)
}

/// Run `cmd` (its user already set) to its end; `Err` with its stderr when it failed.
pub(crate) fn run_checked(cmd: &mut Command, what: &str) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {what}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

/// Make `cmd` run inside the network namespace of file `ns`, as `nobody` (only root makes
/// namespaces): the child joins the namespace first, then drops to `nobody` (so not with
/// [`as_cluster_user`], whose uid change would come before the join).
///
/// # Errors
/// When the namespace's file cannot be opened.
pub(crate) fn in_netns_as_cluster_user<'c>(
    cmd: &'c mut Command,
    ns: &Path,
) -> std::io::Result<&'c mut Command> {
    let file = std::fs::File::open(ns)?;
    cmd.env("HOME", "/tmp");
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe system
    // calls; it owns `file`, so its descriptor stays open as long as the command.
    unsafe {
        cmd.pre_exec(move || {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
            let ok = libc::setns(fd, libc::CLONE_NEWNET) == 0
                && libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(NOBODY) == 0
                && libc::setuid(NOBODY) == 0;
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        })
    };
    Ok(cmd)
}

/// Run `cmd` as the cluster's user: `nobody` when we are root, else ourselves.
pub(crate) fn as_cluster_user(cmd: &mut Command) -> &mut Command {
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
