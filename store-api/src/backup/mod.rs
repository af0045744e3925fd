//! The logical backup file (format 6; format 5 still reads): one backend-neutral stream of
//! typed records, written and read here once for every backend, so a backup of one backend
//! restores into another. Format 6 adds the enrolment's `org` and `client_id` and two record
//! kinds after the relay log: invites (their hashes) and deny-list entries; a format-5 file has
//! ten kinds (its trailer lists ten counts) and enrolments without those two fields.
//!
//! Layout (integers little-endian):
//! ```text
//! magic "MBXRBAK\0" | format u32 (6) | crc32(magic, format) u32
//! header_len u32 | postcard Header | crc32(header_len, Header) u32
//! records: 0x01 | kind u8 | len u32 | crc32(0x01, kind, len) u32 | postcard Record | crc32(Record) u32
//! (the frame head has its own checksum, so a damaged length reads as damage, not truncation)
//! trailer: 0xFF | n u8 | n x count u64 | sha256(every byte before it) [32]
//! ```
//! The magic and the first frame are those of the keyspace's formats 1-4 (its raw partition
//! rows), so one reader tells every format apart by the format field. Records come in
//! [`RecordKind`] order: meta (exactly one, first), enrolments, enc ads v1 and v2, sender lists,
//! queues, items, dedup rows, dedup horizons, relay-log entries, invites, deny entries. Every length read from a file
//! is bounded before anything is allocated for it, and verifying a file needs no store.
//!
//! What is NOT in the stream, because every backend derives it from the records on restore:
//! quota counters (recounted from the items), the name and sender indexes, the expiry index,
//! the live/revoked enrolment counts. What is left out because it is not durable state: open
//! enrolment challenges and leases (a restored relay starts with none, as after a restart).
//!
//! Both backends write this format (fjall from one snapshot, PostgreSQL from one REPEATABLE
//! READ read-only transaction); the fjall backend still restores its formats 1-4.
//!
//! Why fjall's `backup` writes format 5 too (one format, not one per backend): it is about as
//! fast as the raw format 4 was. `cargo run --release -p relay-pgstore --example backup_speed
//! -- 200000` (200,000 queued 1 KiB items to 100 targets, two runs on the shared 2-core machine
//! at load 5-9): fjall backup 2.2-2.9 s / 260 MB in format 5 against 2.2-2.6 s / 276 MB in
//! format 4; fjall restore 6.4-10.3 s against 5.7-6.5 s (format 5 rebuilds the indexes and
//! usage counters the raw rows carried); PostgreSQL restore 11.8-13.3 s, PostgreSQL backup
//! 3.4-3.9 s.

mod checked;
mod read;
mod record;
mod write;

pub use checked::{damaged, CheckedRead};
pub use read::{read_format, verify, BackupReader};
pub use record::{
    DedupGone, DedupRecord, EnrolmentRecord, Header, ItemRow, MetaRecord, QueueRecord, Record,
    RecordKind,
};
pub use write::BackupWriter;

use crate::BackupSummary;

/// The file's first bytes (shared with formats 1-4).
pub const BACKUP_MAGIC: [u8; 8] = *b"MBXRBAK\0";
/// The logical format this module writes (and the newest it reads).
pub const LOGICAL_FORMAT_VERSION: u32 = 6;
/// The oldest logical format it reads (older ones are fjall's raw rows).
pub const FIRST_LOGICAL_FORMAT: u32 = 5;
/// Whether a file of `format` is a logical stream (read here), not the fjall raw rows of
/// formats 1-4.
pub fn is_logical(format: u32) -> bool {
    (FIRST_LOGICAL_FORMAT..=LOGICAL_FORMAT_VERSION).contains(&format)
}

/// Longest header accepted.
const MAX_HEADER: u32 = 4_096;
/// Longest record accepted: far above any record written (items are capped well below a MiB).
const MAX_RECORD: u32 = 64 << 20;
/// Buffer of the file reader and writer.
const IO_BUF: usize = 1 << 20;
const TAG_RECORD: u8 = 0x01;
const TAG_TRAILER: u8 = 0xFF;

/// The relay-log detail of a restore, the same from every backend.
pub fn restore_log_detail(summary: &BackupSummary, new_epoch: &str) -> String {
    let total: u64 = summary.counts.iter().map(|(_, n)| n).sum();
    format!(
        "from backup of epoch {} taken at {} ms ({total} records); new epoch {new_epoch}",
        summary.epoch, summary.created_ms
    )
}
