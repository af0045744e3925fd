//! Directories that a power cut cannot take back: `mkdir` leaves the new name in the parent's
//! page cache, so each directory created here is followed by an fsync of its parent (found by
//! the power-cut tests: a relay's fresh store directory vanished at the first cut).

use std::fs::{DirBuilder, File};
use std::io;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

/// `mkdir -p` with `mode` for each directory it creates, each one's name fsync'd in its parent.
///
/// # Errors
/// A directory cannot be created, or a parent cannot be fsync'd.
pub fn create_dir_all_durable(dir: &Path, mode: u32) -> io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(p) = at.filter(|p| !p.as_os_str().is_empty() && !p.exists()) {
        missing.push(p);
        at = p.parent();
    }
    for d in missing.into_iter().rev() {
        match DirBuilder::new().mode(mode).create(d) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        sync_dir(parent_of(d))?;
    }
    Ok(())
}

/// fsync a directory: the names in it (created, renamed, removed) become durable.
///
/// # Errors
/// It cannot be opened or fsync'd.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory holding `p` (`.` for a bare name).
fn parent_of(p: &Path) -> &Path {
    p.parent()
        .filter(|q| !q.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn creates_every_missing_level_with_the_mode() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b/c");
        create_dir_all_durable(&d, 0o700).unwrap();
        for p in [t.path().join("a"), t.path().join("a/b"), d.clone()] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", p.display());
        }
        create_dir_all_durable(&d, 0o700).unwrap();
    }
}
