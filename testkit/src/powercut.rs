//! A `powercut` mount for tests (the relay's durability tests and powercut's own): mounts a fresh
//! backing directory on a fresh mount point, cuts the power on demand (SIGUSR1, then waits for
//! powercut to say the cut is complete), injects disk faults on demand (its `--faults` control
//! file, then SIGUSR2) and unmounts on drop.
//!
//! Self-contained (no other `common` item), so powercut's own test includes it by path.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long a mount or a cut may take to be reported.
const WAIT: Duration = Duration::from_secs(20);

/// Fails (never skips) when this machine cannot mount FUSE: the durability tests on powercut
/// are part of the suite, and `.ci/run` installs fuse3.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: powercut's tests need FUSE (load the fuse module)"
    );
    let fusermount = ["/usr/bin/fusermount3", "/bin/fusermount3"]
        .iter()
        .any(|p| Path::new(p).exists());
    assert!(
        fusermount,
        "fusermount3 is missing: install the fuse3 package (.ci/run does)"
    );
}

/// A running `powercut mount`. Unmounted (SIGTERM) on drop.
pub struct Powercut {
    child: Option<Child>,
    lines: mpsc::Receiver<String>,
    mnt: PathBuf,
    backing: PathBuf,
    stderr: PathBuf,
    faults: PathBuf,
    cuts: u64,
    _dir: tempfile::TempDir,
}

impl Powercut {
    /// Mounts a fresh powercut filesystem with `bin` and extra arguments (`--torn`, `--seed N`).
    pub fn mount(bin: &Path, args: &[&str]) -> Powercut {
        require_fuse();
        assert!(
            bin.exists(),
            "{} missing: run `cargo test --workspace` (or `cargo build -p powercut`)",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let (backing, mnt) = (dir.path().join("backing"), dir.path().join("mnt"));
        std::fs::create_dir(&backing).expect("backing dir");
        std::fs::create_dir(&mnt).expect("mount point");
        let stderr = dir.path().join("powercut.stderr");
        let faults = dir.path().join("faults");
        std::fs::write(&faults, "").expect("faults file");
        let mut child = Command::new(bin)
            .arg("mount")
            .arg(&backing)
            .arg(&mnt)
            .arg("--faults")
            .arg(&faults)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(
                std::fs::File::create(&stderr).expect("stderr file"),
            ))
            .spawn()
            .expect("spawn powercut");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut pc = Powercut {
            child: Some(child),
            lines,
            mnt,
            backing,
            stderr,
            faults,
            cuts: 0,
            _dir: dir,
        };
        pc.expect_line("powercut: serving");
        pc
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// What powercut wrote to stderr so far.
    pub fn stderr_log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    fn expect_line(&mut self, prefix: &str) -> String {
        match self.lines.recv_timeout(WAIT) {
            Ok(line) if line.starts_with(prefix) => line,
            other => panic!(
                "powercut: expected {prefix:?}, got {other:?}; stderr:\n{}",
                self.stderr_log()
            ),
        }
    }

    fn signal(&self, sig: libc::c_int) {
        let pid = self.child.as_ref().expect("powercut running").id();
        // SAFETY: plain kill(2) on our own child's pid.
        unsafe {
            libc::kill(pid as libc::pid_t, sig);
        }
    }

    /// Cuts the power: on return the mount shows only what was durable. Returns how many
    /// bytes written were not synced when it came (dropped, or with `--torn` partly kept).
    pub fn cut(&mut self) -> u64 {
        self.signal(libc::SIGUSR1);
        self.cuts += 1;
        let want = format!("powercut: cut {}:", self.cuts);
        let line = self.expect_line(&want);
        line.strip_prefix(&want)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("powercut: no byte count in {line:?}"))
    }

    /// Injects the disk faults `spec` names (powercut's control-file lines, e.g. `fsync-eio
    /// all`; empty: none) and waits until powercut has loaded them.
    pub fn set_faults(&mut self, spec: &str) {
        std::fs::write(&self.faults, spec).expect("write the faults file");
        self.signal(libc::SIGUSR2);
        self.expect_line("powercut: faults ");
    }

    /// Unmounts cleanly (SIGTERM) and returns the backing directory, which then holds the files.
    pub fn unmount(&mut self) -> PathBuf {
        if let Some(mut child) = self.child.take() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let deadline = std::time::Instant::now() + WAIT;
            loop {
                if let Ok(Some(st)) = child.try_wait() {
                    assert!(st.success(), "powercut exit {st}: {}", self.stderr_log());
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    detach(&self.mnt);
                    panic!("powercut did not unmount within {WAIT:?}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.backing.clone()
    }
}

/// Lazy unmount (for a powercut that did not exit by itself).
fn detach(mnt: &Path) {
    use std::os::unix::ffi::OsStrExt as _;
    if let Ok(c) = std::ffi::CString::new(mnt.as_os_str().as_bytes()) {
        // SAFETY: umount2 on a NUL-terminated path we own.
        unsafe {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}

impl Drop for Powercut {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: plain kill(2) on our own child's pid.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            for _ in 0..250 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            detach(&self.mnt);
        }
    }
}
