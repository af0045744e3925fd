//! The typed records of the logical backup stream (postcard-encoded, one per frame).

use serde::{Deserialize, Serialize};

use crate::{
    DedupRow, DenyEntry, EncAd, EncAdV2, Enrolment, EnrolmentBeforeClient, Invite, ItemKind, Key32,
    SenderList,
};

/// The file header: who the backup belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The store-level schema whose rules the records follow ([`crate::SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// The relay key the store is pinned to (none before the first start).
    pub relay_pubkey: Option<Key32>,
    /// The store's epoch when the backup was taken.
    pub epoch: String,
    /// When the store was created.
    pub created_ms: u64,
    /// The backend that wrote it ("fjall", "postgres"), for the operator.
    pub backend: String,
}

/// The store's meta: the epoch and relay key pin (also in the header), heartbeat, and the
/// relay log's head and checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaRecord {
    /// The store's epoch.
    pub epoch: String,
    /// The relay key it is pinned to.
    pub relay_pubkey: Option<Key32>,
    /// When the store was created.
    pub created_ms: u64,
    /// The last heartbeat written.
    pub heartbeat_ms: Option<u64>,
    /// The seq the next relay-log entry gets.
    pub ops_next: u64,
    /// Hash of the newest entry (`None`: the log is empty and never had entries).
    pub ops_head: Option<[u8; 32]>,
    /// Seq and hash of the last dropped entry, where the chain starts.
    pub ops_checkpoint: Option<(u64, [u8; 32])>,
}

/// One enrolment with the day its host was last seen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrolmentRecord {
    /// The enrolment as stored (live or revoked).
    pub enrolment: Enrolment,
    /// Day number (since the epoch) the host was last seen, if ever.
    pub last_seen_day: Option<u32>,
}

/// An [`EnrolmentRecord`] as format 5 wrote it (its enrolment without `org` and `client_id`).
#[derive(Deserialize)]
struct EnrolmentRecordFormat5 {
    enrolment: EnrolmentBeforeClient,
    last_seen_day: Option<u32>,
}

/// A target's queue position: the last seq handed out and what is acked (kept even when the
/// queue is empty: seqs are never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRecord {
    /// Whose queue.
    pub target: Key32,
    /// The last seq handed out.
    pub head_seq: u64,
    /// Everything up to this seq is acked.
    pub acked_through: u64,
}

/// One queued item with all its metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRow {
    /// Whose queue it is in.
    pub target: Key32,
    /// Its seq there.
    pub seq: u64,
    /// Envelope, receipt or relay notice.
    pub kind: ItemKind,
    /// The sender's id of the item.
    pub item_id: String,
    /// Who pushed it.
    pub sender: Key32,
    /// Exactly the bytes the sender gave.
    #[serde(with = "crate::serde_bytes")]
    pub wire: Vec<u8>,
    /// SHA-256 of `wire`, for dedup.
    pub wire_hash: [u8; 32],
    /// When it was accepted.
    pub accepted_at_ms: u64,
    /// When the sweep expires it.
    pub expires_at_ms: u64,
    /// The proven account charged for it.
    pub account: Option<String>,
}

/// One dedup row of (sender, item_id, target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupRecord {
    /// The queue the item went to.
    pub target: Key32,
    /// Who pushed it.
    pub sender: Key32,
    /// The sender's id of the item.
    pub item_id: String,
    /// The hash, seq and time answered to a retry.
    pub row: DedupRow,
}

/// The item of an earlier dedup row left its queue at `gone_at_ms`: the row's dedup horizon
/// runs from then (a row without one belongs to a queued item and is never pruned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupGone {
    /// The queue the item went to.
    pub target: Key32,
    /// Who pushed it.
    pub sender: Key32,
    /// The sender's id of the item.
    pub item_id: String,
    /// When the item left its queue (acked, expired or purged).
    pub gone_at_ms: u64,
}

/// One record of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The store's meta (first in the stream).
    Meta(MetaRecord),
    /// One enrolment.
    Enrolment(EnrolmentRecord),
    /// One v1 enc ad.
    EncAd(EncAd),
    /// One v2 enc ad.
    EncAdV2(EncAdV2),
    /// One target's sender allow-list.
    SenderList(SenderList),
    /// One queue position.
    Queue(QueueRecord),
    /// One queued item.
    Item(ItemRow),
    /// One dedup row.
    Dedup(DedupRecord),
    /// When a dedup row's item left its queue.
    DedupGone(DedupGone),
    /// A relay-log entry, with its chain hash.
    Op(crate::OpEntry),
    /// One unredeemed invite (its hash, never a code; format 6 on).
    Invite(Invite),
    /// One deny-list entry (format 6 on).
    Deny(DenyEntry),
}

/// The kinds, in stream order (the frame's kind byte is the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum RecordKind {
    /// [`Record::Meta`].
    Meta = 0,
    /// [`Record::Enrolment`].
    Enrolment = 1,
    /// [`Record::EncAd`].
    EncAd = 2,
    /// [`Record::EncAdV2`].
    EncAdV2 = 3,
    /// [`Record::SenderList`].
    SenderList = 4,
    /// [`Record::Queue`].
    Queue = 5,
    /// [`Record::Item`].
    Item = 6,
    /// [`Record::Dedup`].
    Dedup = 7,
    /// [`Record::DedupGone`].
    DedupGone = 8,
    /// [`Record::Op`].
    Op = 9,
    /// [`Record::Invite`] (format 6 on).
    Invite = 10,
    /// [`Record::Deny`] (format 6 on).
    Deny = 11,
}

impl RecordKind {
    /// Every kind, in stream order.
    pub const ALL: [RecordKind; 12] = [
        RecordKind::Meta,
        RecordKind::Enrolment,
        RecordKind::EncAd,
        RecordKind::EncAdV2,
        RecordKind::SenderList,
        RecordKind::Queue,
        RecordKind::Item,
        RecordKind::Dedup,
        RecordKind::DedupGone,
        RecordKind::Op,
        RecordKind::Invite,
        RecordKind::Deny,
    ];

    /// The name counts are reported under.
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Meta => "meta",
            RecordKind::Enrolment => "enrolments",
            RecordKind::EncAd => "enc_ads_v1",
            RecordKind::EncAdV2 => "enc_ads_v2",
            RecordKind::SenderList => "sender_lists",
            RecordKind::Queue => "queues",
            RecordKind::Item => "items",
            RecordKind::Dedup => "dedup",
            RecordKind::DedupGone => "dedup_horizons",
            RecordKind::Op => "ops",
            RecordKind::Invite => "invites",
            RecordKind::Deny => "deny_list",
        }
    }

    /// The kind of a frame's kind byte in a file of `format`.
    pub(crate) fn from_u8(b: u8, format: u32) -> Option<RecordKind> {
        RecordKind::ALL[..kinds_in(format)]
            .get(usize::from(b))
            .copied()
    }
}

/// How many kinds (the first of [`RecordKind::ALL`]) a file of `format` has: format 5 has
/// neither invites nor deny entries.
pub(crate) fn kinds_in(format: u32) -> usize {
    if format <= 5 {
        10
    } else {
        RecordKind::ALL.len()
    }
}

/// The relay-log entry as encoded (the in-memory [`crate::OpEntry`] has no serde derive).
#[derive(Serialize, Deserialize)]
struct OpWire {
    seq: u64,
    at_ms: u64,
    kind: String,
    detail: String,
    hash: [u8; 32],
}

impl Record {
    /// Its kind.
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Meta(_) => RecordKind::Meta,
            Record::Enrolment(_) => RecordKind::Enrolment,
            Record::EncAd(_) => RecordKind::EncAd,
            Record::EncAdV2(_) => RecordKind::EncAdV2,
            Record::SenderList(_) => RecordKind::SenderList,
            Record::Queue(_) => RecordKind::Queue,
            Record::Item(_) => RecordKind::Item,
            Record::Dedup(_) => RecordKind::Dedup,
            Record::DedupGone(_) => RecordKind::DedupGone,
            Record::Op(_) => RecordKind::Op,
            Record::Invite(_) => RecordKind::Invite,
            Record::Deny(_) => RecordKind::Deny,
        }
    }

    /// The body's postcard bytes, appended to `out`.
    pub(crate) fn encode_into(&self, out: Vec<u8>) -> Vec<u8> {
        let r = match self {
            Record::Meta(v) => postcard::to_extend(v, out),
            Record::Enrolment(v) => postcard::to_extend(v, out),
            Record::EncAd(v) => postcard::to_extend(v, out),
            Record::EncAdV2(v) => postcard::to_extend(v, out),
            Record::SenderList(v) => postcard::to_extend(v, out),
            Record::Queue(v) => postcard::to_extend(v, out),
            Record::Item(v) => postcard::to_extend(v, out),
            Record::Dedup(v) => postcard::to_extend(v, out),
            Record::DedupGone(v) => postcard::to_extend(v, out),
            Record::Invite(v) => postcard::to_extend(v, out),
            Record::Deny(v) => postcard::to_extend(v, out),
            Record::Op(e) => postcard::to_extend(
                &OpWire {
                    seq: e.seq,
                    at_ms: e.at_ms,
                    kind: e.kind.clone(),
                    detail: e.detail.clone(),
                    hash: e.hash,
                },
                out,
            ),
        };
        // postcard into a Vec cannot fail for these plain types
        r.unwrap_or_default()
    }

    /// Decode a body of `kind` from a file of `format`.
    pub(crate) fn decode(
        kind: RecordKind,
        b: &[u8],
        format: u32,
    ) -> Result<Record, postcard::Error> {
        Ok(match kind {
            RecordKind::Meta => Record::Meta(postcard::from_bytes(b)?),
            RecordKind::Enrolment if format <= 5 => {
                let r: EnrolmentRecordFormat5 = postcard::from_bytes(b)?;
                Record::Enrolment(EnrolmentRecord {
                    enrolment: r.enrolment.into(),
                    last_seen_day: r.last_seen_day,
                })
            }
            RecordKind::Enrolment => Record::Enrolment(postcard::from_bytes(b)?),
            RecordKind::Invite => Record::Invite(postcard::from_bytes(b)?),
            RecordKind::Deny => Record::Deny(postcard::from_bytes(b)?),
            RecordKind::EncAd => Record::EncAd(postcard::from_bytes(b)?),
            RecordKind::EncAdV2 => Record::EncAdV2(postcard::from_bytes(b)?),
            RecordKind::SenderList => Record::SenderList(postcard::from_bytes(b)?),
            RecordKind::Queue => Record::Queue(postcard::from_bytes(b)?),
            RecordKind::Item => Record::Item(postcard::from_bytes(b)?),
            RecordKind::Dedup => Record::Dedup(postcard::from_bytes(b)?),
            RecordKind::DedupGone => Record::DedupGone(postcard::from_bytes(b)?),
            RecordKind::Op => {
                let o: OpWire = postcard::from_bytes(b)?;
                Record::Op(crate::OpEntry {
                    seq: o.seq,
                    at_ms: o.at_ms,
                    kind: o.kind,
                    detail: o.detail,
                    hash: o.hash,
                })
            }
        })
    }
}
