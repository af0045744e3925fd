//! Closed enrolment by list (`--enrol-authority allowlist --enrol-allowlist FILE`,
//! docs/protocol.md §3): only the host keys in an operator's file may enrol. The file is read at
//! start (a bad one stops the start), then again whenever it changes (checked every second) or
//! the relay gets SIGHUP; a reload that fails keeps the list in force and says why in the log.
//! Removing a key stops its new enrolments; an enrolled host keeps working until it is revoked
//! (`relay-tool revoke`).
//!
//! Format: one host key (standard base64, as `mbx-relay host init` prints it) per line, the rest
//! of the line after white space ignored (a name, a note); blank lines and lines starting with
//! `#` are skipped.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use relay_store::Key32;
use relay_wire::keys::parse_pubkey;

use super::authority::{AuthorityRequest, Decision, EnrolmentAuthority, Unavailable};

/// The largest list file read (about 300,000 lines of keys: far beyond any operator's list).
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;
/// Most keys a list holds (bounds its memory).
const MAX_KEYS: usize = 100_000;
/// How often the file is checked for a change.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The reason shown to a key that is not on the list.
pub(crate) const NOT_LISTED_REASON: &str = "this host key is not on the relay's allow-list";

/// What identifies the file's content without reading it: modified time, length, inode.
type Stamp = (Option<SystemTime>, u64, u64);

/// The allow-list authority over one file.
pub struct AllowList {
    path: PathBuf,
    keys: RwLock<Arc<HashSet<Key32>>>,
    seen: Mutex<Option<Stamp>>,
}

impl AllowList {
    /// Read the list from `path`.
    ///
    /// # Errors
    /// The file cannot be read, is too large, or has a line that is not a host key (named).
    pub fn load(path: &Path) -> Result<Arc<AllowList>, String> {
        let stamp = stamp(path);
        let keys = read(path)?;
        Ok(Arc::new(AllowList {
            path: path.to_path_buf(),
            keys: RwLock::new(Arc::new(keys)),
            seen: Mutex::new(stamp),
        }))
    }

    /// Keys on the list now.
    pub fn len(&self) -> usize {
        self.current().len()
    }

    /// Whether the list is empty (nobody may enrol).
    pub fn is_empty(&self) -> bool {
        self.current().is_empty()
    }

    fn current(&self) -> Arc<HashSet<Key32>> {
        self.keys.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Read the file again; on success the new list is in force at once, on failure the old
    /// one stays. Answers the number of keys.
    ///
    /// # Errors
    /// As [`AllowList::load`].
    pub fn reload(&self) -> Result<usize, String> {
        let keys = read(&self.path)?;
        let n = keys.len();
        *self.keys.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
        Ok(n)
    }

    /// Whether the file changed since the last look (and remember how it looks now).
    fn changed(&self) -> bool {
        let now = stamp(&self.path);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        let changed = *seen != now;
        *seen = now;
        changed
    }

    /// Reload and say how it went, in one log line.
    fn log_reload(&self, why: &'static str) {
        match self.reload() {
            Ok(n) => {
                tracing::info!(why, keys = n, file = %self.path.display(), "allow-list reloaded")
            }
            Err(e) => tracing::warn!(
                why,
                "allow-list reload refused, the current list stays: {e}"
            ),
        }
    }

    /// Reload the list whenever its file changes or the process gets SIGHUP, until `stop`.
    ///
    /// # Errors
    /// The SIGHUP handler cannot be installed.
    pub fn spawn_reloader(
        self: Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) -> std::io::Result<tokio::task::JoinHandle<()>> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        Ok(tokio::spawn(async move {
            let mut tick = tokio::time::interval(CHECK_EVERY);
            tick.tick().await; // The first tick is immediate: the list was just loaded.
            loop {
                tokio::select! {
                    _ = stop.changed() => return,
                    _ = hup.recv() => {
                        self.changed();
                        self.log_reload("SIGHUP");
                    }
                    _ = tick.tick() => {
                        if self.changed() {
                            self.log_reload("file changed");
                        }
                    }
                }
            }
        }))
    }
}

impl EnrolmentAuthority for AllowList {
    fn name(&self) -> &str {
        "allowlist"
    }
    fn rank(&self) -> u8 {
        1
    }
    fn authorize(&self, req: &AuthorityRequest<'_>) -> Result<Decision, Unavailable> {
        let listed = parse_pubkey(req.host_pubkey).is_some_and(|k| self.current().contains(&k));
        Ok(if listed {
            Decision::Allow { account: None }
        } else {
            Decision::Deny {
                reason: Some(NOT_LISTED_REASON.into()),
            }
        })
    }
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    std::fs::metadata(path)
        .ok()
        .map(|m| (m.modified().ok(), m.len(), m.ino()))
}

/// The keys of the file at `path`.
fn read(path: &Path) -> Result<HashSet<Key32>, String> {
    use std::io::Read as _;
    let shown = path.display();
    let file = std::fs::File::open(path).map_err(|e| format!("allow-list {shown}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("allow-list {shown}: {e}"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "allow-list {shown}: larger than {MAX_FILE_BYTES} bytes"
        ));
    }
    parse(&text).map_err(|e| format!("allow-list {shown}: {e}"))
}

/// The keys of a list's text (see the module doc for the format).
fn parse(text: &str) -> Result<HashSet<Key32>, String> {
    let mut keys = HashSet::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or_default();
        let key = parse_pubkey(first).ok_or_else(|| {
            let shown: String = first.chars().take(60).collect();
            format!("line {}: {shown:?} is not a host key (base64)", n + 1)
        })?;
        keys.insert(key);
        if keys.len() > MAX_KEYS {
            return Err(format!("more than {MAX_KEYS} keys"));
        }
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_wire::keys::SigningKey;

    fn ask(list: &AllowList, key: &str) -> Decision {
        let req = AuthorityRequest {
            host_name: "h",
            host_pubkey: key,
            owner_fp: "",
            proof: None,
        };
        list.authorize(&req).unwrap()
    }

    #[test]
    fn only_listed_keys_may_enrol_and_a_reload_takes_effect_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allow");
        let (a, b) = (SigningKey::generate(), SigningKey::generate());
        std::fs::write(
            &path,
            format!("# hosts\n\n{} alice laptop\n", a.public_b64()),
        )
        .unwrap();
        let list = AllowList::load(&path).unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(
            ask(&list, &a.public_b64()),
            Decision::Allow { account: None }
        );
        let refused = Decision::Deny {
            reason: Some(NOT_LISTED_REASON.into()),
        };
        assert_eq!(ask(&list, &b.public_b64()), refused);
        assert_eq!(ask(&list, "not a key"), refused);

        std::fs::write(&path, format!("{}\n", b.public_b64())).unwrap();
        assert_eq!(list.reload(), Ok(1));
        assert_eq!(ask(&list, &a.public_b64()), refused);
        assert_eq!(
            ask(&list, &b.public_b64()),
            Decision::Allow { account: None }
        );
    }

    #[test]
    fn a_bad_file_refuses_to_load_and_a_bad_reload_keeps_the_list() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allow");
        let a = SigningKey::generate();
        std::fs::write(&path, "ok\n").unwrap();
        let e = AllowList::load(&path).err().unwrap();
        assert!(e.contains("line 1") && e.contains("not a host key"), "{e}");
        assert!(AllowList::load(&dir.path().join("missing")).is_err());

        std::fs::write(&path, format!("{}\n", a.public_b64())).unwrap();
        let list = AllowList::load(&path).unwrap();
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(list.reload().is_err());
        assert_eq!(
            ask(&list, &a.public_b64()),
            Decision::Allow { account: None }
        );
    }

    #[test]
    fn a_change_of_the_file_is_noticed_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("allow");
        std::fs::write(&path, "").unwrap();
        let list = AllowList::load(&path).unwrap();
        assert!(list.is_empty());
        assert!(!list.changed());
        std::fs::write(&path, format!("{}\n", SigningKey::generate().public_b64())).unwrap();
        assert!(list.changed());
        assert!(!list.changed());
    }
}
