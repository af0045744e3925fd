//! Opening a store: its options, the clock, the schema version and the `meta` record.

use crate::{Key32, LogRetention};
use std::sync::Arc;

/// The schema version this binary writes. 1: the first release layout. 2: the dedup prune
/// index has its own partition, `dedup_expiry` (it shared `expiry` with the item index).
/// 3: `sender_index`, the reverse index of sender lists (sender -> targets whose list names it),
/// so a key rotation finds the lists naming the old key without reading every list.
/// 4: the relay log (`ops`) is hash-chained: each entry stores SHA-256 over the previous
/// entry's hash and its own canonical bytes; meta holds the head and the checkpoint.
/// 5: the dedup prune index (`dedup_expiry`) is keyed by when the item left its queue (ack,
/// expiry, purge, deletion), not by its acceptance, and holds no row while the item is queued
/// (spec §2, §7: a dedup row is kept for the horizon after its item is acked or expired).
pub const SCHEMA_VERSION: u32 = 5;

/// Milliseconds since the Unix epoch; injectable so tests control time.
pub trait Clock: Send + Sync + 'static {
    /// Now, in ms since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// How to open a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Time source for seq floors, timestamps and expiry.
    pub clock: Arc<dyn Clock>,
    /// Create the store directory when it does not exist (the relay: yes; admin tools: no).
    pub create: bool,
    /// How long and how many relay-log entries are kept.
    pub log_retention: LogRetention,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            clock: Arc::new(SystemClock),
            create: true,
            log_retention: LogRetention::default(),
        }
    }
}

/// The `meta` partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The current epoch: hosts' cursors belong to it.
    pub epoch: String,
    /// The relay key the store is pinned to (none before the first start).
    pub relay_pubkey: Option<Key32>,
    /// The schema the store is written in.
    pub schema_version: u32,
    /// The last heartbeat written by a serving process.
    pub heartbeat_ms: Option<u64>,
    /// When the store was created.
    pub created_ms: u64,
}
