//! The backing directory: loaded into both states at mount, and written back from the written
//! state at a clean unmount (SIGTERM: a clean shutdown syncs everything). Regular files and
//! directories only; anything else is refused at load.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use crate::state::{Body, Node, Table, MAX_BYTES, ROOT};

/// Loads `dir` (recursively) into a table; its root is inode 1.
pub(crate) fn load(dir: &Path) -> Result<Table, String> {
    let meta = fs::metadata(dir).map_err(|e| format!("backing {}: {e}", dir.display()))?;
    let mut t = Table::with_root(meta.permissions().mode() as u16 & 0o7777);
    let mut next = ROOT + 1;
    let mut bytes = 0u64;
    let mut todo: Vec<(u64, PathBuf)> = vec![(ROOT, dir.to_path_buf())];
    while let Some((ino, path)) = todo.pop() {
        let rd = fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut entries = BTreeMap::new();
        for e in rd {
            let e = e.map_err(|e| format!("{}: {e}", path.display()))?;
            let m = e
                .metadata()
                .map_err(|err| format!("{}: {err}", e.path().display()))?;
            let perm = m.permissions().mode() as u16 & 0o7777;
            let body = if m.is_dir() {
                todo.push((next, e.path()));
                Body::Dir(BTreeMap::new())
            } else if m.is_file() {
                bytes += m.len();
                if bytes > MAX_BYTES {
                    return Err(format!(
                        "backing {} holds more than {MAX_BYTES} bytes",
                        dir.display()
                    ));
                }
                Body::File(
                    fs::read(e.path()).map_err(|err| format!("{}: {err}", e.path().display()))?,
                )
            } else {
                return Err(format!(
                    "{}: only files and directories are supported",
                    e.path().display()
                ));
            };
            t.nodes.insert(next, Node::new(body, perm));
            entries.insert(e.file_name(), next);
            next += 1;
        }
        if let Some(d) = t.dir_mut(ino) {
            *d = entries;
        }
    }
    Ok(t)
}

/// Replaces the contents of `dir` with `t`: written beside it, then swapped in.
pub(crate) fn save(dir: &Path, t: &Table) -> Result<(), String> {
    let name = dir
        .file_name()
        .ok_or("backing directory has no name")?
        .to_string_lossy()
        .to_string();
    let parent = dir.parent().ok_or("backing directory has no parent")?;
    let fresh = parent.join(format!(".{name}.powercut-new"));
    let old = parent.join(format!(".{name}.powercut-old"));
    let _ = fs::remove_dir_all(&fresh);
    let _ = fs::remove_dir_all(&old);
    write_dir(&fresh, t, ROOT).map_err(|e| format!("{}: {e}", fresh.display()))?;
    fs::rename(dir, &old).map_err(|e| format!("{}: {e}", dir.display()))?;
    fs::rename(&fresh, dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    fs::remove_dir_all(&old).map_err(|e| format!("{}: {e}", old.display()))
}

fn write_dir(path: &Path, t: &Table, ino: u64) -> std::io::Result<()> {
    fs::create_dir(path)?;
    for (name, child) in t.dir(ino).into_iter().flatten() {
        let Some(n) = t.nodes.get(child) else {
            continue;
        };
        let p = path.join(name);
        match &n.body {
            Body::Dir(_) => write_dir(&p, t, *child)?,
            Body::File(d) => fs::write(&p, d)?,
            // A socket is its listener's: nobody listens after an unmount.
            Body::Socket => continue,
        }
        fs::set_permissions(&p, fs::Permissions::from_mode(n.perm.into()))?;
    }
    if let Some(n) = t.nodes.get(&ino) {
        fs::set_permissions(path, fs::Permissions::from_mode(n.perm.into()))?;
    }
    Ok(())
}
