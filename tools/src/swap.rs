//! Swapping a freshly built store directory into place.
//!
//! On Linux the swap is one `renameat2(RENAME_EXCHANGE)`: the store path always names a whole
//! store, the old or the new one, even across a crash. Where the file system cannot exchange,
//! two renames are used and a failed second rename is undone.

use std::ffi::CString;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::fail::{Code, Failure};

/// The store lock file (the keyspace's contract: `flock` on `DIR/relay.lock`, pid inside).
const LOCK_FILE: &str = "relay.lock";

/// A held flock on a store's lock file: while it is held no relay can open that store.
#[derive(Debug)]
pub(crate) struct HeldLock {
    _file: File,
}

/// Take the store lock of `dir` for the moment of the swap, so a relay started after the old
/// store was closed cannot open it while it is being moved away.
///
/// # Errors
/// `InUse` when something took the store meanwhile; `Store` on I/O errors.
pub(crate) fn hold_lock(dir: &Path) -> Result<HeldLock, Failure> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Failure::io("cannot open lock file", &path, &e))?;
    // SAFETY: flock on a valid file descriptor we own; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        let holder = holder.trim();
        let who = if holder.is_empty() {
            "another process".to_string()
        } else {
            format!("pid {holder}")
        };
        return Err(Failure::new(
            Code::InUse,
            format!(
                "store {} was taken by {who} during the restore; nothing was swapped",
                dir.display()
            ),
        ));
    }
    Ok(HeldLock { _file: file })
}

fn cstr(p: &Path) -> Result<CString, Failure> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| {
        Failure::new(
            Code::Store,
            format!("path {} contains a NUL byte", p.display()),
        )
    })
}

/// Exchange two existing directories atomically. `Ok(false)` when the file system cannot.
fn exchange(a: &Path, b: &Path) -> Result<bool, Failure> {
    let (ca, cb) = (cstr(a)?, cstr(b)?);
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD is always a valid dirfd.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EINVAL) | Some(libc::ENOSYS) | Some(libc::ENOTSUP) => Ok(false),
        _ => Err(Failure::io("cannot swap the restored store into", b, &err)),
    }
}

/// Put `new` at `dir`, moving the existing `dir` to `keep` (which must not exist). Returns where
/// the old store ended up: `keep`, or `new` in the rare case that it could be exchanged but not
/// renamed afterwards (a warning says so).
///
/// # Errors
/// I/O failures; on failure `dir` still holds the old store and `new` the restored one.
pub(crate) fn replace(dir: &Path, new: &Path, keep: &Path) -> Result<PathBuf, Failure> {
    if exchange(new, dir)? {
        // `new` now names the old store.
        if let Err(e) = std::fs::rename(new, keep) {
            eprintln!(
                "relay-tool: warning: the old store stays at {} (cannot rename it to {}: {e})",
                new.display(),
                keep.display()
            );
            return Ok(new.to_path_buf());
        }
        return Ok(keep.to_path_buf());
    }
    std::fs::rename(dir, keep)
        .map_err(|e| Failure::io("cannot move the old store aside to", keep, &e))?;
    if let Err(e) = std::fs::rename(new, dir) {
        let undo = std::fs::rename(keep, dir);
        let mut f = Failure::io("cannot move the restored store to", dir, &e);
        if undo.is_err() {
            f.msg.push_str(&format!(
                " (and the old store is left at {})",
                keep.display()
            ));
        }
        return Err(f);
    }
    Ok(keep.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_swaps_and_keeps_the_old_directory() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("store");
        let new = t.path().join("store.new");
        let keep = t.path().join("store.old");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("which"), "old").unwrap();
        std::fs::create_dir(&new).unwrap();
        std::fs::write(new.join("which"), "new").unwrap();
        assert_eq!(replace(&dir, &new, &keep).unwrap(), keep);
        assert_eq!(std::fs::read_to_string(dir.join("which")).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(keep.join("which")).unwrap(), "old");
        assert!(!new.exists());
    }

    #[test]
    fn a_held_lock_refuses_a_second_holder() {
        let t = tempfile::tempdir().unwrap();
        let first = hold_lock(t.path()).unwrap();
        let second = hold_lock(t.path()).unwrap_err();
        assert_eq!(second.code, Code::InUse);
        drop(first);
        hold_lock(t.path()).unwrap();
    }
}
