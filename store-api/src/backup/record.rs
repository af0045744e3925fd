//! The typed records of the logical backup stream (postcard-encoded, one per frame).

use serde::{Deserialize, Serialize};

use crate::{DedupRow, EncAd, EncAdV2, Enrolment, ItemKind, Key32, SenderList};

/// The file header: who the backup belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// The store-level schema whose rules the records follow ([`crate::SCHEMA_VERSION`]).
    pub schema_version: u32,
    pub relay_pubkey: Option<Key32>,
    pub epoch: String,
    pub created_ms: u64,
    /// The backend that wrote it ("fjall", "postgres"), for the operator.
    pub backend: String,
}

/// The store's meta: the epoch and relay key pin (also in the header), heartbeat, and the
/// relay log's head and checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaRecord {
    pub epoch: String,
    pub relay_pubkey: Option<Key32>,
    pub created_ms: u64,
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
    pub enrolment: Enrolment,
    pub last_seen_day: Option<u32>,
}

/// A target's queue position: the last seq handed out and what is acked (kept even when the
/// queue is empty: seqs are never reused).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueRecord {
    pub target: Key32,
    pub head_seq: u64,
    pub acked_through: u64,
}

/// One queued item with all its metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemRow {
    pub target: Key32,
    pub seq: u64,
    pub kind: ItemKind,
    pub item_id: String,
    pub sender: Key32,
    /// Exactly the bytes the sender gave.
    #[serde(with = "crate::serde_bytes")]
    pub wire: Vec<u8>,
    pub wire_hash: [u8; 32],
    pub accepted_at_ms: u64,
    pub expires_at_ms: u64,
    /// The proven account charged for it.
    pub account: Option<String>,
}

/// One dedup row of (sender, item_id, target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupRecord {
    pub target: Key32,
    pub sender: Key32,
    pub item_id: String,
    pub row: DedupRow,
}

/// The item of an earlier dedup row left its queue at `gone_at_ms`: the row's dedup horizon
/// runs from then (a row without one belongs to a queued item and is never pruned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupGone {
    pub target: Key32,
    pub sender: Key32,
    pub item_id: String,
    pub gone_at_ms: u64,
}

/// One record of the stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    Meta(MetaRecord),
    Enrolment(EnrolmentRecord),
    EncAd(EncAd),
    EncAdV2(EncAdV2),
    SenderList(SenderList),
    Queue(QueueRecord),
    Item(ItemRow),
    Dedup(DedupRecord),
    DedupGone(DedupGone),
    /// A relay-log entry, with its chain hash.
    Op(crate::OpEntry),
}

/// The kinds, in stream order (the frame's kind byte is the index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum RecordKind {
    Meta = 0,
    Enrolment = 1,
    EncAd = 2,
    EncAdV2 = 3,
    SenderList = 4,
    Queue = 5,
    Item = 6,
    Dedup = 7,
    DedupGone = 8,
    Op = 9,
}

impl RecordKind {
    /// Every kind, in stream order.
    pub const ALL: [RecordKind; 10] = [
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
        }
    }

    pub(crate) fn from_u8(b: u8) -> Option<RecordKind> {
        RecordKind::ALL.get(usize::from(b)).copied()
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

    /// Decode a body of `kind`.
    pub(crate) fn decode(kind: RecordKind, b: &[u8]) -> Result<Record, postcard::Error> {
        Ok(match kind {
            RecordKind::Meta => Record::Meta(postcard::from_bytes(b)?),
            RecordKind::Enrolment => Record::Enrolment(postcard::from_bytes(b)?),
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
