//! The store's own lock file (`DIR/relay.lock`): one process owns a store.
//!
//! `flock(LOCK_EX | LOCK_NB)` on an open file description, so a second opener fails both in
//! another process and in this one. The holder writes its pid into the file so the refusal can
//! name it. The lock goes with the file descriptor (also when the process dies).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use relay_store::{Result, StoreError};

/// The lock file's name inside the store directory.
pub(crate) const LOCK_FILE: &str = "relay.lock";

/// A held store lock; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct StoreLock {
    file: File,
}

/// Most bytes we read from a lock file when naming its holder.
const MAX_PID_BYTES: u64 = 32;

impl StoreLock {
    /// Take the lock of the store in `dir`.
    ///
    /// # Errors
    /// `Locked` naming the holder's pid (when it wrote one), `Io` otherwise.
    pub(crate) fn acquire(dir: &Path) -> Result<StoreLock> {
        let path = dir.join(LOCK_FILE);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|source| StoreError::Io {
                context: format!("opening lock file {}", path.display()),
                source,
            })?;
        // SAFETY: flock on a valid, owned file descriptor; no memory is shared with the kernel.
        #[allow(unsafe_code)]
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EWOULDBLOCK) {
                return Err(StoreError::Locked {
                    path: dir.to_path_buf(),
                    pid: read_pid(&mut file),
                });
            }
            return Err(StoreError::Io {
                context: format!("locking {}", path.display()),
                source: err,
            });
        }
        write_pid(&mut file).map_err(|source| StoreError::Io {
            context: format!("writing pid to {}", path.display()),
            source,
        })?;
        Ok(StoreLock { file })
    }

    /// The lock file path (for messages).
    #[allow(dead_code)]
    pub(crate) fn path(dir: &Path) -> PathBuf {
        dir.join(LOCK_FILE)
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        // Clear our pid so a stale file names nobody; the lock itself goes with the descriptor.
        let _ = self.file.set_len(0);
    }
}

fn write_pid(file: &mut File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    file.write_all(std::process::id().to_string().as_bytes())?;
    file.sync_data()
}

/// The pid a holder wrote, if the file holds a plausible one.
fn read_pid(file: &mut File) -> Option<u32> {
    let mut buf = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.take(MAX_PID_BYTES).read_to_string(&mut buf).ok()?;
    buf.trim().parse().ok()
}
