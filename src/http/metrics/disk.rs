//! The filesystem a directory store lives on, read with `statvfs(2)` at each scrape: bytes
//! available to the relay's user and the filesystem's size, so "disk filling" can be alerted on
//! from the relay's own metrics (`packaging/prometheus/`). A PostgreSQL store's disk is the
//! database server's: none is reported for it.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::gauge::ConstGauge;

/// Available and total bytes of the filesystem holding `dir` (`None` when it cannot be read).
pub(crate) fn fs_bytes(dir: &Path) -> Option<(u64, u64)> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value for the call to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `st` a valid statvfs to write into.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let unit = st.f_frsize as u64;
    Some((
        (st.f_bavail as u64).saturating_mul(unit),
        (st.f_blocks as u64).saturating_mul(unit),
    ))
}

/// The collector for a directory store.
#[derive(Debug)]
pub(crate) struct StoreDisk {
    pub dir: PathBuf,
}

impl Collector for StoreDisk {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let Some((avail, size)) = fs_bytes(&self.dir) else {
            return Ok(());
        };
        let gauges = [
            (
                "store_fs_avail_bytes",
                "Bytes available to the relay on the filesystem of its store directory",
                avail,
            ),
            (
                "store_fs_size_bytes",
                "Size of the filesystem of the store directory",
                size,
            ),
        ];
        for (name, help, v) in gauges {
            let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
            g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_has_a_filesystem_with_room_within_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let (avail, size) = fs_bytes(dir.path()).unwrap();
        assert!(size > 0 && avail <= size, "{avail} of {size}");
        assert_eq!(fs_bytes(&dir.path().join("missing")), None);
    }
}
