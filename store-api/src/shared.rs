//! What several relay processes on one store tell each other: the changes another process
//! committed that this one's waiting pulls and streams care about ([`StoreEvent`], through
//! [`crate::RelayStore::watch`]), and a row per running process ([`ProcessRow`], through
//! [`crate::RelayStore::beat_process`] and [`crate::RelayStore::processes`]). A store one
//! process owns has neither: it answers no watch and no rows.

use crate::Key32;

/// A change another process committed, as the store's watch delivers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreEvent {
    /// Items became durable for these targets (the highest seq stored for each).
    Queued(Vec<(Key32, u64)>),
    /// The store's epoch changed.
    Epoch,
    /// These keys may have lost their live enrolment (revoked, rotated away, expired, purged).
    Keys(Vec<Key32>),
    /// The watch (re)connected: changes made while it was down were not delivered, so every
    /// waiter should look again.
    Resumed,
}

/// The receiving end of a store's watch: bounded; when the relay falls behind, events are
/// dropped and a [`StoreEvent::Resumed`] follows, so nothing is missed for good.
pub type StoreEvents = tokio::sync::mpsc::Receiver<StoreEvent>;

/// Most events a watch holds for a relay that has not taken them yet.
pub const WATCH_BACKLOG: usize = 4096;

/// One relay process serving the store, as it last described itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcessRow {
    /// Random per start.
    pub id: String,
    /// Where it listens (`--listen` as bound).
    pub address: String,
    /// Its `mbx-relay` version.
    pub version: String,
    /// When it started (ms since the Unix epoch).
    pub started_ms: u64,
    /// When it last renewed this row.
    pub heartbeat_ms: u64,
}

/// How often a process renews its row.
pub const PROCESS_BEAT: std::time::Duration = std::time::Duration::from_secs(2);
/// A row not renewed for this long is stale: its process stopped or lost the database.
pub const PROCESS_STALE_MS: u64 = 3 * PROCESS_BEAT.as_millis() as u64;
/// A stale row is deleted once it is this old (the table stays bounded).
pub const PROCESS_FORGET_MS: u64 = 24 * 3_600_000;
/// Most process rows read for a listing.
pub const MAX_PROCESSES: usize = 256;

impl ProcessRow {
    /// Whether this row's process has not renewed it within [`PROCESS_STALE_MS`] of `now_ms`.
    pub fn stale(&self, now_ms: u64) -> bool {
        now_ms.saturating_sub(self.heartbeat_ms) > PROCESS_STALE_MS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_goes_stale_after_three_missed_beats() {
        let row = ProcessRow {
            id: "a".into(),
            address: "x".into(),
            version: "v".into(),
            started_ms: 0,
            heartbeat_ms: 10_000,
        };
        assert!(!row.stale(10_000 + PROCESS_STALE_MS));
        assert!(row.stale(10_001 + PROCESS_STALE_MS));
        assert!(!row.stale(0), "a clock behind the row is not staleness");
    }
}
