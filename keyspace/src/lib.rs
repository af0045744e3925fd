//! `relay-keyspace`: the durable state of an mbx-relay, on the fjall log-structured engine.
//!
//! It knows bytes, partitions, atomic batches, fsync, snapshots and the backup file format; it
//! knows nothing of HTTP or JSON envelopes. Every logical operation is one atomic batch, and no
//! write call resolves before its batch is fsync'd. Writes from many callers share one fsync
//! (group commit) through a single writer thread that also serialises read-check-write logic.
//! Reads are served from the last *durable* snapshot the writer published, never from state a
//! crash could still erase.
//!
//! A store directory this crate creates is 0700 and its lock file 0600; the engine's own files
//! take the process umask, so callers that need them owner-only set one (`mbx-relay serve` and
//! relay-tool use 077).
//!
//! CONTRACT NOTE (for the crates above): this crate is the fjall backend of the store interface
//! `relay_store::RelayStore` (crate `relay-store`, re-exported here whole, so `relay_keyspace::X`
//! paths keep compiling). The relay, the admin socket and relay-tool program against that trait,
//! not against [`Store`]; only `mbx-relay`'s `store_open` (and test code) opens a [`Store`].
//! `interface.rs` implements the trait, each method a call of its operation (`ops/` for
//! writes, `reader`/`read` and friends for reads). A new operation is added to the trait first
//! (every backend), then there; test-only hooks
//! (`inject_persist_failures_for_tests`, `testing::*`) stay on the concrete `Store`. One process
//! owns a fjall store (its lock file): leases are always held, challenges stay in the relay's
//! memory (`shared_challenges` is `None`). The rules every backend obeys are tested once, in
//! `relay_store::conformance`; `tests/it/conformance.rs` runs them here.
//!
//! CONTRACT (relay log): every mutation that is not mail appends one entry through
//! `ops::oplog::append(tx, kind, detail)` inside its own operation (same atomic batch). Entries
//! are hash-chained (`oplog` defines the canonical bytes); the log is bounded by
//! [`OpenOptions::log_retention`] (age and count), dropping the oldest and recording the last
//! dropped entry as the checkpoint; `RelayStore::verify_log` and backup verification recompute it.
//!
//! CONTRACT (dedup horizon, spec §2, §7): a dedup row is kept for the horizon (the relay passes
//! `now − (retention + 7 days)` to `RelayStore::sweep`) AFTER its item left the queue. A queued
//! item's dedup row has no `dedup_expiry` row and is never pruned; every operation that takes an
//! item out for good (ack, expiry sweep, purge, `delete_item`) writes its prune-index row
//! (`d ++ now ++ dedup key`, `ops::queue::start_dedup_horizon`) in the same batch. A rotation moves
//! queued items' rows unindexed and restarts gone items' horizons at the rotation. Schema 4
//! stores are migrated at open (gone items count from the migration).
//!
//! Files: `interface` (`RelayStore`
//! for `Store`), `engine` (the lock and the fjall database of a directory), `store` (open/close/submit), `writer` (group commit), `reader` and
//! `read` (durable reads), `pulled` (what pulls leave for acks), `ops/` (one file per write
//! operation; `ops/revoke` is an admin's revocation and purge of one key, in one batch),
//! `codec` (keys and values), `parts` (partitions), `lock` (the store lock),
//! `migrate` (schema), `backup_file` (verify and restore any backup format; writes of the raw formats 1-4), `logical` (the format-5 records of a snapshot, and a store built from them), `dump`, `hosts` (the enrolment listing), `stats`.
//! Crash points for tests are `relay_os::failpoint::hit`.
//!
//! Last seen (`ops/seen`): one row per live key in `enrolments` (`0x02 ++ host key`, the UTC
//! day), written by `record_seen` at most once per key per day (the relay batches sightings);
//! a missing row means "seen at enrolment". Rotation moves it; `expire_idle` (`ops/idle`)
//! deletes live enrolments idle that long with an empty queue, in bounded atomic batches.

mod backup_file;
mod codec;
mod commit_stats;
mod dump;
mod engine;
mod hosts;
mod interface;
mod lock;
mod logical;
mod migrate;
mod ops;
mod parts;
mod pulled;
mod read;
mod reader;
mod recover;
mod stats;
mod store;
mod sweep_from;
mod writer;

pub use backup_file::{restore_backup, verify_backup, BACKUP_FORMAT_VERSION, BACKUP_MAGIC};
pub use codec::fingerprint;
pub use commit_stats::{CommitStats, FSYNC_US_BOUNDS, GROUP_SIZE_BOUNDS};

pub use parts::PARTITIONS;
pub use relay_store::*;
pub use store::{EngineOptions, Store};
pub use writer::WRITER_IDLE;

/// Hooks for tests (not a supported API).
#[doc(hidden)]
pub mod testing {
    pub use crate::backup_file::backup_closed_store_for_tests as backup_closed_store;
    pub use crate::migrate::downgrade_to_schema_1_for_tests as downgrade_to_schema_1;
    pub use crate::migrate::downgrade_to_schema_2_for_tests as downgrade_to_schema_2;
    pub use crate::migrate::downgrade_to_schema_3_for_tests as downgrade_to_schema_3;
    pub use crate::migrate::downgrade_to_schema_4_for_tests as downgrade_to_schema_4;
    pub use crate::migrate::put_raw_row_for_tests as put_raw_row;
    pub use crate::migrate::raw_partitions_for_tests as raw_partitions;
    pub use crate::migrate::raw_rows_for_tests as raw_rows;
    pub use crate::migrate::remove_raw_row_for_tests as remove_raw_row;
    pub use crate::migrate::set_schema_version_for_tests as set_schema_version;
}

/// An engine failure as a store error (includes a failed fsync: the operation is NOT durable).
/// The interface crate knows no fjall, so fjall results convert through this.
pub(crate) fn engine_error(e: fjall::Error) -> StoreError {
    StoreError::Engine(e.to_string())
}
