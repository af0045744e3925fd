//! What admins ask of a store: figures, backups, dumps, revocation and purge.

use crate::{Key32, LogVerdict, Meta, Quotas, StoreError, Usage};

/// Whole-store figures for `relay-tool stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// The store's meta (epoch, key pin, schema).
    pub meta: Meta,
    /// Enrolments that are live.
    pub live_enrolments: u64,
    /// Enrolments that are revoked (kept so a key is never enrolled twice).
    pub revoked_enrolments: u64,
    /// Everything queued, all targets together.
    pub queued: Usage,
    /// Top targets by queued items, largest first (at most 10).
    pub top_targets: Vec<(Key32, Usage)>,
    /// Dedup rows kept.
    pub dedup_rows: u64,
    /// Stored v1 enc ads (`enc_pub` + `sig` pairs).
    pub enc_ads_v1: u64,
    /// Stored v2 (signed, expiring) enc ads.
    pub enc_ads_v2: u64,
    /// Acceptance time of the oldest queued item, if any.
    pub oldest_queued_ms: Option<u64>,
    /// What the store occupies on disk.
    pub disk_bytes: u64,
}

/// Summary of a backup file (written or verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    /// The backup file format.
    pub format_version: u32,
    /// The store schema its records follow.
    pub schema_version: u32,
    /// The relay key the store is pinned to.
    pub relay_pubkey: Option<Key32>,
    /// The store's epoch.
    pub epoch: String,
    /// When the store was created.
    pub created_ms: u64,
    /// Records per partition, by partition name, in file order.
    pub counts: Vec<(String, u64)>,
    /// Whole-file checksum (hex), as in the trailer.
    pub checksum: String,
    /// Size of the file.
    pub file_bytes: u64,
    /// The relay log's hash chain, recomputed ([`LogVerdict::Unchained`] before schema 4).
    pub log: LogVerdict,
}

/// Why a backup file was refused. Each is distinct and names where.
#[derive(Debug)]
pub enum BackupError {
    /// The file does not start with the backup magic.
    BadMagic,
    /// Written by a newer format than this build reads.
    NewerFormat {
        /// The file's format.
        found: u32,
        /// The newest this build reads.
        supported: u32,
    },
    /// A record or trailer checksum failed at this byte offset.
    Damaged {
        /// Where.
        offset: u64,
        /// What was wrong.
        why: String,
    },
    /// The file ends before its trailer.
    Truncated {
        /// Where the file ends.
        offset: u64,
    },
    /// Counts in the trailer disagree with the records.
    CountMismatch {
        /// Which partition.
        partition: String,
        /// What the trailer says.
        expected: u64,
        /// What the file holds.
        found: u64,
    },
    /// A file operation failed.
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The store refused a read or write.
    Store(StoreError),
}

impl std::fmt::Display for BackupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackupError::BadMagic => write!(f, "not an mbx-relay backup (wrong magic)"),
            BackupError::NewerFormat { found, supported } => write!(
                f,
                "backup format {found} is newer than this tool supports ({supported})"
            ),
            BackupError::Damaged { offset, why } => {
                write!(f, "damaged backup at byte offset {offset}: {why}")
            }
            BackupError::Truncated { offset } => {
                write!(f, "truncated backup: file ends at byte offset {offset} before its trailer")
            }
            BackupError::CountMismatch { partition, expected, found } => write!(
                f,
                "damaged backup: trailer counts {expected} records in {partition}, file holds {found}"
            ),
            BackupError::Io { context, source } => write!(f, "{context}: {source}"),
            BackupError::Store(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for BackupError {}

/// Options for a JSON-lines dump.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// Only this partition (by name).
    pub partition: Option<String>,
    /// Include wire bytes (base64); left out by default.
    pub with_wire: bool,
}

impl From<StoreError> for BackupError {
    fn from(e: StoreError) -> Self {
        BackupError::Store(e)
    }
}

/// An admin's revocation and/or purge of one key (`relay-tool revoke` / `purge`).
#[derive(Debug, Clone)]
pub struct RevokeRequest {
    /// The key to revoke or purge.
    pub key: Key32,
    /// Revoke the key exactly as a rotation revokes the old one (no-op if already revoked).
    pub revoke: bool,
    /// Delete its queued items, queueing an expiry notice for each envelope's sender.
    pub purge: bool,
    /// Quotas and retention the notices are inserted under (as the sweep's).
    pub quotas: Quotas,
    /// Retention of those notices.
    pub retention_ms: u64,
    /// Who asked (the admin's uid) and why, for the relay log.
    pub admin_uid: u32,
    /// Why, in the admin's words (cut to [`MAX_REASON_CHARS`]).
    pub reason: String,
}

/// What a revoke or purge did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RevokeReport {
    /// The key was live and is revoked now.
    pub revoked: bool,
    /// The key was revoked before this call (a revocation is never undone or redone).
    pub already_revoked: bool,
    /// Queued items deleted, and their bytes.
    pub purged_items: u64,
    /// Their wire bytes.
    pub purged_bytes: u64,
    /// Expiry notices queued for the purged envelopes' senders.
    pub notices: u64,
    /// Allowlists of other targets the key was taken out of.
    pub lists_changed: u64,
}

/// How a revoke or purge ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeOutcome {
    /// It ran: what it did.
    Done(RevokeReport),
    /// No enrolment, live or revoked, has this key: nothing changed.
    UnknownKey,
    /// The queue holds more than [`MAX_PURGE_ITEMS`] items: nothing changed.
    QueueTooLarge {
        /// How many it holds.
        items: u64,
    },
}

/// Most items a purge deletes in its one batch: the largest queue `--max-queue-items` allows
/// by default is 10,000; a queue over this bound (a raised quota) is refused, not half-purged.
pub const MAX_PURGE_ITEMS: u64 = 100_000;

/// Longest reason (characters) a revoke or purge records; longer ones are cut.
pub const MAX_REASON_CHARS: usize = 200;
