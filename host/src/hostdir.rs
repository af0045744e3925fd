//! The host directory (`--dir`): `init` creates it owner-only (0700, whatever the umask); every
//! other command requires a directory `init` made (it never creates one: a mistyped `--dir` or a
//! relay's store is refused by name) that other local users cannot reach, with the relay's own
//! file-mode rules ([`relay_os::private`]); and the commands printed as next steps name it.

use std::os::unix::fs::{DirBuilderExt as _, FileTypeExt as _};
use std::path::{Path, PathBuf};

use super::HostError;
use relay_os::private::{require_private_or, Kind};

/// The host key file in the host directory (`identity`).
pub(crate) const HOST_KEY: &str = "host.key";
/// The enc key file in the host directory (`identity`).
pub(crate) const ENC_KEY: &str = "enc.key";
/// The store engine's directory inside the host directory.
pub(crate) const STATE: &str = "state";
/// A relay's key file: a directory holding one is a relay's store, not a host.
const RELAY_KEY: &str = "relay.key";
/// Bound on the entries `host doctor` looks at (a host directory holds a few dozen).
const MAX_WALK: usize = 100_000;
/// What a loose mode makes a command do instead.
const REFUSING: &str = "refusing to use it";

/// Create `dir` for `init`, mode 0700; an existing directory must be owner-only and hold no
/// relay store.
///
/// # Errors
/// The directory cannot be created, is reachable by other users, or holds a relay's store.
pub(crate) fn create(dir: &Path) -> Result<(), HostError> {
    if dir.exists() {
        if dir.join(RELAY_KEY).exists() {
            return Err(HostError::Usage(format!(
                "{} holds a relay's store; give `host init` a directory of its own",
                dir.display()
            )));
        }
        return private(dir, Kind::Dir, "host directory");
    }
    // Each new level's name fsync'd in its parent: a power cut after `init` answered took the
    // whole host directory (tests/host: the power-cut windows).
    relay_os::durable_dir::create_dir_all_durable(dir, 0o700)
        .map_err(|e| HostError::Store(format!("cannot create {}: {e}", dir.display())))
}

/// Refuse `dir` unless `init` made a host there and other users cannot reach the directory,
/// its store directory or its key files (each refusal names the `chmod` that fixes it).
///
/// # Errors
/// [`HostError::Usage`] for a directory that holds no host; [`HostError::Store`] for a loose mode.
pub(crate) fn require(dir: &Path) -> Result<(), HostError> {
    require_host(dir)?;
    private(dir, Kind::Dir, "host directory")?;
    let state = dir.join(STATE);
    if state.exists() {
        private(&state, Kind::Dir, "host store directory")?;
    }
    for f in [HOST_KEY, ENC_KEY] {
        let p = dir.join(f);
        if p.exists() {
            private(&p, Kind::File, "host key file")?;
        }
    }
    Ok(())
}

/// `dir/state`, created 0700 (explicitly, whatever the umask) when it is not there yet.
///
/// # Errors
/// It cannot be created.
pub(crate) fn create_state(dir: &Path) -> Result<PathBuf, HostError> {
    let state = dir.join(STATE);
    match std::fs::DirBuilder::new().mode(0o700).create(&state) {
        // The new name fsync'd in the host directory: fjall fsyncs inside `state`, never its
        // name, and a power cut took the whole store with it.
        Ok(()) => relay_os::durable_dir::sync_dir(dir)
            .map(|()| state)
            .map_err(|e| HostError::Store(format!("cannot fsync {}: {e}", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(state),
        Err(e) => Err(HostError::Store(format!(
            "cannot create {}: {e}",
            state.display()
        ))),
    }
}

/// Refuse `dir` unless `init` made a host there (its `host.key`); nothing is created.
///
/// # Errors
/// [`HostError::Usage`] naming what `dir` is instead and the `init` command.
pub(crate) fn require_host(dir: &Path) -> Result<(), HostError> {
    if !dir.join(HOST_KEY).is_file() {
        let why = if !dir.exists() {
            "no such directory"
        } else if dir.join(RELAY_KEY).exists() {
            "it holds a relay's store"
        } else {
            "it holds no host.key"
        };
        return Err(HostError::Usage(format!(
            "{} is not a host directory ({why}); check --dir, or create a host there: {}",
            dir.display(),
            command(dir, "init --name NAME")
        )));
    }
    Ok(())
}

fn private(path: &Path, kind: Kind, what: &str) -> Result<(), HostError> {
    require_private_or(path, kind, what, REFUSING).map_err(HostError::Store)
}

/// For `host doctor`: how many entries under `dir` (itself included; links and sockets are
/// not checked, links not followed) were looked at, how many of them other users can reach, and the refusals
/// of the first `max_shown` of those (each naming its `chmod`).
pub(crate) fn loose_entries(dir: &Path, max_shown: usize) -> (usize, usize, Vec<String>) {
    let (mut seen, mut count, mut shown) = (0, 0, Vec::new());
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        if seen >= MAX_WALK {
            break;
        }
        seen += 1;
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        let kind = meta.file_type();
        if kind.is_symlink() || kind.is_socket() {
            continue;
        }
        let check = if kind.is_dir() { Kind::Dir } else { Kind::File };
        if let Err(e) = require_private_or(&p, check, "entry", "fix it") {
            count += 1;
            if shown.len() < max_shown {
                shown.push(e);
            }
        }
        if kind.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                todo.extend(entries.filter_map(Result::ok).map(|e| e.path()));
            }
        }
    }
    (seen, count, shown)
}

/// `mbx-relay host --dir DIR <rest>`: a command to print as a next step for this host.
pub(crate) fn command(dir: &Path, rest: &str) -> String {
    let d = dir.display().to_string();
    let plain = d
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@=~".contains(&b));
    let d = if plain && !d.is_empty() {
        d
    } else {
        format!("'{}'", d.replace('\'', r"'\''"))
    };
    format!("mbx-relay host --dir {d} {rest}")
}

/// A temporary directory only its owner can reach (tempfile's follow the umask), for unit tests
/// that make a host in it.
#[cfg(test)]
pub(crate) fn private_tempdir() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn commands_name_the_directory_quoted_for_a_shell() {
        assert_eq!(
            command(Path::new("./a"), "sync"),
            "mbx-relay host --dir ./a sync"
        );
        assert_eq!(
            command(Path::new("/tmp/my mail"), "sync"),
            "mbx-relay host --dir '/tmp/my mail' sync"
        );
        assert_eq!(
            command(Path::new("it's"), "sync"),
            r"mbx-relay host --dir 'it'\''s' sync"
        );
    }

    #[test]
    fn only_an_initialised_private_directory_is_a_host() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("h");
        let e = require(&dir).unwrap_err();
        assert!(
            matches!(&e, HostError::Usage(m) if m.contains("no such directory") && m.contains("init --name")),
            "{e}"
        );
        assert!(!dir.exists(), "nothing created");
        create(&dir).unwrap();
        assert_eq!(
            std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert!(matches!(require(&dir), Err(HostError::Usage(_))));
        std::fs::write(dir.join(HOST_KEY), "k").unwrap();
        std::fs::set_permissions(dir.join(HOST_KEY), std::fs::Permissions::from_mode(0o600))
            .unwrap();
        require(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = require(&dir).unwrap_err().to_string();
        assert!(e.contains(&format!("chmod 700 {}", dir.display())), "{e}");
        let (seen, count, shown) = loose_entries(&dir, 10);
        assert_eq!((seen, count), (2, 1), "{shown:?}");
        assert!(shown[0].contains("chmod 700"), "{shown:?}");
    }
}
