//! File modes under a directory: what the owner-only rules of the relay and host stores are
//! checked against.

use std::path::{Path, PathBuf};

/// Every entry under `dir` (itself included) as (path, permission bits), links not followed.
pub fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(p) = todo.pop() {
        let m = std::fs::symlink_metadata(&p).expect("stat");
        out.push((p.clone(), m.permissions().mode() & 0o777));
        if m.is_dir() {
            for e in std::fs::read_dir(&p).expect("read_dir") {
                todo.push(e.expect("entry").path());
            }
        }
    }
    out
}

/// Entries other users may access.
pub fn reachable_by_others(dir: &Path) -> Vec<(PathBuf, u32)> {
    modes(dir)
        .into_iter()
        .filter(|(_, mode)| mode & 0o077 != 0)
        .collect()
}
