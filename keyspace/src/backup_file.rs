//! The backup file: one consistent snapshot in one file, checkable offline. `RelayStore::backup_to`
//! writes the logical format 5 (`relay_store::backup`, records every backend reads; the rows
//! are read in `logical`); this file verifies and restores every format, and holds the raw
//! formats 1-4 of earlier releases: the keyspace's partition rows as they were stored, which
//! only a fjall store can restore.
//!
//! Raw layout (formats 1-4, integers little-endian):
//! ```text
//! magic "MBXRBAK\0" | format u32 | crc32(magic, format) u32
//! header_len u32 | postcard Header | crc32(header_len, Header) u32
//! records: 0x01 | partition u8 | key_len u32 | value_len u32 | crc32(0x01 .. value_len) u32
//!          | key | value | crc32(key, value) u32
//! (the frame head has its own checksum, so a damaged length reads as damage, not truncation)
//! trailer: 0xFF | n u8 | n x count u64 | sha256(every byte before it) [32]
//! ```
//! Records come in partition order. Every length read from a file is bounded before anything is
//! allocated for it.

use std::io::{BufWriter, ErrorKind, Write};
use std::path::Path;

use fjall::Readable;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::codec::{self, meta_key};
use crate::engine::open_engine;
use crate::migrate::{new_epoch, DirectBatch};
use crate::ops::oplog::{self, ChainCheck};
use crate::parts::Part;
use crate::reader;
use crate::Store;
use relay_store::backup::{damaged, CheckedRead};
use relay_store::{
    BackupError, BackupSummary, Key32, LogRetention, LogVerdict, StoreError, SCHEMA_VERSION,
};

/// The file's first bytes.
pub const BACKUP_MAGIC: [u8; 8] = *b"MBXRBAK\0";
/// The format this binary writes and the newest it reads. Format 1 held the eleven partitions
/// of schema 1; format 2 adds `dedup_expiry` (schema 2); format 3 adds `sender_index`
/// (schema 3); format 4 holds a schema-4 store, whose relay log is hash-chained (verification
/// recomputes the chain), or a schema-5 store: schema 5 changed what `dedup_expiry` keys mean
/// (the time the item left its queue), not which partitions or records a backup holds, and the
/// header's schema version says which it is (a schema-4 relay verifies such a backup and refuses
/// to restore it: schema newer than the binary). The layout of a record is unchanged. An older format restores into a
/// store of its schema, which is migrated before the restore is logged (building what the
/// format lacked, the log's chain included).
/// Formats 5 and 6 are the logical, backend-neutral stream of `relay_store::backup`, which
/// `RelayStore::backup_to` writes (6); this file still reads and restores formats 1-4 (raw partition
/// rows) and writes format 4 only through the test hook [`backup_closed_store_for_tests`].
pub const BACKUP_FORMAT_VERSION: u32 = relay_store::backup::LOGICAL_FORMAT_VERSION;

/// How many partitions (the first of [`Part::ALL`]) a backup of this format holds.
fn partitions_in_format(format_version: u32) -> usize {
    match format_version {
        1 => 11,
        2 => 12,
        _ => Part::ALL.len(),
    }
}

const TAG_RECORD: u8 = 0x01;
const TAG_TRAILER: u8 = 0xFF;
/// fjall's key limit.
const MAX_KEY: u32 = 65_536;
/// Far above any record we write (items are capped well below a MiB).
const MAX_VALUE: u32 = 64 << 20;
/// Records per restore batch.
const RESTORE_CHUNK: usize = 4_096;
const IO_BUF: usize = 1 << 20;

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    schema_version: u32,
    relay_pubkey: Option<Key32>,
    epoch: String,
    created_ms: u64,
}

fn io(context: &str) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        context: context.to_string(),
        source,
    }
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<'a> {
    out: BufWriter<&'a mut dyn Write>,
    sha: Sha256,
    n: u64,
}

impl HashingWriter<'_> {
    fn put(&mut self, b: &[u8]) -> Result<(), BackupError> {
        self.out.write_all(b).map_err(io("writing the backup"))?;
        self.sha.update(b);
        self.n += b.len() as u64;
        Ok(())
    }
}

fn len32(n: usize, what: &str) -> Result<u32, BackupError> {
    u32::try_from(n).map_err(|_| {
        BackupError::Store(StoreError::Corrupt(format!("{what} too large to back up")))
    })
}

/// Test hook: write a backup file claiming `format` of a closed store as it is, without the
/// migration an open would run (to make backups as older relays wrote them). Not part of the
/// supported API.
///
/// # Errors
/// As `RelayStore::backup_to`.
#[doc(hidden)]
pub fn backup_closed_store_for_tests(
    dir: &Path,
    format: u32,
    out: &mut dyn Write,
) -> Result<BackupSummary, BackupError> {
    let engine = open_engine(dir, false)?;
    let v = reader::SnapView {
        snap: engine.parts.db.snapshot(),
        parts: std::sync::Arc::clone(&engine.parts),
    };
    let now = relay_store::SystemClock.now_ms();
    write_backup(&v, format, now, out, &mut |_| {})
}

/// Stream one snapshot as a raw-row backup file of `format` (1-4: the test hook only).
fn write_backup(
    v: &reader::SnapView,
    format: u32,
    created_ms: u64,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    let meta = reader::meta(v)?;
    let log = if meta.schema_version >= 4 {
        oplog::verify(v)?
    } else {
        LogVerdict::Unchained
    };
    let header = Header {
        schema_version: meta.schema_version,
        relay_pubkey: meta.relay_pubkey,
        epoch: meta.epoch,
        created_ms,
    };
    let mut w = HashingWriter {
        out: BufWriter::with_capacity(IO_BUF, out),
        sha: Sha256::new(),
        n: 0,
    };
    let mut first = Vec::from(BACKUP_MAGIC);
    first.extend_from_slice(&format.to_le_bytes());
    let crc = crc32fast::hash(&first);
    first.extend_from_slice(&crc.to_le_bytes());
    let hb = codec::enc(&header);
    let mut hframe = len32(hb.len(), "header")?.to_le_bytes().to_vec();
    hframe.extend_from_slice(&hb);
    let crc = crc32fast::hash(&hframe);
    hframe.extend_from_slice(&crc.to_le_bytes());
    w.put(&first)?;
    w.put(&hframe)?;
    let mut counts = Vec::with_capacity(Part::ALL.len());
    let mut frame = Vec::new();
    let mut last_progress = 0;
    for p in Part::ALL {
        let mut n = 0u64;
        for g in v.snap.iter(v.parts.ks(p)) {
            let (k, val) = g.into_inner().map_err(crate::engine_error)?;
            frame.clear();
            frame.push(TAG_RECORD);
            frame.push(p.id());
            frame.extend_from_slice(&len32(k.len(), "key")?.to_le_bytes());
            frame.extend_from_slice(&len32(val.len(), "value")?.to_le_bytes());
            let head_crc = crc32fast::hash(&frame);
            frame.extend_from_slice(&head_crc.to_le_bytes());
            frame.extend_from_slice(&k);
            frame.extend_from_slice(&val);
            let mut h = crc32fast::Hasher::new();
            h.update(&k);
            h.update(&val);
            frame.extend_from_slice(&h.finalize().to_le_bytes());
            w.put(&frame)?;
            n += 1;
            if w.n - last_progress >= IO_BUF as u64 {
                last_progress = w.n;
                progress(w.n);
            }
        }
        counts.push((p.name().to_string(), n));
    }
    let mut trailer = vec![TAG_TRAILER, Part::ALL.len() as u8];
    for (_, n) in &counts {
        trailer.extend_from_slice(&n.to_le_bytes());
    }
    w.put(&trailer)?;
    let sum: [u8; 32] = w.sha.clone().finalize().into();
    w.out.write_all(&sum).map_err(io("writing the backup"))?;
    w.n += 32;
    w.out.flush().map_err(io("writing the backup"))?;
    progress(w.n);
    Ok(BackupSummary {
        format_version: format,
        schema_version: header.schema_version,
        relay_pubkey: header.relay_pubkey,
        epoch: header.epoch,
        created_ms: header.created_ms,
        counts,
        checksum: codec::hex(&sum),
        file_bytes: w.n,
        log,
    })
}

/// Read and check a whole backup, handing each record to `sink` (partition, key, value).
fn read_backup(
    path: &Path,
    sink: &mut dyn FnMut(Part, Vec<u8>, Vec<u8>) -> Result<(), BackupError>,
) -> Result<BackupSummary, BackupError> {
    let (mut r, format_version) = CheckedRead::open(path)?;
    if format_version > BACKUP_FORMAT_VERSION {
        return Err(BackupError::NewerFormat {
            found: format_version,
            supported: BACKUP_FORMAT_VERSION,
        });
    }
    if format_version == 0 {
        return Err(damaged(8, "format version 0"));
    }
    let (hoff, hb) = r.header_frame()?;
    let header: Header =
        postcard::from_bytes(&hb).map_err(|e| damaged(hoff, format!("bad header: {e}")))?;
    let parts = &Part::ALL[..partitions_in_format(format_version)];
    let mut counts = vec![0u64; parts.len()];
    let mut chain = LogChain::new(header.schema_version);
    let mut last_part = 0u8;
    loop {
        let at = r.offset();
        let [tag] = r.bytes::<1>()?;
        match tag {
            TAG_RECORD => {
                let [pid] = r.bytes::<1>()?;
                let klen = r.u32()?;
                let vlen = r.u32()?;
                let head_crc = r.u32()?;
                let mut head = vec![tag, pid];
                head.extend_from_slice(&klen.to_le_bytes());
                head.extend_from_slice(&vlen.to_le_bytes());
                if crc32fast::hash(&head) != head_crc {
                    return Err(damaged(at, "record head checksum mismatch"));
                }
                let part = parts
                    .get(usize::from(pid))
                    .copied()
                    .ok_or_else(|| damaged(at, format!("unknown partition {pid}")))?;
                if pid < last_part {
                    return Err(damaged(at, "records out of partition order"));
                }
                if klen > MAX_KEY || vlen > MAX_VALUE {
                    return Err(damaged(
                        at,
                        format!("record lengths {klen}/{vlen} out of bounds"),
                    ));
                }
                last_part = pid;
                let key = r.vec(klen)?;
                let val = r.vec(vlen)?;
                let crc = r.u32()?;
                let mut h = crc32fast::Hasher::new();
                h.update(&key);
                h.update(&val);
                if h.finalize() != crc {
                    return Err(damaged(at, "record checksum mismatch"));
                }
                counts[usize::from(pid)] += 1;
                chain.record(part, &key, &val);
                sink(part, key, val)?;
            }
            TAG_TRAILER => {
                let [n] = r.bytes::<1>()?;
                if usize::from(n) != counts.len() {
                    return Err(damaged(at, format!("trailer lists {n} partitions")));
                }
                let mut listed = vec![0u64; parts.len()];
                for c in &mut listed {
                    *c = u64::from_le_bytes(r.bytes()?);
                }
                let sum = r.whole_file_sum(at)?;
                for (i, p) in parts.iter().enumerate() {
                    if listed[i] != counts[i] {
                        return Err(BackupError::CountMismatch {
                            partition: p.name().into(),
                            expected: listed[i],
                            found: counts[i],
                        });
                    }
                }
                r.at_end()?;
                return Ok(BackupSummary {
                    format_version,
                    schema_version: header.schema_version,
                    relay_pubkey: header.relay_pubkey,
                    epoch: header.epoch,
                    created_ms: header.created_ms,
                    counts: parts
                        .iter()
                        .zip(counts)
                        .map(|(p, c)| (p.name().to_string(), c))
                        .collect(),
                    checksum: codec::hex(&sum),
                    file_bytes: r.file_len(),
                    log: chain.finish(),
                });
            }
            other => return Err(damaged(at, format!("unknown record tag {other:#04x}"))),
        }
    }
}

/// Recomputes the relay-log chain of a backup as its records stream past: `meta` (partition 0)
/// comes before `ops`, so the checkpoint and head are known when the entries arrive.
struct LogChain {
    chained: bool,
    next: Option<Vec<u8>>,
    head: Option<Vec<u8>>,
    checkpoint: Option<Vec<u8>>,
    check: Option<ChainCheck>,
    /// A log record of meta that does not decode.
    bad_meta: Option<String>,
}

impl LogChain {
    fn new(schema_version: u32) -> LogChain {
        LogChain {
            chained: schema_version >= 4,
            next: None,
            head: None,
            checkpoint: None,
            check: None,
            bad_meta: None,
        }
    }

    fn record(&mut self, part: Part, key: &[u8], value: &[u8]) {
        if !self.chained {
            return;
        }
        match part {
            Part::Meta if key == meta_key::OPS_NEXT => self.next = Some(value.to_vec()),
            Part::Meta if key == meta_key::OPS_HEAD => self.head = Some(value.to_vec()),
            Part::Meta if key == meta_key::OPS_CHECKPOINT => {
                self.checkpoint = Some(value.to_vec());
            }
            Part::Ops => {
                self.checker().row(key, value);
            }
            _ => {}
        }
    }

    fn checker(&mut self) -> &mut ChainCheck {
        let cp = self.checkpoint.as_deref().map(|v| {
            codec::dec::<(u64, [u8; 32])>(v, "meta ops_checkpoint")
                .map(|(seq, hash)| relay_store::LogCheckpoint { seq, hash })
        });
        let cp = match cp.transpose() {
            Ok(cp) => cp,
            Err(e) => {
                self.bad_meta = Some(e.to_string());
                None
            }
        };
        self.check.get_or_insert_with(|| ChainCheck::new(cp))
    }

    fn finish(mut self) -> LogVerdict {
        if !self.chained {
            return LogVerdict::Unchained;
        }
        self.checker();
        let next = self
            .next
            .as_deref()
            .map(|v| codec::dec::<u64>(v, "meta ops_next"))
            .transpose();
        let head = self
            .head
            .as_deref()
            .map(|v| codec::dec::<[u8; 32]>(v, "meta ops_head"))
            .transpose();
        match (next, head, self.bad_meta, self.check) {
            (Ok(next), Ok(head), None, Some(check)) => check.finish(next, head),
            (Err(e), ..) | (_, Err(e), ..) => LogVerdict::Broken {
                seq: 0,
                why: e.to_string(),
            },
            (_, _, Some(why), _) => LogVerdict::Broken { seq: 0, why },
            (_, _, None, None) => LogVerdict::Unchained,
        }
    }
}

/// Check a backup file offline: magic, format, every frame's crc32, counts, whole-file checksum
/// (formats 1-4 here, formats 5 and 6 by `relay_store::backup::verify`).
///
/// # Errors
/// A distinct [`BackupError`] for wrong magic, newer format, damage (with offset) and truncation.
pub fn verify_backup(path: &Path) -> Result<BackupSummary, BackupError> {
    if relay_store::backup::is_logical(relay_store::backup::read_format(path)?) {
        return relay_store::backup::verify(path);
    }
    read_backup(path, &mut |_, _, _| Ok(()))
}

/// Build a new store in `new_dir` (which must not exist) from a backup file: verifies the whole
/// file first (touching nothing when it is bad), writes a new epoch and an ops entry "restore".
/// Returns the summary and the new epoch. Seq heads come back as backed up: with the clock floor
/// (`max(next_seq, now_ms)`) new items still land above every seq handed out before.
///
/// # Errors
/// As [`verify_backup`], plus I/O and store errors.
pub fn restore_backup(file: &Path, new_dir: &Path) -> Result<(BackupSummary, String), BackupError> {
    if new_dir.exists() {
        return Err(BackupError::Io {
            context: format!("restore target {} already exists", new_dir.display()),
            source: std::io::Error::from(ErrorKind::AlreadyExists),
        });
    }
    let summary = verify_backup(file)?;
    if summary.schema_version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: summary.schema_version,
            supported: SCHEMA_VERSION,
        }
        .into());
    }
    match build(file, new_dir, &summary) {
        Ok(epoch) => Ok((summary, epoch)),
        Err(e) => {
            let _ = std::fs::remove_dir_all(new_dir);
            Err(e)
        }
    }
}

/// Second pass: write the (re-checked) records into a fresh store, then a new epoch and the log.
fn build(file: &Path, new_dir: &Path, summary: &BackupSummary) -> Result<String, BackupError> {
    let epoch = new_epoch();
    {
        let engine = open_engine(new_dir, true)?;
        let parts = &engine.parts;
        if relay_store::backup::is_logical(summary.format_version) {
            crate::logical::fill(file, parts)?;
        } else {
            let mut batch = DirectBatch::new(parts);
            let mut pending = 0usize;
            read_backup(file, &mut |p, k, v| {
                batch.put(p, &k, v);
                pending += 1;
                if pending >= RESTORE_CHUNK {
                    std::mem::replace(&mut batch, DirectBatch::new(parts)).commit()?;
                    pending = 0;
                }
                Ok(())
            })?;
            batch.commit()?;
        }
        if parts
            .db
            .snapshot()
            .get(parts.ks(Part::Meta), meta_key::SCHEMA_VERSION)
            .map_err(crate::engine_error)?
            .is_none()
        {
            return Err(StoreError::Corrupt("backup holds no schema version".into()).into());
        }
        let now = relay_store::SystemClock.now_ms();
        // relay-tool's offline writers bound the log as `mbx-relay serve` does by default.
        let keep = LogRetention::default();
        // An older schema becomes the current one first (its log chained), so the restore
        // entry below extends a chain.
        crate::migrate::prepare(parts, now, keep)?;
        let mut fin = DirectBatch::new(parts);
        fin.put(Part::Meta, meta_key::EPOCH, codec::enc(&epoch));
        fin.log(
            now,
            keep,
            "restore",
            &relay_store::backup::restore_log_detail(summary, &epoch),
        )?;
        fin.commit_durable()?;
    }
    // Open once through the normal path: checks everything else.
    let store = Store::open(
        new_dir,
        relay_store::OpenOptions {
            create: false,
            ..Default::default()
        },
    )?;
    store.close()?;
    Ok(epoch)
}

use relay_store::{Clock as _, RelayStore as _};
