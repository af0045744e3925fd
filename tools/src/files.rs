//! File-system steps that must be crash-safe: write-then-rename with fsyncs, directory checks,
//! key file copies (0600) and UTC stamps for directory names.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use relay_os::private::create_exclusive;

use crate::fail::{Code, Failure};

/// Fail unless `dir` is an existing directory (names the missing one).
pub(crate) fn require_dir(dir: &Path) -> Result<(), Failure> {
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Failure::new(
            Code::Store,
            format!("{} is not a directory", dir.display()),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(Failure::new(
            Code::Store,
            format!("store directory {} does not exist", dir.display()),
        )),
        Err(e) => Err(Failure::io("cannot read store directory", dir, &e)),
    }
}

/// fsync a directory so that renames and creations inside it survive a crash.
pub(crate) fn fsync_dir(dir: &Path) -> Result<(), Failure> {
    relay_os::durable_dir::sync_dir(dir).map_err(|e| Failure::io("cannot fsync directory", dir, &e))
}

/// The directory holding `path` ("." for a bare file name).
pub(crate) fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `path` with `suffix` appended to its file name (`FILE` → `FILE.tmp`).
pub(crate) fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// A file written as `FILE.tmp` and renamed to `FILE` only by [`AtomicFile::commit`]; dropped
/// uncommitted, the temporary file is removed.
pub(crate) struct AtomicFile {
    tmp: PathBuf,
    dest: PathBuf,
    out: Option<BufWriter<File>>,
}

impl AtomicFile {
    /// Create `dest.tmp`, mode 0600, only if nothing is at that path (no existing file is
    /// truncated and no link followed: the destination may be in a directory others can write).
    pub(crate) fn create(dest: &Path) -> Result<AtomicFile, Failure> {
        let tmp = with_suffix(dest, ".tmp");
        let file = create_exclusive(&tmp).map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                Failure::new(
                    Code::Store,
                    format!(
                        "cannot create {}: something is already there (left by an interrupted run? remove it if so)",
                        tmp.display()
                    ),
                )
            } else {
                Failure::io("cannot create", &tmp, &e)
            }
        })?;
        Ok(AtomicFile {
            tmp,
            dest: dest.to_path_buf(),
            out: Some(BufWriter::with_capacity(1 << 20, file)),
        })
    }

    /// The temporary path being written.
    pub(crate) fn tmp_path(&self) -> &Path {
        &self.tmp
    }

    /// Flush and fsync the data (before checking it or renaming it).
    pub(crate) fn sync(&mut self) -> Result<(), Failure> {
        let tmp = self.tmp.clone();
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| Failure::new(Code::Store, "file already closed"))?;
        out.flush()
            .map_err(|e| Failure::io("cannot write", &tmp, &e))?;
        out.get_ref()
            .sync_all()
            .map_err(|e| Failure::io("cannot fsync", &tmp, &e))
    }

    /// fsync, rename `FILE.tmp` to `FILE`, fsync the directory.
    pub(crate) fn commit(mut self) -> Result<(), Failure> {
        self.sync()?;
        self.out = None;
        std::fs::rename(&self.tmp, &self.dest)
            .map_err(|e| Failure::io("cannot rename the finished file to", &self.dest, &e))?;
        // The rename happened: nothing left to clean up even if the directory fsync fails.
        self.tmp = PathBuf::new();
        fsync_dir(&parent_of(&self.dest))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.out.as_mut() {
            Some(out) => out.write(buf),
            None => Err(io::Error::other("file already closed")),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self.out.as_mut() {
            Some(out) => out.flush(),
            None => Ok(()),
        }
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            self.out = None;
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Copy a key file to `dest` (which must not exist) with mode 0600, fsync'd.
pub(crate) fn copy_key_file(src: &Path, dest: &Path) -> Result<(), Failure> {
    let bytes = std::fs::read(src).map_err(|e| Failure::io("cannot read", src, &e))?;
    let mut f = create_exclusive(dest).map_err(|e| Failure::io("cannot create", dest, &e))?;
    f.write_all(&bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| Failure::io("cannot write", dest, &e))
}

/// A compact UTC stamp for file names: `20261129T143927Z`.
pub(crate) fn utc_stamp(ms: u64) -> String {
    let iso = relay_wire::time::iso_ms(ms); // 2026-11-29T14:39:27.123Z
    let base = iso.split('.').next().unwrap_or(&iso);
    let mut out: String = base.chars().filter(|c| *c != '-' && *c != ':').collect();
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_and_parent() {
        assert_eq!(
            with_suffix(Path::new("/a/b.bak"), ".tmp"),
            PathBuf::from("/a/b.bak.tmp")
        );
        assert_eq!(parent_of(Path::new("b.bak")), PathBuf::from("."));
        assert_eq!(parent_of(Path::new("/a/b.bak")), PathBuf::from("/a"));
    }

    #[test]
    fn atomic_file_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.bak");
        let mut f = AtomicFile::create(&dest).unwrap();
        f.write_all(b"hello").unwrap();
        assert!(!dest.exists());
        f.commit().unwrap();
        assert_eq!(std::fs::read(&dest).unwrap(), b"hello");
        assert!(!with_suffix(&dest, ".tmp").exists());

        let dest2 = dir.path().join("dropped.bak");
        let mut g = AtomicFile::create(&dest2).unwrap();
        g.write_all(b"x").unwrap();
        drop(g);
        assert!(!dest2.exists());
        assert!(!with_suffix(&dest2, ".tmp").exists());
    }

    #[test]
    fn key_copies_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("k");
        std::fs::write(&src, "seed").unwrap();
        let dest = dir.path().join("k2");
        copy_key_file(&src, &dest).unwrap();
        assert_eq!(
            std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(copy_key_file(&src, &dest).is_err(), "never overwrites");
    }

    #[test]
    fn a_planted_tmp_file_or_link_is_never_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("out.bak");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, with_suffix(&dest, ".tmp")).unwrap();
        let e = AtomicFile::create(&dest).err().expect("refused");
        assert!(e.msg.contains("already there"), "{}", e.msg);
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }
}
