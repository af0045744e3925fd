//! Writing a logical backup: frames, counts and the whole-file checksum; backends hand it
//! records in stream order.

use std::io::{BufWriter, Write};

use sha2::{Digest, Sha256};

use super::read::Tally;
use super::{
    Header, Record, BACKUP_MAGIC, IO_BUF, LOGICAL_FORMAT_VERSION, TAG_RECORD, TAG_TRAILER,
};
use crate::{BackupError, BackupSummary, StoreError};

fn io(source: std::io::Error) -> BackupError {
    BackupError::Io {
        context: "writing the backup".into(),
        source,
    }
}

fn len32(n: usize, what: &str) -> Result<u32, BackupError> {
    u32::try_from(n).map_err(|_| {
        BackupError::Store(StoreError::Corrupt(format!("{what} too large to back up")))
    })
}

/// Streams one backup file to a writer.
pub struct BackupWriter<'a> {
    out: BufWriter<&'a mut dyn Write>,
    sha: Sha256,
    n: u64,
    header: Header,
    tally: Tally,
    frame: Vec<u8>,
}

impl<'a> BackupWriter<'a> {
    /// Write the magic, format and header.
    ///
    /// # Errors
    /// `Io` when `out` fails.
    pub fn start(out: &'a mut dyn Write, header: Header) -> Result<BackupWriter<'a>, BackupError> {
        let mut w = BackupWriter {
            out: BufWriter::with_capacity(IO_BUF, out),
            sha: Sha256::new(),
            n: 0,
            tally: Tally::new(),
            header,
            frame: Vec::new(),
        };
        let mut first = Vec::from(BACKUP_MAGIC);
        first.extend_from_slice(&LOGICAL_FORMAT_VERSION.to_le_bytes());
        let crc = crc32fast::hash(&first);
        first.extend_from_slice(&crc.to_le_bytes());
        w.put(&first)?;
        let hb = postcard::to_stdvec(&w.header).unwrap_or_default();
        let mut hframe = len32(hb.len(), "header")?.to_le_bytes().to_vec();
        hframe.extend_from_slice(&hb);
        let crc = crc32fast::hash(&hframe);
        hframe.extend_from_slice(&crc.to_le_bytes());
        w.put(&hframe)?;
        Ok(w)
    }

    fn put(&mut self, b: &[u8]) -> Result<(), BackupError> {
        self.out.write_all(b).map_err(io)?;
        self.sha.update(b);
        self.n += b.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.n
    }

    /// Records written so far.
    pub fn records_written(&self) -> u64 {
        self.tally.total()
    }

    /// Append one record (records must come in [`super::RecordKind`] order, meta first).
    ///
    /// # Errors
    /// `Io`; `Store(Corrupt)` when the backend hands records out of order.
    pub fn record(&mut self, r: &Record) -> Result<(), BackupError> {
        self.tally
            .record(r)
            .map_err(|why| BackupError::Store(StoreError::Corrupt(why)))?;
        let mut frame = std::mem::take(&mut self.frame);
        frame.clear();
        // Head: tag, kind, len placeholder, crc; the body goes after it in place.
        frame.extend_from_slice(&[TAG_RECORD, r.kind() as u8, 0, 0, 0, 0, 0, 0, 0, 0]);
        let mut frame = r.encode_into(frame);
        let body_len = len32(frame.len() - 10, "record")?;
        frame[2..6].copy_from_slice(&body_len.to_le_bytes());
        let head_crc = crc32fast::hash(&frame[..6]);
        frame[6..10].copy_from_slice(&head_crc.to_le_bytes());
        let body_crc = crc32fast::hash(&frame[10..]);
        frame.extend_from_slice(&body_crc.to_le_bytes());
        let res = self.put(&frame);
        self.frame = frame;
        res
    }

    /// Write the trailer and flush; answers the file's summary.
    ///
    /// # Errors
    /// `Io`; `Store(Corrupt)` when no meta record was written.
    pub fn finish(mut self) -> Result<BackupSummary, BackupError> {
        let counts = self.tally.counts();
        let mut trailer = vec![TAG_TRAILER, counts.len() as u8];
        for (_, n) in &counts {
            trailer.extend_from_slice(&n.to_le_bytes());
        }
        self.put(&trailer)?;
        let sum: [u8; 32] = self.sha.clone().finalize().into();
        self.out.write_all(&sum).map_err(io)?;
        self.n += 32;
        self.out.flush().map_err(io)?;
        let log = self
            .tally
            .finish()
            .map_err(|why| BackupError::Store(StoreError::Corrupt(why)))?;
        Ok(BackupSummary {
            format_version: LOGICAL_FORMAT_VERSION,
            schema_version: self.header.schema_version,
            relay_pubkey: self.header.relay_pubkey,
            epoch: self.header.epoch,
            created_ms: self.header.created_ms,
            counts,
            checksum: super::read::hex(&sum),
            file_bytes: self.n,
            log,
        })
    }
}
