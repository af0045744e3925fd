//! A primary with a synchronous streaming-replication standby, for failover tests: the primary
//! is a [`PgCluster`] with `synchronous_standby_names = '*'` (set with `ALTER SYSTEM`: no
//! commit answers before the standby has it), the standby a `pg_basebackup -R` copy on its own
//! loopback port, which inherits that setting as any such copy does. A test stops the primary
//! (`pg_ctl stop -m immediate`, or SIGKILL) and promotes the standby (`pg_ctl promote`), as an
//! HA manager would after losing the primary's machine; promoted, its commits wait for a
//! standby of its own until the test lifts the requirement ([`PgCluster::set_sync_standbys`]),
//! as a manager does when no standby is left.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster::{
    as_cluster_user, bindir_or_skip, node_dir, psql, run_as_cluster_user, PgCluster,
};

/// How long the standby may take to stream and report itself synchronous, or to promote.
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);

/// A primary and its synchronous standby, both running.
pub struct PgPair {
    /// The primary, where writes go.
    pub primary: PgCluster,
    /// Its synchronous standby.
    pub standby: PgCluster,
}

impl PgPair {
    /// Start the pair, or print a skip line and return `None` when the binaries are missing.
    ///
    /// # Panics
    /// When the binaries exist but the pair cannot start.
    pub fn start_or_skip(test: &str) -> Option<PgPair> {
        let bindir = bindir_or_skip(test)?;
        Some(
            PgPair::start(&bindir)
                .unwrap_or_else(|e| panic!("starting a primary/standby pair: {e}")),
        )
    }

    /// `initdb` a primary, copy it with `pg_basebackup`, start the copy as its synchronous
    /// standby and wait until the primary reports it `sync`.
    ///
    /// # Errors
    /// What failed, with the server log.
    pub fn start(bindir: &Path) -> Result<PgPair, String> {
        let primary = PgCluster::start_with(bindir, &["wal_keep_size=64MB"])?;
        primary.set_sync_standbys(Some("*"))?;
        let standby = primary.standby()?;
        let pair = PgPair { primary, standby };
        let deadline = Instant::now() + SYNC_TIMEOUT;
        loop {
            let state = pair
                .primary
                .sql("SELECT sync_state FROM pg_stat_replication")
                .unwrap_or_default();
            if state == "sync" {
                return Ok(pair);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the standby did not become synchronous within {SYNC_TIMEOUT:?} \
                     (state {state:?}): {}",
                    pair.standby.server_log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A url naming both nodes, primary first, that only a writable session satisfies (as a
    /// relay is configured for a primary/standby pair).
    pub fn url_of(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{db}?target_session_attrs=read-write",
            self.primary.port(),
            self.standby.port()
        )
    }
}

impl PgCluster {
    /// A streaming-replication standby of this running cluster on a new free port: a
    /// `pg_basebackup -R` copy (it follows this primary as `standby`), started and accepting
    /// read-only connections. The settings the primary was started with are not copied.
    ///
    /// # Errors
    /// What failed, with the standby's log when it did not come up.
    pub fn standby(&self) -> Result<PgCluster, String> {
        let dir = node_dir()?;
        let data = dir.path().join("data");
        let mut backup = Command::new(self.bindir.join("pg_basebackup"));
        backup.args(self.client_args()).arg("-D").arg(&data).args([
            "-X",
            "stream",
            "-R",
            "--no-sync",
        ]);
        run_as_cluster_user(&mut backup, "pg_basebackup")?;
        // The walreceiver's application_name: what `synchronous_standby_names` matches.
        let mut standby = PgCluster::node(
            &self.bindir,
            dir,
            ["cluster_name=standby".to_string()].into_iter(),
        )?;
        standby.launch()?;
        Ok(standby)
    }

    /// Stop the server at once, without a checkpoint (`pg_ctl stop -m immediate`): every
    /// session is cut, as when the machine is lost; the data dir stays.
    pub fn stop_immediate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = as_cluster_user(&mut self.pg_ctl(&["stop", "-m", "immediate", "-w", "-t", "10"]))
            .status();
        if !matches!(child.try_wait(), Ok(Some(_))) {
            let _ = child.kill();
        }
        let _ = child.wait();
    }

    /// Promote this standby to a primary (`pg_ctl promote -w`: returns once it accepts writes).
    ///
    /// # Errors
    /// `pg_ctl`'s output when the promotion failed or timed out.
    pub fn promote(&self) -> Result<(), String> {
        let t = SYNC_TIMEOUT.as_secs().to_string();
        let out = as_cluster_user(&mut self.pg_ctl(&["promote", "-w", "-t", &t]))
            .output()
            .map_err(|e| format!("running pg_ctl promote: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl promote: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// Set (`Some`) or lift (`None`: set to `''`) `synchronous_standby_names` with `ALTER
    /// SYSTEM` and reload: commits waiting for a standby go on at once when it is lifted. Set,
    /// not `RESET`: a reset leaves a value from `postgresql.conf` in force.
    ///
    /// # Errors
    /// psql's stderr.
    pub fn set_sync_standbys(&self, names: Option<&str>) -> Result<(), String> {
        let set = format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{}'",
            names.unwrap_or("")
        );
        self.sql(&set)?;
        self.sql("SELECT pg_reload_conf()").map(|_| ())
    }

    /// Run `sql` with `psql` on the `postgres` database; unaligned, tuples only, trimmed.
    ///
    /// # Errors
    /// psql's stderr.
    pub fn sql(&self, sql: &str) -> Result<String, String> {
        psql(&self.bindir, &self.url(), sql)
    }

    /// `pg_ctl -D <data> args...` (not yet run as the cluster's user).
    fn pg_ctl(&self, args: &[&str]) -> Command {
        let mut c = Command::new(self.bindir.join("pg_ctl"));
        c.arg("-D")
            .arg(self.dir.path().join("data"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}
