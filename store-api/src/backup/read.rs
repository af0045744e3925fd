//! Reading a logical backup: every frame checked as it streams past (lengths bounded before
//! allocation, crc32 per frame, order, counts, the whole-file sha256, the relay-log chain).

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::{
    Header, Record, RecordKind, BACKUP_MAGIC, IO_BUF, LOGICAL_FORMAT_VERSION, MAX_HEADER,
    MAX_RECORD, TAG_RECORD, TAG_TRAILER,
};
use crate::log::ChainCheck;
use crate::{BackupError, BackupSummary, LogCheckpoint, LogVerdict};

/// Lowercase hex.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the writer and the reader both keep track of: counts per kind, the order, meta, and the
/// relay-log chain recomputed as its entries pass.
pub(crate) struct Tally {
    counts: [u64; RecordKind::ALL.len()],
    last: Option<RecordKind>,
    chain: Option<ChainCheck>,
    head: Option<(u64, Option<[u8; 32]>)>,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            counts: [0; RecordKind::ALL.len()],
            last: None,
            chain: None,
            head: None,
        }
    }

    /// Account for the next record; `Err(why)` when it breaks the stream's order.
    pub(crate) fn record(&mut self, r: &Record) -> Result<(), String> {
        let kind = r.kind();
        match self.last {
            None if kind != RecordKind::Meta => {
                return Err(format!("the first record is {}, not meta", kind.name()))
            }
            Some(_) if kind == RecordKind::Meta => return Err("a second meta record".into()),
            Some(last) if kind < last => {
                return Err(format!(
                    "{} after {}: records out of order",
                    kind.name(),
                    last.name()
                ))
            }
            _ => {}
        }
        self.last = Some(kind);
        self.counts[kind as usize] += 1;
        match r {
            Record::Meta(m) => {
                let cp = m
                    .ops_checkpoint
                    .map(|(seq, hash)| LogCheckpoint { seq, hash });
                self.chain = Some(ChainCheck::new(cp));
                self.head = Some((m.ops_next, m.ops_head));
            }
            Record::Op(e) => {
                if let Some(c) = &mut self.chain {
                    c.entry(e.seq, e.at_ms, &e.kind, &e.detail, &e.hash);
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub(crate) fn counts(&self) -> Vec<(String, u64)> {
        RecordKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), self.counts[*k as usize]))
            .collect()
    }

    /// The chain verdict; `Err` when the stream held no meta record.
    pub(crate) fn finish(self) -> Result<LogVerdict, String> {
        match (self.chain, self.head) {
            (Some(c), Some((next, head))) => Ok(c.finish(Some(next), head)),
            _ => Err("the backup holds no meta record".into()),
        }
    }
}

fn io(source: std::io::Error) -> BackupError {
    BackupError::Io {
        context: "reading the backup".into(),
        source,
    }
}

fn damaged(offset: u64, why: impl Into<String>) -> BackupError {
    BackupError::Damaged {
        offset,
        why: why.into(),
    }
}

fn open(path: &Path) -> Result<(BufReader<File>, u64), BackupError> {
    let f = File::open(path).map_err(|source| BackupError::Io {
        context: format!("opening backup {}", path.display()),
        source,
    })?;
    let len = f.metadata().map_err(io)?.len();
    Ok((BufReader::with_capacity(IO_BUF, f), len))
}

/// The magic and format of a backup file, checked (any format this build knows: 1-5).
///
/// # Errors
/// `BadMagic` for another kind of file, `Truncated`, `Damaged` (format checksum),
/// `NewerFormat`.
pub fn read_format(path: &Path) -> Result<u32, BackupError> {
    let (mut r, len) = open(path)?;
    read_first(&mut r, len).map(|(_, f)| f)
}

/// Magic, format and its crc; answers the bytes read and the format.
fn read_first(r: &mut impl Read, len: u64) -> Result<([u8; 16], u32), BackupError> {
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
    Ok((first, format))
}

/// Reads a logical backup record by record, checking as it goes. A restore reads it twice:
/// once through [`verify`] (touching nothing when the file is bad), then to build.
pub struct BackupReader {
    r: BufReader<File>,
    sha: Sha256,
    off: u64,
    len: u64,
    header: Header,
    tally: Option<Tally>,
    summary: Option<BackupSummary>,
}

impl BackupReader {
    /// Open a format-5 file and read its header.
    ///
    /// # Errors
    /// As [`read_format`], `Damaged` when the file is an older (raw, per-backend) format.
    pub fn open(path: &Path) -> Result<BackupReader, BackupError> {
        let (mut r, len) = open(path)?;
        let (first, format) = read_first(&mut r, len)?;
        if format != LOGICAL_FORMAT_VERSION {
            return Err(damaged(
                8,
                format!(
                    "format {format} holds one backend's raw rows, not the logical records of \
                     format {LOGICAL_FORMAT_VERSION}: only a fjall store restores it"
                ),
            ));
        }
        let mut sha = Sha256::new();
        sha.update(first);
        let mut br = BackupReader {
            r,
            sha,
            off: first.len() as u64,
            len,
            header: Header {
                schema_version: 0,
                relay_pubkey: None,
                epoch: String::new(),
                created_ms: 0,
                backend: String::new(),
            },
            tally: Some(Tally::new()),
            summary: None,
        };
        let hoff = br.off;
        let hlen = br.u32()?;
        if hlen > MAX_HEADER {
            return Err(damaged(
                hoff,
                format!("header length {hlen} over {MAX_HEADER}"),
            ));
        }
        let hb = br.vec(hlen)?;
        let crc = br.u32()?;
        let mut hframe = hlen.to_le_bytes().to_vec();
        hframe.extend_from_slice(&hb);
        if crc32fast::hash(&hframe) != crc {
            return Err(damaged(hoff, "header checksum mismatch"));
        }
        br.header =
            postcard::from_bytes(&hb).map_err(|e| damaged(hoff, format!("bad header: {e}")))?;
        Ok(br)
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    fn read_into(&mut self, buf: &mut [u8]) -> Result<(), BackupError> {
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

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], BackupError> {
        let mut b = [0u8; N];
        self.read_into(&mut b)?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, BackupError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn vec(&mut self, n: u32) -> Result<Vec<u8>, BackupError> {
        // The caller bounded n; never ask for more than the file still holds either.
        if u64::from(n) > self.len.saturating_sub(self.off) {
            return Err(BackupError::Truncated { offset: self.len });
        }
        let mut v = vec![0u8; n as usize];
        self.read_into(&mut v)?;
        Ok(v)
    }

    /// The next record, or `None` after the trailer checked out (then [`Self::summary`]).
    ///
    /// # Errors
    /// `Damaged` (with the frame's offset), `Truncated`, `CountMismatch`, `Io`.
    pub fn next_record(&mut self) -> Result<Option<Record>, BackupError> {
        if self.summary.is_some() {
            return Ok(None);
        }
        let at = self.off;
        let [tag] = self.bytes::<1>()?;
        match tag {
            TAG_RECORD => {
                let [kb] = self.bytes::<1>()?;
                let blen = self.u32()?;
                let head_crc = self.u32()?;
                let mut head = vec![tag, kb];
                head.extend_from_slice(&blen.to_le_bytes());
                if crc32fast::hash(&head) != head_crc {
                    return Err(damaged(at, "record head checksum mismatch"));
                }
                let kind = RecordKind::from_u8(kb)
                    .ok_or_else(|| damaged(at, format!("unknown record kind {kb}")))?;
                if blen > MAX_RECORD {
                    return Err(damaged(at, format!("record length {blen} out of bounds")));
                }
                let body = self.vec(blen)?;
                let crc = self.u32()?;
                if crc32fast::hash(&body) != crc {
                    return Err(damaged(at, "record checksum mismatch"));
                }
                let rec = Record::decode(kind, &body)
                    .map_err(|e| damaged(at, format!("bad {} record: {e}", kind.name())))?;
                if let Some(t) = &mut self.tally {
                    t.record(&rec).map_err(|why| damaged(at, why))?;
                }
                Ok(Some(rec))
            }
            TAG_TRAILER => {
                self.trailer(at)?;
                Ok(None)
            }
            other => Err(damaged(at, format!("unknown record tag {other:#04x}"))),
        }
    }

    fn trailer(&mut self, at: u64) -> Result<(), BackupError> {
        let [n] = self.bytes::<1>()?;
        if usize::from(n) != RecordKind::ALL.len() {
            return Err(damaged(at, format!("trailer lists {n} record kinds")));
        }
        let mut listed = [0u64; RecordKind::ALL.len()];
        for c in &mut listed {
            *c = u64::from_le_bytes(self.bytes()?);
        }
        let expect: [u8; 32] = self.sha.clone().finalize().into();
        let sum: [u8; 32] = self.bytes()?;
        if sum != expect {
            return Err(damaged(
                at,
                "whole-file checksum mismatch (trailer or earlier)",
            ));
        }
        let tally = self.tally.take().unwrap_or_else(Tally::new);
        let counts = tally.counts();
        for (i, (name, found)) in counts.iter().enumerate() {
            if listed[i] != *found {
                return Err(BackupError::CountMismatch {
                    partition: name.clone(),
                    expected: listed[i],
                    found: *found,
                });
            }
        }
        if self.off != self.len {
            return Err(damaged(self.off, "bytes after the trailer"));
        }
        let log = tally.finish().map_err(|why| damaged(at, why))?;
        self.summary = Some(BackupSummary {
            format_version: LOGICAL_FORMAT_VERSION,
            schema_version: self.header.schema_version,
            relay_pubkey: self.header.relay_pubkey,
            epoch: self.header.epoch.clone(),
            created_ms: self.header.created_ms,
            counts,
            checksum: hex(&sum),
            file_bytes: self.len,
            log,
        });
        Ok(())
    }

    /// The summary, once [`Self::next_record`] answered `None`.
    pub fn summary(&self) -> Option<&BackupSummary> {
        self.summary.as_ref()
    }
}

/// Check a format-5 file end to end without any store: magic, format, every frame's crc32,
/// order, counts, the whole-file checksum, and the relay log's chain.
///
/// # Errors
/// A distinct [`BackupError`] for wrong magic, newer format, damage (with offset), truncation.
pub fn verify(path: &Path) -> Result<BackupSummary, BackupError> {
    let mut r = BackupReader::open(path)?;
    while r.next_record()?.is_some() {}
    r.summary
        .take()
        .ok_or_else(|| damaged(r.off, "the backup ends without its summary"))
}
