//! A pg_auto_failover cluster for HA drills: a monitor and two data nodes (`pg_autoctl`, Debian
//! package `postgresql-15-auto-failover`), each on a free loopback port in one temp dir, run as
//! the cluster's user ([`crate::cluster`]). The nodes replicate synchronously (replication
//! quorum: `synchronous_standby_names = 'ANY 1 (...)'` while the standby is up,
//! `synchronous_commit = on`). The monitor's health checks are tuned ([`MONITOR_SETTINGS`]) so
//! a lost primary is replaced in seconds. A test kills a node's machine (its `pg_autoctl` and
//! postmaster, SIGKILL), runs it again (it rejoins as a standby), asks for a switchover and
//! waits for the states the monitor reports. Everything is stopped on drop.
//!
//! [`HaCluster::start_in_netns_or_skip`] runs each service in a network namespace of its own
//! on one LAN ([`crate::netns::Lan`]; the relays in the root namespace reach the nodes over
//! it), so a test can cut the network between any two of them ([`HaCluster::net`]). Either
//! way the test's own queries go over the services' unix sockets, which no cut touches.

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{
    as_cluster_user, chown_tree, find_bindir, free_port, in_netns_as_cluster_user, psql,
    run_checked,
};
use crate::netns::{Lan, Netns};
use crate::privilege::running_as_root;

/// The monitor's health-check timings (`pgautofailover.*`, milliseconds), against the
/// defaults 5000 / 5000 / 2 / 2000 / 20000 / 30000: a node is checked every second, declared
/// unhealthy after 2 s without a report and a failed check, and an unreachable old primary is
/// taken as demoted after 4 s (longer than the keepers' 2 s `network_partition_timeout`, after
/// which a primary cut off from monitor and standby demotes itself: no two writable nodes).
pub const MONITOR_SETTINGS: [(&str, u32); 6] = [
    ("health_check_period", 1_000),
    ("health_check_timeout", 1_000),
    ("health_check_max_retries", 1),
    ("health_check_retry_delay", 500),
    ("node_considered_unhealthy_timeout", 2_000),
    ("primary_demote_timeout", 4_000),
];
/// The keepers' `timeout.network_partition_timeout` (seconds; default 20).
pub const NETWORK_PARTITION_TIMEOUT_S: u32 = 2;
/// How long the cluster may take to come up, or a node to reach a state.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// Lines of each service's log a failure message shows.
const LOG_LINES: usize = 150;
/// How long a stopping service may take before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Where `pg_autoctl` is: `$MBX_PG_AUTOCTL`, next to the server binaries, or on `PATH`
/// (Debian's `/usr/bin/pg_autoctl`).
pub fn find_pg_autoctl(bindir: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("MBX_PG_AUTOCTL")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    candidates.push(bindir.join("pg_autoctl"));
    if let Some(path) = std::env::var_os("PATH") {
        candidates.extend(std::env::split_paths(&path).map(|d| d.join("pg_autoctl")));
    }
    candidates.into_iter().find(|p| p.is_file())
}

/// One `pg_autoctl` service (the monitor or a data node) and its Postgres.
struct Service {
    name: String,
    pgdata: PathBuf,
    port: u16,
    /// The address it listens on and is known by: 127.0.0.1, or its namespace's.
    host: String,
    /// Its network namespace, when not the root's.
    net: Option<Netns>,
    child: Option<Child>,
}

/// Which service of the cluster a test cuts off ([`HaCluster::net`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Member {
    /// The pg_auto_failover monitor.
    Monitor,
    /// Data node `i` (0 or 1).
    Node(usize),
}

/// A running monitor with two data nodes.
pub struct HaCluster {
    bindir: PathBuf,
    autoctl: PathBuf,
    dir: tempfile::TempDir,
    monitor: Service,
    nodes: Vec<Service>,
    next_db: u32,
    /// The LAN the services' namespaces share (dropped after them).
    lan: Option<Lan>,
}

/// One data node as the monitor reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    /// The node's name.
    pub name: String,
    /// Its PostgreSQL port.
    pub port: u16,
    /// The state it reports.
    pub reported: String,
    /// The state the monitor wants it in.
    pub goal: String,
}

impl NodeState {
    /// Reported and assigned state are both `state`.
    pub fn is(&self, state: &str) -> bool {
        self.reported == state && self.goal == state
    }
}

impl HaCluster {
    /// Start the monitor and two nodes (`node1` the first primary) and wait until `node2` is a
    /// synchronous secondary.
    ///
    /// # Panics
    /// When PostgreSQL or `pg_autoctl` is missing (the drills do not skip: `.ci/run` installs
    /// `postgresql-15-auto-failover`), or the cluster does not come up.
    pub fn start() -> HaCluster {
        HaCluster::start_on(None, "")
    }

    /// [`HaCluster::start`] with the monitor and each node in a network namespace of its own
    /// on one LAN, which the relays (in the root namespace) reach too; `None` (a skip line for
    /// `test`) when not root or `ip netns` is unavailable.
    ///
    /// # Panics
    /// As [`HaCluster::start`].
    pub fn start_in_netns_or_skip(test: &str) -> Option<HaCluster> {
        let lan = Lan::create_or_skip(test)?;
        Some(HaCluster::start_on(Some(lan), test))
    }

    fn start_on(lan: Option<Lan>, test: &str) -> HaCluster {
        let bindir = find_bindir()
            .expect("PostgreSQL server binaries not found (install postgresql; .ci/run does)");
        let autoctl = find_pg_autoctl(&bindir)
            .expect("pg_autoctl not found: install postgresql-15-auto-failover (.ci/run does)");
        let mut c = HaCluster::create(bindir, autoctl, lan, test).unwrap_or_else(|e| panic!("{e}"));
        if let Err(e) = c.bring_up() {
            panic!("starting the pg_auto_failover cluster: {e}\n{}", c.logs());
        }
        c
    }

    fn create(
        bindir: PathBuf,
        autoctl: PathBuf,
        lan: Option<Lan>,
        test: &str,
    ) -> Result<HaCluster, String> {
        // Short: the unix sockets live here (a socket path has at most 107 bytes).
        let dir = tempfile::Builder::new()
            .prefix("mbx-ha-")
            .tempdir_in("/tmp")
            .map_err(|e| format!("temp dir: {e}"))?;
        if running_as_root() {
            chown_tree(dir.path()).map_err(|e| format!("chown: {e}"))?;
        }
        let service = |name: &str| -> Result<Service, String> {
            let net = match &lan {
                Some(lan) => Some(lan.join(test).ok_or("`ip netns` unavailable")?),
                None => None,
            };
            Ok(Service {
                name: name.to_string(),
                pgdata: dir.path().join(name),
                port: free_port().map_err(|e| format!("free port: {e}"))?,
                host: net
                    .as_ref()
                    .map_or("127.0.0.1".to_string(), |n| n.inner_addr().to_string()),
                net,
                child: None,
            })
        };
        let monitor = service("monitor")?;
        let nodes = vec![service("node1")?, service("node2")?];
        Ok(HaCluster {
            bindir,
            autoctl,
            dir,
            monitor,
            nodes,
            next_db: 0,
            lan,
        })
    }

    fn bring_up(&mut self) -> Result<(), String> {
        let m = &self.monitor;
        let (pgdata, port) = (m.pgdata.clone(), m.port.to_string());
        let mut create = self.autoctl_cmd(m, &["create", "monitor", "--pgport", &port])?;
        create.arg("--pgdata").arg(&pgdata).args([
            "--hostname",
            &m.host,
            "--auth",
            "trust",
            "--no-ssl",
        ]);
        run_checked(&mut create, "pg_autoctl create monitor")?;
        let mut listen = self.autoctl_cmd(m, &["config", "set", "postgresql.listen_addresses"])?;
        listen.arg(&m.host).arg("--pgdata").arg(&pgdata);
        run_checked(&mut listen, "pg_autoctl config set")?;
        self.monitor.child = Some(self.spawn_logged(&self.monitor, &["run"])?);
        self.wait(START_TIMEOUT, "the monitor to answer", |c| {
            c.monitor_sql("SELECT 1").is_ok()
        })?;
        for (name, ms) in MONITOR_SETTINGS {
            self.monitor_sql(&format!("ALTER SYSTEM SET pgautofailover.{name} = {ms}"))?;
        }
        self.monitor_sql("SELECT pg_reload_conf()")?;
        for i in 0..self.nodes.len() {
            self.create_node(i)?;
            let want = if i == 0 { "single" } else { "secondary" };
            self.wait(START_TIMEOUT, &format!("node{} {want}", i + 1), |c| {
                c.states()
                    .iter()
                    .any(|s| s.port == c.nodes[i].port && s.is(want))
            })?;
        }
        self.wait_synchronous(START_TIMEOUT)?;
        // Once both keepers are settled: done between node1's start and node2's join, twice
        // (two clusters starting at once on a loaded machine) node1's keeper lost its
        // node-active service as node2 joined and never recovered (cause not found).
        for i in 0..self.nodes.len() {
            self.tune_node(i)?;
            self.trust_root_namespace(i)?;
        }
        Ok(())
    }

    /// `pg_autoctl create postgres ... --run` for node `i`.
    fn create_node(&mut self, i: usize) -> Result<(), String> {
        let n = &self.nodes[i];
        let (name, port) = (n.name.as_str(), n.port.to_string());
        let monitor = format!(
            "postgres://autoctl_node@{}:{}/pg_auto_failover?sslmode=disable",
            self.monitor.host, self.monitor.port
        );
        let args = [
            "create",
            "postgres",
            "--pgport",
            &port,
            "--name",
            name,
            "--hostname",
            &n.host,
            "--listen",
            &n.host,
            "--username",
            "postgres",
            "--dbname",
            "postgres",
            "--auth",
            "trust",
            "--no-ssl",
            "--monitor",
            &monitor,
            "--run",
        ];
        self.nodes[i].child = Some(self.spawn_logged(n, &args)?);
        Ok(())
    }

    /// In namespaces: let node `i` take connections from the root namespace (the relays'
    /// address on the LAN; on loopback initdb's rules already do), and reload it.
    fn trust_root_namespace(&self, i: usize) -> Result<(), String> {
        let Some(lan) = &self.lan else {
            return Ok(());
        };
        let hba = self.nodes[i].pgdata.join("pg_hba.conf");
        let mut text =
            std::fs::read_to_string(&hba).map_err(|e| format!("reading pg_hba.conf: {e}"))?;
        text.push_str(&format!("host all all {}/32 trust\n", lan.root_addr()));
        std::fs::write(&hba, text).map_err(|e| format!("writing pg_hba.conf: {e}"))?;
        self.node_sql(i, "SELECT pg_reload_conf()").map(|_| ())
    }

    /// Set node `i`'s keeper partition timeout ([`NETWORK_PARTITION_TIMEOUT_S`]) once it runs
    /// (its configuration complete); `config set` signals the running keeper to reload.
    fn tune_node(&self, i: usize) -> Result<(), String> {
        let t = NETWORK_PARTITION_TIMEOUT_S.to_string();
        let n = &self.nodes[i];
        let mut set =
            self.autoctl_cmd(n, &["config", "set", "timeout.network_partition_timeout"])?;
        set.arg(&t).arg("--pgdata").arg(&n.pgdata);
        let out = set
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pg_autoctl config set: {e}"))?;
        if out.status.success() {
            return Ok(());
        }
        Err(format!(
            "pg_autoctl config set: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// `pg_autoctl <args>` for service `s`, as the cluster's user in `s`'s namespace, with
    /// this cluster's environment (its config and state under the temp dir, sockets in it,
    /// this PostgreSQL's binaries first on `PATH`).
    fn autoctl_cmd(&self, s: &Service, args: &[&str]) -> Result<Command, String> {
        let mut c = Command::new(&self.autoctl);
        match &s.net {
            Some(net) => {
                in_netns_as_cluster_user(&mut c, &net.path())
                    .map_err(|e| format!("network namespace of {}: {e}", s.name))?;
            }
            None => {
                as_cluster_user(&mut c);
            }
        }
        let d = self.dir.path();
        c.args(args)
            .env("PATH", format!("{}:/usr/bin:/bin", self.bindir.display()))
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env("XDG_DATA_HOME", d.join("data"))
            .env("XDG_RUNTIME_DIR", d.join("run"))
            // Where pg_autoctl's Postgres puts its unix socket (`-k`) and looks for it.
            .env("PG_REGRESS_SOCK_DIR", d)
            .env("PGHOST", d);
        if args.first() == Some(&"create") {
            // The others find pg_ctl on PATH, or in the node's config.
            c.arg("--pgctl").arg(self.bindir.join("pg_ctl"));
        }
        Ok(c)
    }

    /// Spawn a long-running `pg_autoctl` of service `s` in a process group of its own (so a
    /// machine loss kills all of it at once), its output appended to `<name>.log`.
    fn spawn_logged(&self, s: &Service, args: &[&str]) -> Result<Child, String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join(format!("{}.log", s.name)))
            .map_err(|e| format!("log: {e}"))?;
        let log2 = log.try_clone().map_err(|e| format!("log: {e}"))?;
        let mut cmd = self.autoctl_cmd(s, args)?;
        cmd.arg("--pgdata")
            .arg(&s.pgdata)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0);
        cmd.spawn()
            .map_err(|e| format!("starting pg_autoctl {args:?}: {e}"))
    }

    /// `sql` on the monitor's database as its superuser (the cluster's user, unix socket).
    fn monitor_sql(&self, sql: &str) -> Result<String, String> {
        let mut c = Command::new(self.bindir.join("psql"));
        c.arg("-h")
            .arg(self.dir.path())
            .args([
                "-p",
                &self.monitor.port.to_string(),
                "-d",
                "pg_auto_failover",
            ])
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
        let out = as_cluster_user(&mut c)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("psql: {e}"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Wait up to `limit` for `done`; `Err` naming `what` and the states then.
    fn wait(
        &self,
        limit: Duration,
        what: &str,
        mut done: impl FnMut(&HaCluster) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        while !done(self) {
            if Instant::now() > deadline {
                return Err(format!(
                    "no {what} within {limit:?}; states {:?}",
                    self.states()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The data nodes as the monitor reports them, in node order (empty if it does not answer).
    pub fn states(&self) -> Vec<NodeState> {
        let rows = self
            .monitor_sql(
                "SELECT nodename, nodeport, reportedstate, goalstate FROM pgautofailover.node \
                 ORDER BY nodeid",
            )
            .unwrap_or_default();
        rows.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split('|').collect();
                Some(NodeState {
                    name: f.first()?.to_string(),
                    port: f.get(1)?.parse().ok()?,
                    reported: f.get(2)?.to_string(),
                    goal: f.get(3)?.to_string(),
                })
            })
            .collect()
    }

    /// The monitor's events (state changes and their reasons) from event `after` on, one line
    /// each (`id|time|node|reported|goal|description`): what a failed drill's report needs to
    /// tell which node was assigned what, and when.
    pub fn events(&self, after: u64) -> Vec<String> {
        self.monitor_sql(&format!(
            "SELECT eventid, to_char(eventtime, 'HH24:MI:SS.MS'), nodename, reportedstate, \
             goalstate, description FROM pgautofailover.event WHERE eventid > {after} \
             ORDER BY eventid"
        ))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
    }

    /// Node `i` as the monitor reports it (`None` if it does not answer).
    pub fn state_of(&self, i: usize) -> Option<NodeState> {
        let port = self.nodes[i].port;
        self.states().into_iter().find(|s| s.port == port)
    }

    /// The index of the node the monitor holds writable (reported and assigned `primary`, or
    /// `wait_primary`: a primary whose standby is not (yet) there).
    pub fn primary(&self) -> Option<usize> {
        let states = self.states();
        let p = states
            .iter()
            .find(|s| s.is("primary") || s.is("wait_primary"))?;
        self.nodes.iter().position(|n| n.port == p.port)
    }

    /// Wait until one node is `primary`, the other `secondary`, and the primary's
    /// `synchronous_standby_names` names a standby that streams as `sync` or `quorum`: the
    /// cluster is synchronous again.
    ///
    /// # Errors
    /// The states when it did not happen within `limit`.
    pub fn wait_synchronous(&self, limit: Duration) -> Result<(), String> {
        self.wait(limit, "synchronous primary and secondary", |c| {
            let states = c.states();
            let both =
                states.iter().any(|s| s.is("primary")) && states.iter().any(|s| s.is("secondary"));
            both && c.primary().is_some_and(|p| c.synchronous(p))
        })
    }

    /// Whether node `i` is a primary whose commits wait for a streaming standby.
    pub fn synchronous(&self, i: usize) -> bool {
        let names = self.node_sql(i, "SHOW synchronous_standby_names");
        let rep = self.node_sql(i, "SELECT sync_state FROM pg_stat_replication");
        let commit = self.node_sql(i, "SHOW synchronous_commit");
        matches!(names, Ok(n) if !n.is_empty())
            && matches!(rep, Ok(r) if r.lines().any(|s| s == "sync" || s == "quorum"))
            && matches!(commit, Ok(c) if c == "on")
    }

    /// `sql` on node `i`'s `postgres` database.
    ///
    /// # Errors
    /// psql's stderr.
    pub fn node_sql(&self, i: usize, sql: &str) -> Result<String, String> {
        psql(&self.bindir, &self.node_url(i, "postgres"), sql)
    }

    /// Over the node's unix socket (in the temp dir): no network cut stops the test's own
    /// queries.
    fn node_url(&self, i: usize, db: &str) -> String {
        format!(
            "postgres://postgres@/{db}?host={}&port={}&connect_timeout=2",
            self.dir.path().display(),
            self.nodes[i].port
        )
    }

    /// A new empty database, created on the primary (replicated to the standby): its name.
    ///
    /// # Panics
    /// When there is no primary or `CREATE DATABASE` fails.
    pub fn fresh_db_name(&mut self) -> String {
        let p = self.primary().expect("a primary");
        let name = format!("relay{}", self.next_db);
        self.next_db += 1;
        self.node_sql(p, &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("CREATE DATABASE {name}: {e}"));
        name
    }

    /// A url naming both nodes that only a writable session satisfies (a relay's `--store`);
    /// without TLS, which the nodes do not serve (`--no-ssl`; off loopback the relay would
    /// ask for `verify-full`).
    pub fn url_of(&self, db: &str) -> String {
        self.url_listing_first(db, 0)
    }

    /// [`HaCluster::url_of`] with node `first` listed first: a multi-host url tries its hosts
    /// in order and settles on the first writable one.
    pub fn url_listing_first(&self, db: &str, first: usize) -> String {
        let (a, b) = (&self.nodes[first], &self.nodes[1 - first]);
        format!(
            "postgres://postgres@{}:{},{}:{}/{db}?target_session_attrs=read-write&sslmode=disable",
            a.host, a.port, b.host, b.port
        )
    }

    /// The namespace of `member` (cut it, or drop packets between it and an address).
    ///
    /// # Panics
    /// When the cluster was not started with [`HaCluster::start_in_netns_or_skip`].
    pub fn net(&self, member: Member) -> &Netns {
        let s = match member {
            Member::Monitor => &self.monitor,
            Member::Node(i) => &self.nodes[i],
        };
        s.net
            .as_ref()
            .expect("a cluster started with HaCluster::start_in_netns_or_skip")
    }

    /// The root namespace's address on the cluster's LAN: where the relays' connections come
    /// from.
    ///
    /// # Panics
    /// As [`HaCluster::net`].
    pub fn root_addr(&self) -> std::net::Ipv4Addr {
        self.lan
            .as_ref()
            .expect("a cluster started with HaCluster::start_in_netns_or_skip")
            .root_addr()
    }

    /// Lose node `i`'s machine: SIGKILL to its `pg_autoctl` and its postmaster at once (their
    /// process group), and to the postmaster by its pid file should it have left the group.
    pub fn kill_machine(&mut self, i: usize) {
        let n = &mut self.nodes[i];
        let pm = postmaster_pid(&n.pgdata);
        if let Some(c) = n.child.as_mut() {
            kill_group(c.id(), libc::SIGKILL);
        }
        if let Some(pid) = pm {
            // SAFETY: kill has no memory preconditions; a stale pid just fails.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if let Some(mut c) = n.child.take() {
            let _ = c.wait();
        }
    }

    /// Kill node `i`'s postmaster alone (SIGKILL), not its machine: its `pg_autoctl` keeper
    /// lives on and starts PostgreSQL again, which runs read-write as it was until the monitor
    /// has it demoted. Returns whether a postmaster was found.
    pub fn kill_postmaster(&self, i: usize) -> bool {
        let Some(pid) = postmaster_pid(&self.nodes[i].pgdata) else {
            return false;
        };
        // SAFETY: kill has no memory preconditions; a stale pid just fails.
        unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
    }

    /// [`HaCluster::kill_postmaster`] with node `i`'s keeper held still (SIGSTOP to its
    /// `pg_autoctl` processes) for `hold`, then let go (SIGCONT): held past the monitor's
    /// unhealthy timeout, the monitor starts promoting the standby meanwhile, and the keeper
    /// let go may start the old primary again, read-write on its old timeline beside the
    /// standby being promoted, before it hears it is to be demoted (a race: it also may hear
    /// first). Not held, a keeper often restarts the postmaster before the monitor notices,
    /// and no promotion follows.
    pub fn kill_postmaster_holding_keeper(&self, i: usize, hold: Duration) -> bool {
        let keeper = self.nodes[i].child.as_ref().map(Child::id);
        if let Some(k) = keeper {
            kill_group(k, libc::SIGSTOP);
        }
        let killed = self.kill_postmaster(i);
        std::thread::sleep(hold);
        if let Some(k) = keeper {
            kill_group(k, libc::SIGCONT);
        }
        killed
    }

    /// The timeline node `i` is on (a primary's WAL insert timeline, a standby's replayed
    /// one), or `None` when it does not answer.
    pub fn timeline(&self, i: usize) -> Option<u32> {
        self.node_sql(
            i,
            "SELECT CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM \
             pg_control_checkpoint()) ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), \
             1, 8))::bit(32)::int END",
        )
        .ok()?
        .parse()
        .ok()
    }

    /// Run node `i`'s `pg_autoctl` again on its data dir (after [`HaCluster::kill_machine`]): the
    /// monitor drives it back as a standby of the current primary.
    ///
    /// # Errors
    /// When it cannot be started.
    pub fn restart_node(&mut self, i: usize) -> Result<(), String> {
        let child = self.spawn_logged(&self.nodes[i], &["run"])?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// `pg_autoctl perform switchover`: the primary hands over to the secondary and rejoins as
    /// its standby; returns once the monitor reports it done.
    ///
    /// # Errors
    /// pg_autoctl's output when it failed.
    pub fn switchover(&self) -> Result<(), String> {
        let mut c = self.autoctl_cmd(&self.monitor, &["perform", "switchover", "--pgdata"])?;
        c.arg(&self.monitor.pgdata);
        run_checked(&mut c, "pg_autoctl perform switchover")
    }

    /// Every service's log so far (for failure messages).
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for s in std::iter::once(&self.monitor).chain(&self.nodes) {
            let log = std::fs::read_to_string(self.dir.path().join(format!("{}.log", s.name)))
                .unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(LOG_LINES).collect();
            out.push_str(&format!("--- {} (last {LOG_LINES} lines)\n", s.name));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// The postmaster's pid from `postmaster.pid` (its first line), while the file exists and
/// that process is still a postgres on `pgdata` (a stale file's pid may have been reused).
fn postmaster_pid(pgdata: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pgdata.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let ours = String::from_utf8_lossy(&cmdline).contains(&*pgdata.to_string_lossy());
    ours.then_some(pid)
}

fn kill_group(leader: u32, sig: i32) {
    if let Ok(pgid) = i32::try_from(leader) {
        // SAFETY: kill has no memory preconditions; a gone group just fails.
        unsafe { libc::kill(-pgid, sig) };
    }
}

impl Drop for HaCluster {
    /// SIGTERM to every service (pg_autoctl stops its Postgres), SIGKILL to what is left.
    fn drop(&mut self) {
        let services: Vec<&mut Service> = std::iter::once(&mut self.monitor)
            .chain(&mut self.nodes)
            .collect();
        for s in &services {
            if let Some(c) = s.child.as_ref() {
                kill_group(c.id(), libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        for s in services {
            if let Some(mut c) = s.child.take() {
                while !matches!(c.try_wait(), Ok(Some(_))) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                kill_group(c.id(), libc::SIGKILL);
                let _ = c.wait();
            }
            if let Some(pid) = postmaster_pid(&s.pgdata) {
                // SAFETY: as in kill_machine.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
