//! Owner-only files: the umask of commands that write the store (the storage engine creates its
//! own files, so a process umask is the one place that covers them all), the start-up refusal
//! of a store directory or key file that other users can reach, and exclusive temporary files.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{
    DirBuilderExt as _, FileTypeExt as _, OpenOptionsExt as _, PermissionsExt as _,
};
use std::path::Path;

/// The umask of `mbx-relay serve` and of relay-tool commands that write a store: every file and
/// directory they create is owner-only (0600 / 0700), whatever the umask they inherited.
pub(crate) const PRIVATE_UMASK: libc::mode_t = 0o077;

/// Permission bits that let users other than the owner reach a file.
const OTHERS: u32 = 0o077;

/// Set the process umask to [`PRIVATE_UMASK`] (process-wide; call before creating files).
pub fn restrict_umask() {
    // SAFETY: umask only replaces the process file-mode creation mask; it cannot fail.
    #[allow(unsafe_code)]
    unsafe {
        libc::umask(PRIVATE_UMASK);
    }
}

/// What [`require_private`] checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A directory (fixed by `chmod 700`).
    Dir,
    /// A file (fixed by `chmod 600`).
    File,
}

/// Refuse `path` when its group or other users have any permission on it.
///
/// # Errors
/// A message naming the mode found and the `chmod` that fixes it, or the I/O error.
pub fn require_private(path: &Path, kind: Kind, what: &str) -> Result<(), String> {
    require_private_or(path, kind, what, "refusing to start")
}

/// [`require_private`] for a check made while running (a TLS key at reload): `refusing` says
/// what the relay does instead of starting.
///
/// # Errors
/// As [`require_private`].
pub fn require_private_or(
    path: &Path,
    kind: Kind,
    what: &str,
    refusing: &str,
) -> Result<(), String> {
    let meta =
        std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & OTHERS == 0 {
        return Ok(());
    }
    let fix = match kind {
        Kind::Dir => "700",
        Kind::File => "600",
    };
    Err(format!(
        "{what} {} is accessible to other users (mode {mode:o}); {refusing}: run `chmod {fix} {}`",
        path.display(),
        path.display()
    ))
}

/// Create `path` for writing, mode 0600, only if nothing is there: never an existing file and
/// never through a symbolic link (`O_CREAT | O_EXCL | O_NOFOLLOW`).
///
/// # Errors
/// `AlreadyExists` when something (a file, a link) is at `path`; other I/O errors.
pub fn create_exclusive(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Remove a socket left by a process that did not shut down cleanly (the relay's admin socket,
/// a host daemon's); refuse to touch anything else.
///
/// # Errors
/// `path` is something other than a socket, or it cannot be removed.
pub fn remove_stale_socket(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => std::fs::remove_file(path),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
    }
}

/// Bind in a fresh 0700 directory, chmod 0600, then rename into place: no window in which the
/// socket exists with the umask's (possibly wider) mode at a reachable path.
///
/// # Errors
/// The private directory or the socket cannot be created, or the rename fails.
pub fn bind_private_socket(
    dir: &Path,
    path: &Path,
) -> io::Result<std::os::unix::net::UnixListener> {
    let private = dir.join(format!(".adm{}", std::process::id()));
    if private.exists() {
        // Ours from an earlier run that had the same pid: only our socket can be inside.
        let _ = std::fs::remove_file(private.join("s"));
        std::fs::remove_dir(&private)?;
    }
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&private)
        .map_err(|e| io::Error::new(e.kind(), format!("creating {}: {e}", private.display())))?;
    let tmp = private.join("s");
    let result = (|| {
        let listener = std::os::unix::net::UnixListener::bind(&tmp).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("binding a socket in {}: {e}", private.display()),
            )
        })?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))?;
        std::fs::rename(&tmp, path)?;
        Ok(listener)
    })();
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_dir(&private);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_files_are_owner_only_and_never_reuse_a_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.tmp");
        drop(create_exclusive(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & OTHERS, 0, "{mode:o}");
        let again = create_exclusive(&path).unwrap_err();
        assert_eq!(again.kind(), io::ErrorKind::AlreadyExists);
        // A planted link (even a dangling one) is not followed.
        let target = dir.path().join("victim");
        let link = dir.path().join("link.tmp");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_exclusive(&link).is_err());
        assert!(!target.exists(), "the link was not followed");
    }

    #[test]
    fn loose_modes_are_refused_naming_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("relay.key");
        std::fs::write(&key, "x").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = require_private(&key, Kind::File, "relay key").unwrap_err();
        assert!(e.contains(&format!("chmod 600 {}", key.display())), "{e}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        require_private(&key, Kind::File, "relay key").unwrap();
        let sub = dir.path().join("store");
        std::fs::create_dir(&sub).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o750)).unwrap();
        let e = require_private(&sub, Kind::Dir, "store directory").unwrap_err();
        assert!(e.contains(&format!("chmod 700 {}", sub.display())), "{e}");
    }
}
