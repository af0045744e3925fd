//! A backup file read front to back, whatever its format (1-5): every byte read feeds the
//! whole-file sha256, no length is trusted past what the file still holds, and the frames every
//! format shares (magic and format field, header, the trailer's checksum) are checked here once.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{BACKUP_MAGIC, IO_BUF, LOGICAL_FORMAT_VERSION, MAX_HEADER};
use crate::BackupError;

/// `Damaged` at `offset`.
pub fn damaged(offset: u64, why: impl Into<String>) -> BackupError {
    BackupError::Damaged {
        offset,
        why: why.into(),
    }
}

fn io(source: std::io::Error) -> BackupError {
    BackupError::Io {
        context: "reading the backup".into(),
        source,
    }
}

/// The reader of one backup file.
pub struct CheckedRead {
    r: BufReader<File>,
    sha: Sha256,
    off: u64,
    len: u64,
}

impl CheckedRead {
    /// Open `path` and check its magic and format field: the reader (past those 16 bytes) and
    /// the format.
    ///
    /// # Errors
    /// `BadMagic` for another kind of file (never "truncated"), `Truncated`, `Damaged` (format
    /// checksum, format 0), `NewerFormat`, `Io`.
    pub fn open(path: &Path) -> Result<(CheckedRead, u32), BackupError> {
        let f = File::open(path).map_err(|source| BackupError::Io {
            context: format!("opening backup {}", path.display()),
            source,
        })?;
        let len = f.metadata().map_err(io)?.len();
        let mut r = BufReader::with_capacity(IO_BUF, f);
        let first = read_first(&mut r, len)?;
        let format = u32::from_le_bytes([first[8], first[9], first[10], first[11]]);
        let mut sha = Sha256::new();
        sha.update(first);
        let off = first.len() as u64;
        Ok((CheckedRead { r, sha, off, len }, format))
    }

    /// Bytes read so far (the offset of the next frame).
    pub fn offset(&self) -> u64 {
        self.off
    }

    /// The file's length.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// Fill `buf`.
    ///
    /// # Errors
    /// `Truncated` at the end of the file, `Io`.
    pub fn read_into(&mut self, buf: &mut [u8]) -> Result<(), BackupError> {
        match self.r.read_exact(buf) {
            Ok(()) => {
                self.sha.update(&*buf);
                self.off += buf.len() as u64;
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                Err(BackupError::Truncated { offset: self.len })
            }
            Err(e) => Err(io(e)),
        }
    }

    /// The next `N` bytes.
    ///
    /// # Errors
    /// As [`Self::read_into`].
    pub fn bytes<const N: usize>(&mut self) -> Result<[u8; N], BackupError> {
        let mut b = [0u8; N];
        self.read_into(&mut b)?;
        Ok(b)
    }

    /// The next little-endian u32.
    ///
    /// # Errors
    /// As [`Self::read_into`].
    pub fn u32(&mut self) -> Result<u32, BackupError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    /// The next `n` bytes; the caller bounded `n`, and never more than the file still holds is
    /// allocated either.
    ///
    /// # Errors
    /// As [`Self::read_into`].
    pub fn vec(&mut self, n: u32) -> Result<Vec<u8>, BackupError> {
        if u64::from(n) > self.len.saturating_sub(self.off) {
            return Err(BackupError::Truncated { offset: self.len });
        }
        let mut v = vec![0u8; n as usize];
        self.read_into(&mut v)?;
        Ok(v)
    }

    /// The header frame (`len u32 | bytes | crc32(len, bytes)`), checked: its offset and bytes.
    ///
    /// # Errors
    /// `Damaged` (length over the bound, checksum), `Truncated`, `Io`.
    pub fn header_frame(&mut self) -> Result<(u64, Vec<u8>), BackupError> {
        let hoff = self.off;
        let hlen = self.u32()?;
        if hlen > MAX_HEADER {
            return Err(damaged(
                hoff,
                format!("header length {hlen} over {MAX_HEADER}"),
            ));
        }
        let hb = self.vec(hlen)?;
        let crc = self.u32()?;
        let mut hframe = hlen.to_le_bytes().to_vec();
        hframe.extend_from_slice(&hb);
        if crc32fast::hash(&hframe) != crc {
            return Err(damaged(hoff, "header checksum mismatch"));
        }
        Ok((hoff, hb))
    }

    /// The trailer's closing sha256 (of every byte before it), checked against what was read;
    /// answers it. `at` is the trailer's offset, named by the error.
    ///
    /// # Errors
    /// `Damaged` on a mismatch, `Truncated`, `Io`.
    pub fn whole_file_sum(&mut self, at: u64) -> Result<[u8; 32], BackupError> {
        let expect: [u8; 32] = self.sha.clone().finalize().into();
        let sum: [u8; 32] = self.bytes()?;
        if sum != expect {
            return Err(damaged(
                at,
                "whole-file checksum mismatch (trailer or earlier)",
            ));
        }
        Ok(sum)
    }

    /// Nothing may follow the trailer.
    ///
    /// # Errors
    /// `Damaged` naming the first byte after it.
    pub fn at_end(&self) -> Result<(), BackupError> {
        if self.off != self.len {
            return Err(damaged(self.off, "bytes after the trailer"));
        }
        Ok(())
    }
}

/// Magic, format and its crc (16 bytes), checked.
fn read_first(r: &mut impl Read, len: u64) -> Result<[u8; 16], BackupError> {
    let mut first = [0u8; 16];
    let mut got = 0;
    while got < first.len() {
        match r.read(&mut first[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io(e)),
        }
    }
    // Another kind of file reads as "wrong magic", never "truncated".
    let m = got.min(8);
    if got == 0 || first[..m] != BACKUP_MAGIC[..m] {
        return Err(BackupError::BadMagic);
    }
    if got < first.len() {
        return Err(BackupError::Truncated { offset: len });
    }
    let crc = u32::from_le_bytes([first[12], first[13], first[14], first[15]]);
    if crc32fast::hash(&first[..12]) != crc {
        return Err(damaged(8, "format field checksum mismatch"));
    }
    let format = u32::from_le_bytes([first[8], first[9], first[10], first[11]]);
    if format > LOGICAL_FORMAT_VERSION {
        return Err(BackupError::NewerFormat {
            found: format,
            supported: LOGICAL_FORMAT_VERSION,
        });
    }
    if format == 0 {
        return Err(damaged(8, "format version 0"));
    }
    Ok(first)
}
