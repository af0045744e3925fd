//! `relay-store`: the interface between the relay and its durable state.
//!
//! The relay layer, the admin socket and relay-tool program against [`RelayStore`] (usually as
//! `Arc<dyn RelayStore>`); a backend (the fjall keyspace in `relay-keyspace`, a database)
//! implements it. This crate holds the trait, the shared records/requests/outcomes/errors
//! (`types`), and, behind the `conformance` feature, the rules every backend must pass.
//!
//! CONTRACT (every backend):
//! - Durability: no `Pending` resolves `Ok` before its operation is durable (fsync'd, or the
//!   database's `COMMIT` returned with synchronous commit). Reads see only durable state.
//! - Atomicity: every trait call that writes is one atomic operation (an insert over all its
//!   targets, a sweep batch with its notices, a rotation, a revoke with its purge and notices).
//! - Seqs: a target's next seq is `max(last seq + 1, now_ms)`; a seq is never handed out twice
//!   for a target, across restarts, restores and epoch changes.
//! - Dedup: (sender, item_id, target) with the same wire hash answers the stored seq
//!   (`duplicate`); with another hash it is a `Conflict`, and nothing of the item is stored.
//! - Quotas are checked in the commit, inclusive, per target, sender share and account.
//! - Every mutation that is not mail appends one relay-log entry in the same operation.
//!
//! Several processes on one database (a shared backend) also need [`RelayStore::try_lease`]
//! (who runs the sweep and the heartbeat) and [`RelayStore::shared_challenges`] (a challenge
//! issued by one process is taken by another). A single-process backend answers `true` and
//! `None`: the relay then keeps its challenges in memory, as it always did. They may also
//! offer [`RelayStore::watch`] (what other processes committed, within milliseconds),
//! [`RelayStore::queue_heads`] (its safety net) and the process rows
//! ([`RelayStore::beat_process`], [`RelayStore::processes`]), whose defaults do nothing.

pub mod backup;
mod commit_stats;
#[cfg(feature = "conformance")]
pub mod conformance;
mod fingerprint;
pub mod log_text;
pub mod notice;
pub mod rules;
pub mod serde_bytes;
mod shared;
mod types;

use std::io::Write;

pub use commit_stats::{CommitStats, FSYNC_US_BOUNDS, GROUP_SIZE_BOUNDS};
pub use fingerprint::fingerprint;
pub use shared::*;
pub use types::*;

/// Every operation the relay, the admin socket and relay-tool perform on their state.
/// Writes answer a [`Pending`] that resolves once durable; reads answer from durable state.
/// Object safe: callers hold `Arc<dyn RelayStore>`.
pub trait RelayStore: Send + Sync + 'static {
    // ---- meta, epoch, heartbeat, the relay key
    /// Current meta (epoch, relay key, schema, heartbeat).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn meta(&self) -> Result<Meta>;
    /// Pin the relay public key on first start; refuse another key later (`RelayKeyMismatch`).
    fn pin_relay_pubkey(&self, pk: Key32) -> Pending<()>;
    /// Replace the epoch with a new random one (logged with `reason`); answers the new epoch.
    fn rotate_epoch(&self, reason: &str) -> Pending<String>;
    /// Record the relay's heartbeat time.
    fn heartbeat(&self, now_ms: u64) -> Pending<()>;
    /// Take or renew the lease `name` for `holder` until `now + ttl_ms`: `true` when `holder`
    /// holds it now. The sweep and the heartbeat run only in the lease holder. A backend one
    /// process owns answers `true`.
    fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Pending<bool>;
    /// The challenge book shared by every process on this store, or `None` for a backend one
    /// process owns (the relay then keeps challenges in its memory).
    fn shared_challenges(&self) -> Option<std::sync::Arc<dyn ChallengeBook>>;
    /// The changes other processes on this store commit ([`StoreEvent`]), delivered within
    /// milliseconds, or `None` for a backend one process owns (or one that cannot push them:
    /// the relay then finds them by its one-second poll alone). Called once, by the relay.
    fn watch(&self) -> Option<StoreEvents> {
        None
    }
    /// Write or renew this process's row ([`ProcessRow`]), dropping rows stale for
    /// [`PROCESS_FORGET_MS`]. A backend one process owns keeps none.
    fn beat_process(&self, row: ProcessRow) -> Pending<()> {
        let _ = row;
        Pending::ready(Ok(()))
    }
    /// Remove this process's row (a clean stop).
    fn leave_process(&self, id: &str) -> Pending<()> {
        let _ = id;
        Pending::ready(Ok(()))
    }
    /// The process rows, stale ones included, at most [`MAX_PROCESSES`], oldest start first
    /// (empty for a backend one process owns).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn processes(&self) -> Result<Vec<ProcessRow>> {
        Ok(Vec::new())
    }

    // ---- enrolments
    /// Record an enrolment (see [`EnrolOutcome`]).
    fn enrol(&self, req: EnrolRequest) -> Pending<EnrolOutcome>;
    /// The enrolment of a key, live or revoked.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn enrolment(&self, key: &Key32) -> Result<Option<Enrolment>>;
    /// Live enrolments whose name equals `name` case-insensitively, at most `limit`.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn live_enrolments_by_name(&self, name: &str, limit: usize) -> Result<Vec<Enrolment>>;
    /// [`RelayStore::enrolment`] for an async caller: a backend whose reads wait on a network
    /// (PostgreSQL) answers later instead of blocking the caller's worker thread, which every
    /// signed request would otherwise do once (its hop check).
    fn enrolment_async(&self, key: &Key32) -> Pending<Option<Enrolment>> {
        Pending::ready(self.enrolment(key))
    }
    /// Number of live enrolments.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn live_enrolment_count(&self) -> Result<u64>;
    /// Enrolments (live or revoked) whose fingerprint starts with `prefix`, at most `limit`.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn enrolments_by_fingerprint(&self, prefix: &str, limit: usize) -> Result<Vec<Enrolment>>;
    /// Live enrolments recorded with this accounts-service `client_id`, at most `limit`, in
    /// key order (a deny entry for the client revokes them).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn live_enrolments_by_client(&self, client_id: &str, limit: usize) -> Result<Vec<Enrolment>>;
    /// Which of `keys` have a live (enrolled, not revoked) enrolment now, in any order: the
    /// relay asks it for the keys with waiting pulls and streams, to end those of keys revoked,
    /// rotated or expired by another process. One read per key unless a backend has better.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn live_keys(&self, keys: &[Key32]) -> Result<Vec<Key32>> {
        let mut live = Vec::with_capacity(keys.len());
        for k in keys {
            if matches!(self.enrolment(k)?, Some(e) if e.revoked_at_ms.is_none()) {
                live.push(*k);
            }
        }
        Ok(live)
    }
    /// Record the UTC days hosts were last seen (one operation); answers rows written.
    fn record_seen(&self, seen: Vec<(Key32, u32)>) -> Pending<u64>;
    /// Delete live enrolments idle `idle_ms` with an empty queue, scanning at most `max` rows
    /// after `after`.
    fn expire_idle(
        &self,
        now_ms: u64,
        idle_ms: u64,
        after: Option<Key32>,
        max: usize,
    ) -> Pending<IdleReport>;
    /// Rotate a host key: revoke `old`, move its queue, enrolment and list entries to `new`.
    fn rebind(&self, old: Key32, new: Key32) -> Pending<RebindOutcome>;
    /// An admin's revocation and/or purge of one key, with notices built by `notice`.
    fn revoke_key(&self, req: RevokeRequest, notice: NoticeFn) -> Pending<RevokeOutcome>;
    /// Store `invite` (`relay-tool invite`; one relay-log entry naming its id, never a code),
    /// first deleting the expired ones in the same operation; `Full`, storing no new invite,
    /// when `max` unexpired invites are stored. A new enrolment redeems it ([`EnrolRequest::invite`]).
    fn put_invite(&self, invite: Invite, max: u64) -> Pending<InviteOutcome>;
    /// Add (or renew) a deny-list entry, stored until `rules::deny::kept_until`, first deleting
    /// the expired ones in the same operation (one relay-log entry); `Full`, storing nothing,
    /// when `max` unexpired entries are stored.
    fn put_deny(&self, entry: DenyEntry, max: u64) -> Pending<DenyOutcome>;
    /// Whether an unexpired deny entry at `now_ms` names one of `subjects`.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn denied(&self, subjects: &[DenySubject], now_ms: u64) -> Result<bool>;
    /// Every enrolment passing `filter`, in key order, handed to `each`; answers how many.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`, or what `each` returned.
    fn hosts(
        &self,
        filter: &HostFilter,
        each: &mut dyn FnMut(&HostRow) -> Result<()>,
    ) -> Result<u64>;

    // ---- enc ads and sender lists
    /// Store a v1 enc ad (replacing the key's previous one).
    fn put_enc_ad(&self, ad: EncAd) -> Pending<()>;
    /// Store a v2 enc ad whatever its `iat`; `false`, storing nothing, when its key is not live
    /// at commit time (`rules::enc_ad::stores_v2`).
    fn put_enc_ad_v2(&self, ad: EncAdV2) -> Pending<bool>;
    /// The v1 enc ad of a key.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn enc_ad(&self, key: &Key32) -> Result<Option<EncAd>>;
    /// Both enc ads of a key, from one snapshot.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn enc_ads(&self, key: &Key32) -> Result<EncAds>;
    /// Store a target's sender list unless an equal or newer one is stored.
    fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome>;
    /// A target's sender list.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn sender_list(&self, target: &Key32) -> Result<Option<SenderList>>;
    /// What admitting a push to `target` reads ([`Admission`]).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn admission(&self, target: &Key32) -> Result<Admission> {
        let enrolment = self.enrolment(target)?;
        let senders = match &enrolment {
            Some(e) if e.revoked_at_ms.is_none() => self.sender_list(target)?,
            _ => None,
        };
        Ok(Admission { enrolment, senders })
    }
    /// [`RelayStore::admission`] of each of `targets`, in order, for an async caller: one read
    /// for a whole push where a backend can (PostgreSQL: one statement instead of two round
    /// trips per target, answered without blocking the caller).
    fn admissions(&self, targets: &[Key32]) -> Pending<Vec<Admission>> {
        Pending::ready(targets.iter().map(|t| self.admission(t)).collect())
    }

    // ---- mail
    /// Insert one item over all its targets, atomically.
    fn insert(&self, req: InsertRequest) -> Pending<InsertOutcome>;
    /// Insert items, each one atomic on its own (a push batch); outcomes in order.
    fn insert_many(&self, reqs: Vec<InsertRequest>) -> Pending<Vec<InsertOutcome>>;
    /// The dedup row of (sender, item_id, target).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn dedup(&self, sender: &Key32, item_id: &str, target: &Key32) -> Result<Option<DedupRow>>;
    /// A page of the target's queue after `after`: at most `limit` items and about `max_bytes`
    /// (at least one item when any is queued).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn pull(&self, target: &Key32, after: u64, limit: usize, max_bytes: u64) -> Result<Page>;
    /// The head seq of each of `keys` that has a queue, in any order: the relay's
    /// one-second poll for the keys with waiters on a shared store (the safety net of
    /// [`RelayStore::watch`]). One read per key unless a backend has better.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn queue_heads(&self, keys: &[Key32]) -> Result<Vec<(Key32, u64)>> {
        keys.iter()
            .map(|k| Ok((*k, self.cursor(k)?.head_seq)))
            .collect()
    }
    /// Head and acked-through of a target.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn cursor(&self, target: &Key32) -> Result<Cursor>;
    /// Queue usage of a target.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn usage_target(&self, target: &Key32) -> Result<Usage>;
    /// Queue usage of a sender within a target.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn usage_sender(&self, sender: &Key32, target: &Key32) -> Result<Usage>;
    /// Queue usage of a proven account.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn usage_account(&self, account: &str) -> Result<Usage>;
    /// Delete the target's items through `through` and advance its cursor.
    fn ack(&self, target: &Key32, through: u64) -> Pending<AckOutcome>;
    /// Delete one queued item; `false` when it is not queued.
    fn delete_item(&self, target: &Key32, seq: u64) -> Pending<bool>;
    /// Expire items past their time (notices built by `notice`, inserted in the same
    /// operation) and prune dedup rows older than `dedup_horizon_ms`, at most `max` items.
    fn sweep(
        &self,
        now_ms: u64,
        dedup_horizon_ms: u64,
        quotas: Quotas,
        retention_ms: u64,
        max: usize,
        notice: NoticeFn,
    ) -> Pending<SweepReport>;

    // ---- the relay log, figures, exports
    /// Append a relay-log entry.
    fn log_op(&self, kind: &str, detail: &str) -> Pending<()>;
    /// The newest `limit` relay-log entries, newest first.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn ops(&self, limit: usize) -> Result<Vec<OpEntry>>;
    /// The newest relay-log entry of `kind`, or `None`: the whole retained log is searched
    /// (at most its `LogRetention::max_entries`), newest first, holding one entry at a time.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn newest_op_of(&self, kind: &str) -> Result<Option<OpEntry>>;
    /// Recompute the relay-log hash chain.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn verify_log(&self) -> Result<LogVerdict>;
    /// Whole-store figures.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    fn stats(&self) -> Result<Stats>;
    /// JSON lines of the stored rows; answers rows per partition.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`, `Io`.
    fn dump(&self, out: &mut dyn Write, opts: &DumpOptions) -> Result<Vec<(String, u64)>>;
    /// A consistent logical backup, written to `out` (`progress`: records written so far).
    ///
    /// # Errors
    /// [`BackupError`].
    fn backup_to(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupSummary, BackupError>;
    /// Commit counters for `/metrics`.
    fn commit_stats(&self) -> CommitStats;
    /// How often the backend reopened its engine or reconnected after a failure.
    fn reopen_count(&self) -> u64;
    /// Finish submitted operations, flush and release the store (later calls answer `Closed`).
    ///
    /// # Errors
    /// `Engine` when the final flush fails.
    fn close(&self) -> Result<()>;
}

/// How issuing a challenge ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChallengeIssue {
    /// Stored as the key's open challenge (replacing any earlier one).
    Issued,
    /// `max` other unexpired challenges are open.
    Full,
}

/// Open enrolment challenges: bounded, expiring, single use, one per key (docs/protocol.md §3).
/// The relay keeps one in memory; a store shared by several processes supplies its own
/// ([`RelayStore::shared_challenges`]) so a challenge from one process is good at another.
pub trait ChallengeBook: Send + Sync + 'static {
    /// Make `challenge` the open challenge of `key` until `now_ms + lifetime_ms`; refused when
    /// `max` other unexpired challenges are open (replacing a key's own is always allowed).
    fn issue(
        &self,
        key: Key32,
        challenge: String,
        now_ms: u64,
        lifetime_ms: u64,
        max: u64,
    ) -> Pending<ChallengeIssue>;
    /// The open, unexpired challenge of `key`.
    fn pending(&self, key: &Key32, now_ms: u64) -> Pending<Option<String>>;
    /// Consume `key`'s challenge if it is still `challenge` (single use; compared in constant
    /// time).
    fn consume(&self, key: &Key32, challenge: &str) -> Pending<()>;
}

/// How the layers above hold a store: shared, behind the interface.
pub type SharedStore = std::sync::Arc<dyn RelayStore>;
