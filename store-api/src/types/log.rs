//! The relay log: entries, retention, checkpoint and the chain's verdict.

use crate::DAY_MS;

/// One relay-log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpEntry {
    /// Position in the log (never reused; the chain covers it).
    pub seq: u64,
    /// When it was written.
    pub at_ms: u64,
    /// e.g. "enrol", "re-enrol", "rotate-key", "backup", "restore", "epoch-rotate", "migrate".
    pub kind: String,
    /// Human-readable detail (fingerprints, names and counts; never keys or wire bytes).
    pub detail: String,
    /// SHA-256 over the previous entry's hash and this entry's canonical bytes.
    pub hash: [u8; 32],
}

/// Default age beyond which relay-log entries are dropped: 400 days.
pub const DEFAULT_LOG_RETENTION_MS: u64 = 400 * DAY_MS;
/// Default hard cap on relay-log entries: the oldest go beyond it whatever their age, so a flood
/// of enrolments cannot grow the log without bound (200,000 entries: about 40 MB at most).
pub const DEFAULT_LOG_MAX_ENTRIES: u64 = 200_000;

/// How the relay log is bounded. Entries older than `max_age_ms`, and the oldest beyond
/// `max_entries`, are dropped as new ones are appended; the chain then starts from the
/// checkpoint (seq and hash of the last dropped entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRetention {
    /// Entries older than this are dropped.
    pub max_age_ms: u64,
    /// At most this many entries are kept.
    pub max_entries: u64,
}

impl Default for LogRetention {
    fn default() -> Self {
        LogRetention {
            max_age_ms: DEFAULT_LOG_RETENTION_MS,
            max_entries: DEFAULT_LOG_MAX_ENTRIES,
        }
    }
}

/// Where a relay-log chain starts: the last dropped entry (or the start of the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogCheckpoint {
    /// Seq of the last dropped entry.
    pub seq: u64,
    /// Its hash (all zeros for entries dropped before the log was chained, schema < 4).
    pub hash: [u8; 32],
}

/// The result of recomputing the relay-log chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogVerdict {
    /// Every entry matched, from the checkpoint (if any) to the recorded head.
    Intact {
        /// How many entries were checked.
        entries: u64,
        /// Where the chain started, if entries were dropped.
        checkpoint: Option<LogCheckpoint>,
    },
    /// The first entry that does not match (`seq`: the seq expected or found there).
    Broken {
        /// The seq expected or found there.
        seq: u64,
        /// What did not match.
        why: String,
    },
    /// The log predates the chain (a schema < 4 backup): nothing to check.
    Unchained,
}
