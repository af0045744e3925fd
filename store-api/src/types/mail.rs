//! Mail: items, inserts and their outcomes, quotas and usage, pages, cursors, acks and the sweep.

use crate::Key32;

/// What kind of item a queue row holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ItemKind {
    /// A host's sealed message to the target.
    Envelope,
    /// A signed delivery receipt travelling back to the sender.
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
    /// The queue the item goes to.
    pub target: Key32,
    /// The item's bytes for this target, stored and served exactly as given.
    pub wire: Vec<u8>,
    /// SHA-256 of `wire` (computed by the caller, off the writer thread).
    pub wire_hash: [u8; 32],
}

/// An item for one or more targets; inserted atomically over all of them or not at all.
#[derive(Debug, Clone)]
pub struct NewItem {
    /// Envelope, receipt or relay notice.
    pub kind: ItemKind,
    /// The sender's own id: with sender and target, the dedup key.
    pub item_id: String,
    /// Who pushed it (charged against its sender share).
    pub sender: Key32,
    /// Every target: all stored or none.
    pub targets: Vec<NewTarget>,
}

/// Quota limits applied in the commit (inclusive: reaching a cap exactly is fine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Cap on one target's queued items.
    pub max_queue_items: u64,
    /// Cap on one target's queued bytes.
    pub max_queue_bytes: u64,
    /// Cap on one sender's items in one target's queue.
    pub max_sender_items: u64,
    /// Cap on one sender's bytes in one target's queue.
    pub max_sender_bytes: u64,
    /// Cap on the items queued for all hosts of one account.
    pub max_account_items: u64,
    /// Cap on the bytes queued for all hosts of one account.
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
    /// The target's queue is full by items.
    QueueItems,
    /// The target's queue is full by bytes.
    QueueBytes,
    /// The sender's share of the queue is full by items.
    SenderItems,
    /// The sender's share of the queue is full by bytes.
    SenderBytes,
    /// The target's account is full by items.
    AccountItems,
    /// The target's account is full by bytes.
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
    /// What to store.
    pub item: NewItem,
    /// The caps checked inside the commit.
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
    /// The item's seq in this target's queue (the original one for a duplicate).
    pub seq: u64,
    /// True when the item was already stored for this target (nothing new was written).
    pub duplicate: bool,
}

/// How an insert ended. Nothing is stored unless it is `Stored`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InsertOutcome {
    /// Every target stored or deduplicated; seqs in target order. `at_ms` is now for an item with
    /// at least one new target, else the original acceptance time.
    Stored {
        /// The acceptance time answered.
        at_ms: u64,
        /// Per target, in request order: its seq and whether it was a duplicate.
        targets: Vec<TargetSeq>,
    },
    /// Same (sender, item_id, target) stored with another wire hash.
    Conflict {
        /// The first target whose stored hash differs.
        target: Key32,
    },
    /// A quota would be exceeded for this target.
    Quota {
        /// The target whose quota is full.
        target: Key32,
        /// Which quota.
        which: QuotaKind,
    },
    /// The target is not (or no longer) enrolled and live at commit time.
    TargetNotEnrolled {
        /// The target without a live enrolment.
        target: Key32,
    },
    /// [`InsertRequest::require_live_sender`] and the sender is not (or no longer) enrolled
    /// and live at commit time.
    SenderNotEnrolled,
}

/// What dedup knows about (sender, item_id, target).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DedupRow {
    /// Hash of the stored wire: a retry with another hash is a conflict.
    pub wire_hash: [u8; 32],
    /// The seq the item got.
    pub seq: u64,
    /// When it was first accepted, answered again to a retry.
    pub accepted_at_ms: u64,
}

/// One queued item as pulled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedItem {
    /// The item's place in its queue.
    pub seq: u64,
    /// Envelope, receipt or relay notice.
    pub kind: ItemKind,
    /// The sender's id of the item.
    pub item_id: String,
    /// Who pushed it.
    pub sender: Key32,
    /// The stored bytes, exactly as pushed.
    pub wire: Vec<u8>,
    /// When the relay accepted it.
    pub accepted_at_ms: u64,
    /// When the sweep will expire it ([`NEVER_EXPIRES`]: never).
    pub expires_at_ms: u64,
}

/// A pull page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The items after the cursor, in seq order.
    pub items: Vec<QueuedItem>,
    /// Last seq allocated for the target (0 if none).
    pub head_seq: u64,
    /// Everything up to this seq is acked (and deleted).
    pub acked_through: u64,
    /// More items exist after the last one returned.
    pub more: bool,
}

/// A target's queue position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor {
    /// Last seq allocated for the target (0 if none).
    pub head_seq: u64,
    /// Everything up to this seq is acked (and deleted).
    pub acked_through: u64,
}

/// How an ack ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// The ack moved the cursor (or it was already there).
    Acked {
        /// The queue is acked through this seq now.
        acked_through: u64,
        /// Items this ack deleted (0 for a repeat).
        deleted: u64,
        /// The queue's head.
        head_seq: u64,
    },
    /// `through` is above the head: nothing changed.
    BeyondHead {
        /// The queue's head: nothing above it can be acked.
        head_seq: u64,
    },
}

/// An item the sweep found past its expiry (already deleted in the same batch as any notice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpiredItem {
    /// The queue it was in.
    pub target: Key32,
    /// Its seq there.
    pub seq: u64,
    /// Envelope, receipt or relay notice (a notice is never notified on).
    pub kind: ItemKind,
    /// The sender's id, named in the notice.
    pub item_id: String,
    /// Who pushed it: the notice goes to this key.
    pub sender: Key32,
    /// When it was accepted.
    pub accepted_at_ms: u64,
    /// When it was due to expire.
    pub expires_at_ms: u64,
}

/// Builds the expiry notice for an expired item (or `None` for no notice). Runs on the writer
/// thread inside the sweep's batch, so it must be quick and must not call back into the store.
pub type NoticeFn = Box<dyn Fn(&ExpiredItem, u64) -> Option<NewItem> + Send + 'static>;

/// What a sweep did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SweepReport {
    /// Items deleted as expired.
    pub expired: u64,
    /// Expiry notices queued for their senders.
    pub notices: u64,
    /// Dedup rows past their horizon that were deleted.
    pub dedup_pruned: u64,
    /// True when the sweep stopped at its per-call cap and should be called again.
    pub more: bool,
}

/// Usage counters of one scope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    /// How many items.
    pub items: u64,
    /// Their wire bytes together.
    pub bytes: u64,
}

/// The largest item any relay accepts: the most `--max-item-bytes` may be (`serve` refuses
/// more), the largest item whose base64 form fits an 8 MiB push body beside 4,096 bytes of the
/// JSON around it (`mbx_relay::http::body::MAX_ITEM_BYTES_IN_BODY` is this number). A backup
/// holding a larger item is damage: no relay could have stored it.
pub const MAX_ITEM_BYTES_ACCEPTED: u64 = ((8 * 1024 * 1024 - 4_096) / 4 * 3) as u64;
