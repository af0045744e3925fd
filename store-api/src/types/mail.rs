//! Mail: items, inserts and their outcomes, quotas and usage, pages, cursors, acks and the sweep.

use crate::Key32;

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

/// Usage counters of one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub items: u64,
    pub bytes: u64,
}

/// The largest item any relay accepts: the most `--max-item-bytes` may be (`serve` refuses
/// more), the largest item whose base64 form fits an 8 MiB push body beside 4,096 bytes of the
/// JSON around it (`mbx_relay::http::body::MAX_ITEM_BYTES_IN_BODY` is this number). A backup
/// holding a larger item is damage: no relay could have stored it.
pub const MAX_ITEM_BYTES_ACCEPTED: u64 = ((8 * 1024 * 1024 - 4_096) / 4 * 3) as u64;
