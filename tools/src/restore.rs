//! `relay-tool restore`: verify the whole backup, build a new store beside the old one (new
//! epoch, logged by the keyspace), check the relay key, then swap the directories atomically and
//! keep (or remove) the old store. Nothing under the store path changes until the swap.
//! Into PostgreSQL (`--store postgres://...`): the database must hold no relay yet; the restore
//! is one transaction there (new epoch, logged), so a failure leaves it empty.

use std::path::{Path, PathBuf};

use mbx_relay::store_open::{restore_into, verify_backup_file as verify_backup, StoreSpec};
use relay_core::KEY_FILE;
use relay_store::{Clock, Key32, SharedStore, SystemClock};
use relay_wire::keys::{fingerprint, SigningKey};

use crate::access;
use crate::fail::{Code, Failure};
use crate::files::{copy_key_file, fsync_dir, parent_of, utc_stamp, with_suffix};
use crate::progress;
use crate::show;
use crate::swap;

/// Largest key file we read (a base64 seed or a small JSON object).
const MAX_KEY_FILE: u64 = 4096;

/// What `restore` was asked to do.
pub(crate) struct Args<'a> {
    pub target: &'a access::Target,
    pub file: &'a Path,
    pub discard_old: bool,
    pub accept_other_key: bool,
    /// One JSON object instead of the text report.
    pub json: bool,
}

/// What is at the store path now.
enum Old {
    /// Nothing: a restore into a fresh directory.
    Absent,
    /// An empty directory (made by hand for the restore).
    Empty,
    /// A store or a directory holding only a relay key. A store that opens is held open here
    /// (locked against a relay); one that does not (damaged, newer schema) is locked by `lock`.
    Present {
        store: Option<SharedStore>,
        lock: Option<swap::HeldLock>,
    },
}

/// Run the command.
///
/// # Errors
/// `Backup` for a damaged file or another relay's key, `InUse` while a relay holds the store,
/// `Store` for I/O failures (the old store is then untouched).
pub(crate) fn run(a: &Args) -> Result<(), Failure> {
    let store_dir = match &a.target.spec {
        StoreSpec::Dir(d) => d.clone(),
        StoreSpec::Postgres(_) => return into_database(a),
    };
    let dir = absolute(&store_dir)?;
    let size = std::fs::metadata(a.file)
        .map(|m| show::human_bytes(m.len()))
        .unwrap_or_default();
    let bar = progress::step(format!("verifying {} ({size})", a.file.display()));
    let verified = verify_backup(a.file);
    bar.finish_and_clear();
    let summary = verified.map_err(|e| Failure::from(e).context("refusing to restore"))?;

    let old = inspect(&dir)?;
    let pinned = match &old {
        Old::Present { store: Some(s), .. } => s.meta()?.relay_pubkey,
        _ => None,
    };
    let key_file = dir.join(KEY_FILE);
    let file_key = read_key_file(&key_file)?;
    let key_ok = check_key(summary.relay_pubkey, pinned, file_key, a.accept_other_key)?;

    let stamp = utc_stamp(SystemClock.now_ms());
    let tmp = with_suffix(
        &dir,
        &format!(".restore-tmp-{}-{stamp}", std::process::id()),
    );
    let bar = progress::step(format!(
        "building the restored store from {size} in {}",
        tmp.display()
    ));
    let built = restore_into(a.file, &StoreSpec::Dir(tmp.clone()));
    bar.finish_and_clear();
    let (restored, epoch) = match built {
        Ok(v) => v,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(Failure::from(e).context("restore failed (the store is untouched)"));
        }
    };
    let cleanup = |f: Failure| {
        let _ = std::fs::remove_dir_all(&tmp);
        f
    };
    let copied_key = file_key.is_some() && key_ok;
    if copied_key {
        copy_key_file(&key_file, &tmp.join(KEY_FILE)).map_err(cleanup)?;
    }
    private_dir(&tmp).map_err(cleanup)?;
    fsync_dir(&tmp).map_err(cleanup)?;

    let had_old = matches!(old, Old::Present { .. });
    let kept = swap_in(&dir, &tmp, old, &stamp, a.discard_old).map_err(cleanup)?;
    fsync_dir(&parent_of(&dir))?;

    if a.json {
        let mut v = show::summary_json(&restored);
        v["file"] = a.file.display().to_string().into();
        v["store"] = dir.display().to_string().into();
        v["new_epoch"] = epoch.clone().into();
        v["old_store_kept"] = kept.as_ref().map(|k| k.display().to_string()).into();
        v["relay_key_copied"] = copied_key.into();
        println!("{v}");
        return Ok(());
    }
    println!("restored {} into {}", a.file.display(), dir.display());
    print!("{}", show::summary(&restored));
    println!("new epoch       {epoch} (hosts will re-push and re-pull)");
    match kept {
        Some(k) => println!("old store kept  {}", k.display()),
        None if had_old => println!("old store       removed (--discard-old)"),
        None => {}
    }
    if file_key.is_some() && !copied_key {
        let want = summary
            .relay_pubkey
            .as_ref()
            .map(fingerprint)
            .unwrap_or_default();
        println!(
            "relay.key       NOT copied: it is another relay's key; start the relay with the key {want} \
             (relay.key or MBX_RELAY_KEY)"
        );
    } else if copied_key {
        println!("relay.key       copied into the restored store (0600)");
    } else if let Some(k) = summary.relay_pubkey.as_ref() {
        println!("relay key       none in {}: start the relay with the key {} (relay.key or MBX_RELAY_KEY)", dir.display(), fingerprint(k));
    }
    Ok(())
}

/// Restore into a new, empty PostgreSQL database (the target's `--store`). The relay key is
/// checked against `relay.key` in `--store-dir` when one is there, as for a directory.
fn into_database(a: &Args) -> Result<(), Failure> {
    let bar = progress::step(format!("verifying {}", a.file.display()));
    let verified = verify_backup(a.file);
    bar.finish_and_clear();
    let summary = verified.map_err(|e| Failure::from(e).context("refusing to restore"))?;
    let file_key = match &a.target.relay_dir {
        Some(d) => read_key_file(&d.join(KEY_FILE))?,
        None => None,
    };
    check_key(summary.relay_pubkey, None, file_key, a.accept_other_key)?;
    let bar = progress::step(format!("restoring into {}", a.target.spec));
    let built = restore_into(a.file, &a.target.spec);
    bar.finish_and_clear();
    let (restored, epoch) = built.map_err(|e| {
        Failure::from(e).context(&format!(
            "restore into {} failed (nothing was committed)",
            a.target.spec
        ))
    })?;
    if a.json {
        let mut v = show::summary_json(&restored);
        v["file"] = a.file.display().to_string().into();
        v["store"] = a.target.spec.to_string().into();
        v["new_epoch"] = epoch.clone().into();
        println!("{v}");
        return Ok(());
    }
    println!("restored {} into {}", a.file.display(), a.target.spec);
    print!("{}", show::summary(&restored));
    println!("new epoch       {epoch} (hosts will re-push and re-pull)");
    if let Some(k) = summary.relay_pubkey.as_ref() {
        println!(
            "relay key       start every relay on it with the key {} (relay.key or MBX_RELAY_KEY)",
            fingerprint(k)
        );
    }
    Ok(())
}

/// The store path made absolute, without a trailing slash (so siblings can be named from it).
fn absolute(dir: &Path) -> Result<PathBuf, Failure> {
    if dir.exists() {
        return std::fs::canonicalize(dir).map_err(|e| Failure::io("cannot resolve", dir, &e));
    }
    let name = dir.file_name().ok_or_else(|| {
        Failure::new(
            Code::Usage,
            format!("{} is not a usable store path", dir.display()),
        )
    })?;
    let parent = parent_of(dir);
    let parent = std::fs::canonicalize(&parent)
        .map_err(|e| Failure::io("cannot use parent directory", &parent, &e))?;
    Ok(parent.join(name))
}

/// What lives at `dir`; a store is opened (and so locked) to read its pinned key.
fn inspect(dir: &Path) -> Result<Old, Failure> {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.map(|e| e.file_name()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Failure::io("cannot list", dir, &e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Old::Absent),
        Err(e) => return Err(Failure::io("cannot list", dir, &e)),
    };
    if entries.is_empty() {
        return Ok(Old::Empty);
    }
    if dir.join("db").is_dir() {
        return match access::open_exclusive(&access::Target::dir(dir), "restore") {
            Ok(store) => Ok(Old::Present {
                store: Some(store),
                lock: None,
            }),
            Err(f) if f.code == Code::InUse => Err(f),
            Err(f) => {
                // Replacing a store that no longer opens is what restores are for: lock it
                // against a relay and carry on; its pinned key cannot be checked.
                let lock = swap::hold_lock(dir)?;
                eprintln!(
                    "relay-tool: warning: the current store does not open ({}); restoring over it \
                     without checking its pinned relay key",
                    f.msg
                );
                Ok(Old::Present {
                    store: None,
                    lock: Some(lock),
                })
            }
        };
    }
    let only_key = entries.iter().all(|n| n == KEY_FILE);
    if only_key {
        return Ok(Old::Present {
            store: None,
            lock: None,
        });
    }
    Err(Failure::new(
        Code::Store,
        format!(
            "{} exists but is not a relay store (no db/ inside); refusing to replace it",
            dir.display()
        ),
    ))
}

/// The public key of `DIR/relay.key`, if there is one.
fn read_key_file(path: &Path) -> Result<Option<Key32>, Failure> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Failure::io("cannot read relay key", path, &e)),
    };
    if meta.len() > MAX_KEY_FILE {
        return Err(Failure::new(
            Code::Store,
            format!("relay key {} is not a key file (too large)", path.display()),
        ));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::io("cannot read relay key", path, &e))?;
    let key = SigningKey::from_key_file(text.trim()).map_err(|e| {
        Failure::new(
            Code::Store,
            format!("relay key {} is unusable: {e}", path.display()),
        )
    })?;
    Ok(Some(key.public()))
}

/// Refuse a backup made by another relay key unless accepted. Returns whether the key file (if
/// any) belongs to the backup's relay, i.e. may be copied into the restored store.
fn check_key(
    backup: Option<Key32>,
    pinned: Option<Key32>,
    file: Option<Key32>,
    accept_other: bool,
) -> Result<bool, Failure> {
    let Some(backup) = backup else {
        return Ok(true);
    };
    let mut conflicts = Vec::new();
    if let Some(p) = pinned.filter(|p| *p != backup) {
        conflicts.push(format!(
            "the store is pinned to relay key {}",
            fingerprint(&p)
        ));
    }
    if let Some(k) = file.filter(|k| *k != backup) {
        conflicts.push(format!("relay.key is relay key {}", fingerprint(&k)));
    }
    if conflicts.is_empty() {
        return Ok(true);
    }
    if accept_other {
        return Ok(file.is_none_or(|k| k == backup));
    }
    Err(Failure::new(
        Code::Backup,
        format!(
            "refusing to restore: the backup was made by relay key {}, but {}; pass --accept-other-key to restore it anyway",
            fingerprint(&backup),
            conflicts.join(" and ")
        ),
    ))
}

/// Owner-only store directory.
fn private_dir(dir: &Path) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| Failure::io("cannot set permissions of", dir, &e))
}

/// Put the new store at `dir`; returns where the old one is kept.
fn swap_in(
    dir: &Path,
    new: &Path,
    old: Old,
    stamp: &str,
    discard: bool,
) -> Result<Option<PathBuf>, Failure> {
    match old {
        Old::Absent => {
            std::fs::rename(new, dir)
                .map_err(|e| Failure::io("cannot move the restored store to", dir, &e))?;
            Ok(None)
        }
        Old::Empty => {
            std::fs::remove_dir(dir)
                .map_err(|e| Failure::io("cannot replace empty directory", dir, &e))?;
            std::fs::rename(new, dir)
                .map_err(|e| Failure::io("cannot move the restored store to", dir, &e))?;
            Ok(None)
        }
        Old::Present { store, lock } => {
            if let Some(s) = store {
                access::close(s)?;
            }
            // From the close to the swap, hold the lock ourselves so no relay can slip in.
            let lock = match lock {
                Some(held) => held,
                None => swap::hold_lock(dir)?,
            };
            let keep = unused(&with_suffix(dir, &format!(".pre-restore-{stamp}")));
            let keep = swap::replace(dir, new, &keep)?;
            drop(lock);
            if discard {
                std::fs::remove_dir_all(&keep).map_err(|e| {
                    Failure::io("restored, but cannot remove the old store", &keep, &e)
                })?;
                return Ok(None);
            }
            Ok(Some(keep))
        }
    }
}

/// `path`, or `path-2`, `path-3`, ... whichever does not exist yet.
fn unused(path: &Path) -> PathBuf {
    let mut candidate = path.to_path_buf();
    let mut n = 2;
    while candidate.exists() && n < 1000 {
        candidate = with_suffix(path, &format!("-{n}"));
        n += 1;
    }
    candidate
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_rules() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        assert!(
            check_key(None, Some(a), Some(b), false).unwrap(),
            "unpinned backup"
        );
        assert!(check_key(Some(a), Some(a), Some(a), false).unwrap());
        assert!(
            check_key(Some(a), None, None, false).unwrap(),
            "fresh directory"
        );
        let e = check_key(Some(a), Some(b), None, false).unwrap_err();
        assert_eq!(e.code, Code::Backup);
        assert!(e.msg.contains("--accept-other-key"));
        assert_eq!(
            check_key(Some(a), None, Some(b), false).unwrap_err().code,
            Code::Backup
        );
        assert!(
            !check_key(Some(a), Some(b), Some(b), true).unwrap(),
            "accepted, key not copied"
        );
        assert!(
            check_key(Some(a), Some(b), Some(a), true).unwrap(),
            "accepted, key matches the backup"
        );
    }
}
