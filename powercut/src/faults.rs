//! Faults a disk really makes, injected on demand: a delay before each fsync completes (so a
//! cut lands between a write and its sync), fsync failing with EIO (the unsynced data dropped,
//! as Linux drops the pages whose writeback failed), EIO on a range of a named file's reads,
//! and ENOSPC once the files hold a chosen size. Set at mount (`--fsync-delay-ms`) or from a
//! control file read at each SIGUSR2 (`--faults FILE`), one fault a line:
//!
//! ```text
//! fsync-delay-ms 20
//! fsync-eio all        (or a count: the next N fsyncs of files fail)
//! read-eio NAME FROM TO
//! enospc BYTES
//! ```
//!
//! A file without a line clears that fault; an empty file clears all (the delay included).

use std::time::Duration;

/// The faults in force.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Faults {
    /// How long each fsync of a file or directory waits before it takes effect.
    pub(crate) fsync_delay: Duration,
    /// Fsyncs of files still to fail with EIO (`u64::MAX`: every one).
    pub(crate) fsync_eio: u64,
    /// Reads of a file of this name overlapping `[from, to)` fail with EIO.
    pub(crate) read_eio: Option<(String, u64, u64)>,
    /// Writes that would make the files hold more than this many bytes fail with ENOSPC.
    pub(crate) enospc_at: Option<u64>,
}

impl Faults {
    /// Parse the control file's text.
    ///
    /// # Errors
    /// The line that is not one of the faults above.
    pub(crate) fn parse(text: &str) -> Result<Faults, String> {
        let mut f = Faults::default();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let words: Vec<&str> = line.split_whitespace().collect();
            let num = |i: usize| -> Result<u64, String> {
                words
                    .get(i)
                    .and_then(|w| w.parse().ok())
                    .ok_or_else(|| format!("faults: a number expected in {line:?}"))
            };
            match words[0] {
                "fsync-delay-ms" => f.fsync_delay = Duration::from_millis(num(1)?),
                "fsync-eio" if words.get(1) == Some(&"all") => f.fsync_eio = u64::MAX,
                "fsync-eio" => f.fsync_eio = num(1)?,
                "read-eio" => {
                    let name = words
                        .get(1)
                        .ok_or_else(|| format!("faults: a file name expected in {line:?}"))?;
                    f.read_eio = Some((name.to_string(), num(2)?, num(3)?));
                }
                "enospc" => f.enospc_at = Some(num(1)?),
                other => return Err(format!("faults: unknown fault {other:?}")),
            }
        }
        Ok(f)
    }

    /// Whether the next fsync of a file fails (and counts it).
    pub(crate) fn take_fsync_eio(&mut self) -> bool {
        match self.fsync_eio {
            0 => false,
            u64::MAX => true,
            _ => {
                self.fsync_eio -= 1;
                true
            }
        }
    }

    /// Whether a read of `len` bytes at `offset` of a file named `name` fails.
    pub(crate) fn read_fails(&self, name: &std::ffi::OsStr, offset: u64, len: u64) -> bool {
        self.read_eio.as_ref().is_some_and(|(n, from, to)| {
            name.to_str() == Some(n.as_str()) && offset < *to && offset.saturating_add(len) > *from
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fault_parses_and_an_empty_file_clears_them() {
        let f = Faults::parse(
            "fsync-delay-ms 20\nfsync-eio 2\nread-eio 0.jnl 4096 8192\nenospc 1000\n",
        )
        .unwrap();
        assert_eq!(f.fsync_delay, Duration::from_millis(20));
        assert_eq!(f.fsync_eio, 2);
        assert_eq!(f.read_eio, Some(("0.jnl".into(), 4096, 8192)));
        assert_eq!(f.enospc_at, Some(1000));
        assert_eq!(Faults::parse("").unwrap(), Faults::default());
        assert_eq!(Faults::parse("fsync-eio all").unwrap().fsync_eio, u64::MAX);
        assert!(Faults::parse("fsync-eio").is_err());
        assert!(Faults::parse("melt").is_err());
    }

    #[test]
    fn a_counted_fsync_fault_fails_that_many_fsyncs() {
        let mut f = Faults::parse("fsync-eio 2").unwrap();
        assert!(f.take_fsync_eio() && f.take_fsync_eio());
        assert!(!f.take_fsync_eio());
        let mut all = Faults::parse("fsync-eio all").unwrap();
        assert!((0..100).all(|_| all.take_fsync_eio()));
    }

    #[test]
    fn a_read_fails_only_where_it_overlaps_the_range_of_that_name() {
        let f = Faults::parse("read-eio data 100 200").unwrap();
        let name = std::ffi::OsStr::new("data");
        assert!(f.read_fails(name, 150, 10));
        assert!(f.read_fails(name, 50, 51));
        assert!(!f.read_fails(name, 50, 50));
        assert!(!f.read_fails(name, 200, 10));
        assert!(!f.read_fails(std::ffi::OsStr::new("other"), 150, 10));
    }
}
