//! Public types of the store surface: records, requests, outcomes and errors, shared by every
//! backend (the [`crate::RelayStore`] trait) and the crates above it.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A raw 32-byte Ed25519 public key (hosts and the relay).
pub type Key32 = [u8; 32];

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
    /// Called on the writer thread every [`WRITER_IDLE`] while it has nothing to do (the relay
    /// gives the allocator's free pages back there); `None`: nothing.
    pub on_writer_idle: Option<fn()>,
    /// How long and how many relay-log entries are kept.
    pub log_retention: LogRetention,
}

/// How long the writer waits for work before it counts as idle.
pub const WRITER_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            clock: Arc::new(SystemClock),
            create: true,
            on_writer_idle: None,
            log_retention: LogRetention::default(),
        }
    }
}

/// Every error a store operation can give. Messages name the cause and never contain key material
/// or wire bytes.
#[derive(Debug)]
pub enum StoreError {
    /// Another process holds the store's lock file.
    Locked { path: PathBuf, pid: Option<u32> },
    /// The store directory does not exist (and `create` was false).
    Missing(PathBuf),
    /// The store was written by a newer binary.
    SchemaTooNew { found: u32, supported: u32 },
    /// The store is pinned to another relay public key (fingerprints only, never keys).
    RelayKeyMismatch { stored_fp: String, given_fp: String },
    /// A file or record that is not ours or is damaged.
    Corrupt(String),
    /// An I/O failure, with what we were doing.
    Io {
        context: String,
        source: std::io::Error,
    },
    /// The engine failed (includes failed fsync: the operation is NOT durable).
    Engine(String),
    /// The store was closed or its writer stopped.
    Closed,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Locked { path, pid: Some(pid) } => {
                write!(f, "store {} is in use by pid {pid}", path.display())
            }
            StoreError::Locked { path, pid: None } => {
                write!(f, "store {} is in use by another process", path.display())
            }
            StoreError::Missing(p) => write!(f, "store directory {} does not exist", p.display()),
            StoreError::SchemaTooNew { found, supported } => write!(
                f,
                "store schema version {found} is newer than this binary supports ({supported}); upgrade mbx-relay"
            ),
            StoreError::RelayKeyMismatch { stored_fp, given_fp } => write!(
                f,
                "store belongs to relay key {stored_fp}, refusing to open it with key {given_fp}"
            ),
            StoreError::Corrupt(why) => write!(f, "store is damaged: {why}"),
            StoreError::Io { context, source } => write!(f, "{context}: {source}"),
            StoreError::Engine(why) => write!(f, "storage engine error: {why}"),
            StoreError::Closed => write!(f, "store is closed"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Result alias.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// A write submitted to a backend. Resolves once the operation is durable (or failed).
/// Await it from async code or call [`Pending::wait`] from a thread.
pub struct Pending<T>(PendingState<T>);

enum PendingState<T> {
    /// Answered by a writer (fjall's group-commit thread, a database task) through a oneshot.
    Waiting(tokio::sync::oneshot::Receiver<Result<T>>),
    /// Already decided when it was made; `None` once taken.
    Ready(Option<Result<T>>),
}

impl<T> Pending<T> {
    /// A write answered through `rx`; a dropped sender resolves to [`StoreError::Closed`].
    pub fn from_receiver(rx: tokio::sync::oneshot::Receiver<Result<T>>) -> Self {
        Pending(PendingState::Waiting(rx))
    }

    /// A write whose result is already known (durable already, or refused before any write).
    pub fn ready(result: Result<T>) -> Self {
        Pending(PendingState::Ready(Some(result)))
    }

    /// Block the calling thread until the operation is durable.
    ///
    /// # Errors
    /// The operation's error, or [`StoreError::Closed`] if the writer stopped.
    pub fn wait(self) -> Result<T> {
        match self.0 {
            PendingState::Waiting(rx) => rx.blocking_recv().unwrap_or(Err(StoreError::Closed)),
            PendingState::Ready(r) => r.unwrap_or(Err(StoreError::Closed)),
        }
    }
}

impl<T> Unpin for Pending<T> {}

impl<T> Future for Pending<T> {
    type Output = Result<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            PendingState::Waiting(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(StoreError::Closed))),
            PendingState::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(StoreError::Closed))),
        }
    }
}

/// The `meta` partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    pub epoch: String,
    pub relay_pubkey: Option<Key32>,
    pub schema_version: u32,
    pub heartbeat_ms: Option<u64>,
    pub created_ms: u64,
}

/// One enrolment, keyed by host key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Enrolment {
    pub host_pubkey: Key32,
    /// The name as enrolled (case kept); lookups are case-insensitive.
    pub host_name: String,
    /// The host's own unproven owner claim; decides nothing.
    pub owner_fp: String,
    /// A proven account (from a strong authority), if any.
    pub account: Option<String>,
    /// Which authority enrolled it ("host-key", ...).
    pub authorized_by: String,
    /// Strength of that authority; a weaker one never overwrites a stronger one's account.
    pub authority_rank: u8,
    pub enrolled_at_ms: u64,
    pub revoked_at_ms: Option<u64>,
}

/// What `enrol` is asked to record.
#[derive(Debug, Clone)]
pub struct EnrolRequest {
    pub host_pubkey: Key32,
    pub host_name: String,
    pub owner_fp: String,
    pub account: Option<String>,
    pub authorized_by: String,
    pub authority_rank: u8,
    /// Cap on live enrolments (a new key beyond it is refused).
    pub max_live: u64,
    /// Whether a new key must redeem an invite in this enrolment's commit (the invite
    /// authority); a key with a live enrolment redeems nothing and needs none.
    pub invite: InviteClaim,
}

/// What an enrolment says about invites.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InviteClaim {
    /// No invite is needed (every authority but the invite authority).
    #[default]
    NotNeeded,
    /// A new key needs one and presented none.
    Missing,
    /// A new key redeems the invite with this hash.
    Presented(InviteHash),
}

/// How `enrol` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrolOutcome {
    /// New enrolment recorded.
    Enrolled,
    /// The key was already enrolled and live; nothing weaker overwrote anything.
    AlreadyEnrolled,
    /// The key is revoked and stays revoked.
    Revoked,
    /// Another live key has this name inside the same proven account.
    NameTaken,
    /// `max_live` live enrolments exist already.
    Capacity,
    /// A new key presented no invite where one is needed, or its invite is not stored (never
    /// issued, redeemed already) or has expired.
    InviteRefused,
}

/// The SHA-256 of an invite code: the store keeps only this, never the code.
pub type InviteHash = [u8; 32];

/// A single-use enrolment invite (`relay-tool invite`): redeemed by the first new enrolment
/// that presents its code before `expires_ms`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Invite {
    pub hash: InviteHash,
    pub created_ms: u64,
    pub expires_ms: u64,
    /// The operator's note (who it is for), at most [`MAX_REASON_CHARS`] characters.
    pub note: String,
}

/// How `put_invite` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InviteOutcome {
    /// Stored.
    Issued,
    /// [`MAX_INVITES`] unexpired invites are stored already.
    Full,
}

/// Most unexpired invites stored at once (an operator's tool issues them; the bound keeps the
/// prune in `put_invite` one bounded scan).
pub const MAX_INVITES: u64 = 10_000;

/// A signed encryption-key advertisement, stored as received.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncAd {
    pub host_pubkey: Key32,
    pub enc_pub: String,
    pub sig: String,
    pub at_ms: u64,
}

/// A signed, expiring v2 encryption-key advertisement, stored as received: the relay checked
/// it; the store keeps its canonical record and signature byte for byte. Independent of the v1
/// [`EncAd`] of the same key (each publish leaves the other alone).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EncAdV2 {
    pub host_pubkey: Key32,
    /// canonical(ad) exactly as signed (extra signed fields included).
    pub record: Vec<u8>,
    /// The signature string as received.
    pub sig: String,
    /// When the relay stored it.
    pub at_ms: u64,
}

/// Both enc ads of one key, read from one snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EncAds {
    pub v1: Option<EncAd>,
    pub v2: Option<EncAdV2>,
}

impl EncAds {
    /// Neither ad is stored.
    pub fn is_empty(&self) -> bool {
        self.v1.is_none() && self.v2.is_none()
    }
}

/// A target's sender allowlist, as signed by the target.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SenderList {
    pub target: Key32,
    pub senders: Vec<Key32>,
    pub iat_ms: u64,
    /// The list record's canonical JSON bytes and its signature, kept for audit and dumps.
    pub record: Vec<u8>,
    pub sig: String,
}

/// What admitting a push to one target reads: its enrolment (live or revoked) and its sender
/// list ([`crate::RelayStore::admissions`]). The list may be left unread (`None`) when the
/// enrolment is missing or revoked, since the push is refused then whatever it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    pub enrolment: Option<Enrolment>,
    pub senders: Option<SenderList>,
}

/// How `put_sender_list` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderListOutcome {
    Stored,
    /// An equal or newer list (by `iat_ms`) is stored already; nothing changed.
    NotNewer,
}

/// What kind of item a queue row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ItemKind {
    Envelope,
    Receipt,
    /// A relay-signed expiry notice (docs/protocol.md §4).
    Expired,
}

impl ItemKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ItemKind::Envelope => "envelope",
            ItemKind::Receipt => "receipt",
            ItemKind::Expired => "expired",
        }
    }
}

/// One target of an item to insert. `wire` is stored exactly as given.
#[derive(Debug, Clone)]
pub struct NewTarget {
    pub target: Key32,
    pub wire: Vec<u8>,
    /// SHA-256 of `wire` (computed by the caller, off the writer thread).
    pub wire_hash: [u8; 32],
}

/// An item for one or more targets; inserted atomically over all of them or not at all.
#[derive(Debug, Clone)]
pub struct NewItem {
    pub kind: ItemKind,
    pub item_id: String,
    pub sender: Key32,
    pub targets: Vec<NewTarget>,
}

/// Quota limits applied in the commit (inclusive: reaching a cap exactly is fine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    pub max_queue_items: u64,
    pub max_queue_bytes: u64,
    pub max_sender_items: u64,
    pub max_sender_bytes: u64,
    pub max_account_items: u64,
    pub max_account_bytes: u64,
}

impl Quotas {
    /// Every cap at `n` (tests and fixtures: one figure for all six).
    #[must_use]
    pub const fn all(n: u64) -> Quotas {
        Quotas {
            max_queue_items: n,
            max_queue_bytes: n,
            max_sender_items: n,
            max_sender_bytes: n,
            max_account_items: n,
            max_account_bytes: n,
        }
    }
}

/// Which quota refused an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaKind {
    QueueItems,
    QueueBytes,
    SenderItems,
    SenderBytes,
    AccountItems,
    AccountBytes,
}

impl QuotaKind {
    /// Free text naming the quota, used after `rejected:quota:`.
    pub fn describe(self) -> &'static str {
        match self {
            QuotaKind::QueueItems => "target queue items",
            QuotaKind::QueueBytes => "target queue bytes",
            QuotaKind::SenderItems => "sender share items",
            QuotaKind::SenderBytes => "sender share bytes",
            QuotaKind::AccountItems => "account items",
            QuotaKind::AccountBytes => "account bytes",
        }
    }
}

/// One insert request (one logical operation).
#[derive(Debug, Clone)]
pub struct InsertRequest {
    pub item: NewItem,
    pub quotas: Quotas,
    /// Items expire at accepted_at + retention; [`NEVER_EXPIRES`] stores an item no sweep
    /// expires (legacy v1 mail).
    pub retention_ms: u64,
    /// The sender must hold a live enrolment at commit time (a host's push: a revocation that
    /// commits between its hop check and its insert refuses it); false for the relay's own
    /// expiry notices, whose sender is the relay key.
    pub require_live_sender: bool,
}

/// As [`InsertRequest::retention_ms`]: the item never expires. Its `expires_at_ms` is this
/// value, beyond any sweep's `now`; quotas still count it and an ack still removes it.
pub const NEVER_EXPIRES: u64 = u64::MAX;

/// Whether a target's row was new or a dedup hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetSeq {
    pub seq: u64,
    pub duplicate: bool,
}

/// How an insert ended. Nothing is stored unless it is `Stored`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Every target stored or deduplicated; seqs in target order. `at_ms` is now for an item with
    /// at least one new target, else the original acceptance time.
    Stored { at_ms: u64, targets: Vec<TargetSeq> },
    /// Same (sender, item_id, target) stored with another wire hash.
    Conflict { target: Key32 },
    /// A quota would be exceeded for this target.
    Quota { target: Key32, which: QuotaKind },
    /// The target is not (or no longer) enrolled and live at commit time.
    TargetNotEnrolled { target: Key32 },
    /// [`InsertRequest::require_live_sender`] and the sender is not (or no longer) enrolled
    /// and live at commit time.
    SenderNotEnrolled,
}

/// What dedup knows about (sender, item_id, target).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DedupRow {
    pub wire_hash: [u8; 32],
    pub seq: u64,
    pub accepted_at_ms: u64,
}

/// One queued item as pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedItem {
    pub seq: u64,
    pub kind: ItemKind,
    pub item_id: String,
    pub sender: Key32,
    pub wire: Vec<u8>,
    pub accepted_at_ms: u64,
    pub expires_at_ms: u64,
}

/// A pull page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    pub items: Vec<QueuedItem>,
    /// Last seq allocated for the target (0 if none).
    pub head_seq: u64,
    pub acked_through: u64,
    /// More items exist after the last one returned.
    pub more: bool,
}

/// A target's queue position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor {
    pub head_seq: u64,
    pub acked_through: u64,
}

/// How an ack ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    Acked {
        acked_through: u64,
        deleted: u64,
        head_seq: u64,
    },
    /// `through` is above the head: nothing changed.
    BeyondHead { head_seq: u64 },
}

/// An item the sweep found past its expiry (already deleted in the same batch as any notice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredItem {
    pub target: Key32,
    pub seq: u64,
    pub kind: ItemKind,
    pub item_id: String,
    pub sender: Key32,
    pub accepted_at_ms: u64,
    pub expires_at_ms: u64,
}

/// Builds the expiry notice for an expired item (or `None` for no notice). Runs on the writer
/// thread inside the sweep's batch, so it must be quick and must not call back into the store.
pub type NoticeFn = Box<dyn Fn(&ExpiredItem, u64) -> Option<NewItem> + Send + 'static>;

/// What a sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepReport {
    pub expired: u64,
    pub notices: u64,
    pub dedup_pruned: u64,
    /// True when the sweep stopped at its per-call cap and should be called again.
    pub more: bool,
}

/// How a key rotation (rebind) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebindOutcome {
    /// Queue moved: `moved` items re-sequenced under the new key.
    Moved {
        moved: u64,
    },
    OldNotEnrolled,
    NewRevoked,
}

/// One relay-log entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpEntry {
    /// Position in the log (never reused; the chain covers it).
    pub seq: u64,
    pub at_ms: u64,
    /// e.g. "enrol", "re-enrol", "rotate-key", "backup", "restore", "epoch-rotate", "migrate".
    pub kind: String,
    /// Human-readable detail (fingerprints, names and counts; never keys or wire bytes).
    pub detail: String,
    /// SHA-256 over the previous entry's hash and this entry's canonical bytes.
    pub hash: [u8; 32],
}

/// Usage counters of one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub items: u64,
    pub bytes: u64,
}

/// Whole-store figures for `relay-tool stats`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub meta: Meta,
    pub live_enrolments: u64,
    pub revoked_enrolments: u64,
    pub queued: Usage,
    /// Top targets by queued items, largest first (at most 10).
    pub top_targets: Vec<(Key32, Usage)>,
    pub dedup_rows: u64,
    /// Stored v1 enc ads (`enc_pub` + `sig` pairs).
    pub enc_ads_v1: u64,
    /// Stored v2 (signed, expiring) enc ads.
    pub enc_ads_v2: u64,
    pub oldest_queued_ms: Option<u64>,
    pub disk_bytes: u64,
}

/// Summary of a backup file (written or verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    pub format_version: u32,
    pub schema_version: u32,
    pub relay_pubkey: Option<Key32>,
    pub epoch: String,
    pub created_ms: u64,
    /// Records per partition, by partition name, in file order.
    pub counts: Vec<(String, u64)>,
    /// Whole-file checksum (hex), as in the trailer.
    pub checksum: String,
    pub file_bytes: u64,
    /// The relay log's hash chain, recomputed ([`LogVerdict::Unchained`] before schema 4).
    pub log: LogVerdict,
}

/// Why a backup file was refused. Each is distinct and names where.
#[derive(Debug)]
pub enum BackupError {
    BadMagic,
    NewerFormat {
        found: u32,
        supported: u32,
    },
    /// A record or trailer checksum failed at this byte offset.
    Damaged {
        offset: u64,
        why: String,
    },
    /// The file ends before its trailer.
    Truncated {
        offset: u64,
    },
    /// Counts in the trailer disagree with the records.
    CountMismatch {
        partition: String,
        expected: u64,
        found: u64,
    },
    Io {
        context: String,
        source: std::io::Error,
    },
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

/// The partition names, in backup/dump order.
pub const PARTITIONS: [&str; 13] = [
    "meta",
    "enrolments",
    "enc_ads",
    "sender_lists",
    "items",
    "dedup",
    "seqs",
    "acked",
    "usage",
    "expiry",
    "ops",
    "dedup_expiry",
    "sender_index",
];

impl From<StoreError> for BackupError {
    fn from(e: StoreError) -> Self {
        BackupError::Store(e)
    }
}

/// Milliseconds in a UTC day: the resolution of "last seen".
pub const DAY_MS: u64 = 86_400_000;

/// The UTC day number (days since the Unix epoch) of a time.
pub fn utc_day(ms: u64) -> u32 {
    u32::try_from(ms / DAY_MS).unwrap_or(u32::MAX)
}

/// When a host was last seen at day resolution: the start of its last-seen day, or its
/// enrolment time when that is later or no day is recorded (a missing row: seen at enrolment).
pub fn last_seen_ms(enrolled_at_ms: u64, last_seen_day: Option<u32>) -> u64 {
    last_seen_day.map_or(enrolled_at_ms, |d| {
        (u64::from(d) * DAY_MS).max(enrolled_at_ms)
    })
}

/// One enrolment as `relay-tool hosts` lists it, read from one snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRow {
    pub enrolment: Enrolment,
    /// The UTC day it was last seen (a hop by it, a push to it); `None`: not since enrolment.
    pub last_seen_day: Option<u32>,
    /// Its queue (the usage counters).
    pub queue: Usage,
    /// When its v1 enc ad was stored, if it has one.
    pub enc_ad_v1_at_ms: Option<u64>,
    /// When its v2 enc ad was stored, if it has one.
    pub enc_ad_v2_at_ms: Option<u64>,
}

impl HostRow {
    /// See [`last_seen_ms`].
    pub fn last_seen_ms(&self) -> u64 {
        last_seen_ms(self.enrolment.enrolled_at_ms, self.last_seen_day)
    }
}

/// Which enrolments `hosts` lists (all conditions must hold).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFilter {
    /// Only this name (case-insensitive, whole name).
    pub name: Option<String>,
    /// Only revoked keys.
    pub revoked_only: bool,
    /// Only keys last seen at or before this time (ms).
    pub seen_at_or_before_ms: Option<u64>,
}

impl HostFilter {
    /// Whether `row` passes.
    pub fn matches(&self, row: &HostRow) -> bool {
        let name_ok = self
            .name
            .as_ref()
            .is_none_or(|n| n.to_lowercase() == row.enrolment.host_name.to_lowercase());
        let revoked_ok = !self.revoked_only || row.enrolment.revoked_at_ms.is_some();
        let idle_ok = self
            .seen_at_or_before_ms
            .is_none_or(|t| row.last_seen_ms() <= t);
        name_ok && revoked_ok && idle_ok
    }
}

/// What one idle-expiry call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IdleReport {
    /// Enrolment rows looked at.
    pub scanned: u64,
    /// Live enrolments deleted (idle, empty queue).
    pub expired: u64,
    /// Where the next call continues (`None`: the scan reached the end).
    pub next: Option<Key32>,
}

/// The largest item any relay accepts: the most `--max-item-bytes` may be (`serve` refuses
/// more), the largest item whose base64 form fits an 8 MiB push body beside 4,096 bytes of the
/// JSON around it (`mbx_relay::http::body::MAX_ITEM_BYTES_IN_BODY` is this number). A backup
/// holding a larger item is damage: no relay could have stored it.
pub const MAX_ITEM_BYTES_ACCEPTED: u64 = ((8 * 1024 * 1024 - 4_096) / 4 * 3) as u64;

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
    pub max_age_ms: u64,
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
        entries: u64,
        checkpoint: Option<LogCheckpoint>,
    },
    /// The first entry that does not match (`seq`: the seq expected or found there).
    Broken { seq: u64, why: String },
    /// The log predates the chain (a schema < 4 backup): nothing to check.
    Unchained,
}

/// An admin's revocation and/or purge of one key (`relay-tool revoke` / `purge`).
#[derive(Debug, Clone)]
pub struct RevokeRequest {
    pub key: Key32,
    /// Revoke the key exactly as a rotation revokes the old one (no-op if already revoked).
    pub revoke: bool,
    /// Delete its queued items, queueing an expiry notice for each envelope's sender.
    pub purge: bool,
    /// Quotas and retention the notices are inserted under (as the sweep's).
    pub quotas: Quotas,
    pub retention_ms: u64,
    /// Who asked (the admin's uid) and why, for the relay log.
    pub admin_uid: u32,
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
    pub purged_bytes: u64,
    /// Expiry notices queued for the purged envelopes' senders.
    pub notices: u64,
    /// Allowlists of other targets the key was taken out of.
    pub lists_changed: u64,
}

/// How a revoke or purge ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RevokeOutcome {
    Done(RevokeReport),
    /// No enrolment, live or revoked, has this key: nothing changed.
    UnknownKey,
    /// The queue holds more than [`MAX_PURGE_ITEMS`] items: nothing changed.
    QueueTooLarge {
        items: u64,
    },
}

/// Most items a purge deletes in its one batch: the largest queue `--max-queue-items` allows
/// by default is 10,000; a queue over this bound (a raised quota) is refused, not half-purged.
pub const MAX_PURGE_ITEMS: u64 = 100_000;

/// Longest reason (characters) a revoke or purge records; longer ones are cut.
pub const MAX_REASON_CHARS: usize = 200;
