//! Reads shared by the writer (its in-group view) and callers (the durable snapshot), and the
//! typed getters built on them, so each record is decoded in exactly one place.

use std::ops::Bound;
use std::sync::Arc;

use fjall::{Readable, Slice, Snapshot};

use crate::codec::{self, meta_key, ItemRecord, UsageScope};
use crate::parts::{Part, Parts};
use relay_store::{DedupRow, EncAd, EncAdV2, EncAds, Enrolment, Key32, Result, SenderList, Usage};

/// The published durable read view (None once the store is closed).
pub(crate) type ViewSlot = std::sync::Arc<std::sync::RwLock<Option<std::sync::Arc<SnapView>>>>;

/// A key-value view: point reads and bounded ordered range reads.
pub(crate) trait Reader {
    /// The value of `key` in `part`.
    fn get(&self, part: Part, key: &[u8]) -> Result<Option<Slice>>;
    /// At most `limit` pairs of `part` within the bounds, in key order.
    fn range(
        &self,
        part: Part,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Slice, Slice)>>;

    /// At most `limit` pairs whose key starts with `prefix`.
    fn prefix(&self, part: Part, prefix: &[u8], limit: usize) -> Result<Vec<(Slice, Slice)>> {
        let end = codec::prefix_end(prefix);
        let hi = match &end {
            Some(e) => Bound::Excluded(e.as_slice()),
            None => Bound::Unbounded,
        };
        self.range(part, Bound::Included(prefix), hi, limit)
    }
}

/// The durable read view the writer publishes after each fsync'd group.
pub(crate) struct SnapView {
    pub snap: Snapshot,
    pub parts: Arc<Parts>,
}

impl Reader for SnapView {
    fn get(&self, part: Part, key: &[u8]) -> Result<Option<Slice>> {
        self.snap
            .get(self.parts.ks(part), key)
            .map_err(crate::engine_error)
    }

    fn range(
        &self,
        part: Part,
        lo: Bound<&[u8]>,
        hi: Bound<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Slice, Slice)>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for g in self.snap.range::<&[u8], _>(self.parts.ks(part), (lo, hi)) {
            out.push(g.into_inner().map_err(crate::engine_error)?);
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

/// A u64 stored as postcard (0 when absent).
pub(crate) fn get_u64(r: &impl Reader, part: Part, key: &[u8]) -> Result<u64> {
    match r.get(part, key)? {
        Some(v) => codec::dec(&v, part.name()),
        None => Ok(0),
    }
}

pub(crate) fn meta_u64(r: &impl Reader, key: &[u8]) -> Result<Option<u64>> {
    r.get(Part::Meta, key)?
        .map(|v| codec::dec(&v, "meta"))
        .transpose()
}

pub(crate) fn epoch(r: &impl Reader) -> Result<String> {
    match r.get(Part::Meta, meta_key::EPOCH)? {
        Some(v) => codec::dec(&v, "meta epoch"),
        None => Err(relay_store::StoreError::Corrupt("meta has no epoch".into())),
    }
}

pub(crate) fn relay_pubkey(r: &impl Reader) -> Result<Option<Key32>> {
    r.get(Part::Meta, meta_key::RELAY_PUBKEY)?
        .map(|v| codec::dec(&v, "meta relay_pubkey"))
        .transpose()
}

pub(crate) fn schema_version(r: &impl Reader) -> Result<Option<u32>> {
    r.get(Part::Meta, meta_key::SCHEMA_VERSION)?
        .map(|v| codec::dec(&v, "meta schema_version"))
        .transpose()
}

pub(crate) fn meta(r: &impl Reader) -> Result<relay_store::Meta> {
    Ok(relay_store::Meta {
        epoch: epoch(r)?,
        relay_pubkey: relay_pubkey(r)?,
        schema_version: schema_version(r)?.unwrap_or(0),
        heartbeat_ms: meta_u64(r, meta_key::HEARTBEAT)?,
        created_ms: meta_u64(r, meta_key::CREATED)?.unwrap_or(0),
    })
}

pub(crate) fn enrolment(r: &impl Reader, pk: &Key32) -> Result<Option<Enrolment>> {
    r.get(Part::Enrolments, &codec::enrol_key(pk))?
        .map(|v| codec::dec_enrolment(&v))
        .transpose()
}

/// Live enrolments carrying `name` (case-insensitively), at most `limit`.
pub(crate) fn live_by_name(r: &impl Reader, name: &str, limit: usize) -> Result<Vec<Enrolment>> {
    let folded = codec::fold_name(name);
    let mut out = Vec::new();
    // The index holds live keys only (so `limit` rows suffice); each row is re-checked
    // against its enrolment anyway.
    for (k, _) in r.prefix(Part::Enrolments, &codec::name_prefix(name), limit)? {
        if out.len() >= limit {
            break;
        }
        let Some(pk) = codec::name_key_pk(&k) else {
            continue;
        };
        if k.len() != codec::name_key(name, &pk).len() {
            continue;
        }
        if let Some(e) = enrolment(r, &pk)? {
            if e.revoked_at_ms.is_none() && codec::fold_name(&e.host_name) == folded {
                out.push(e);
            }
        }
    }
    Ok(out)
}

pub(crate) fn enc_ad(r: &impl Reader, pk: &Key32) -> Result<Option<EncAd>> {
    r.get(Part::EncAds, pk)?
        .map(|v| codec::dec(&v, "enc ad"))
        .transpose()
}

pub(crate) fn enc_ad_v2(r: &impl Reader, pk: &Key32) -> Result<Option<EncAdV2>> {
    r.get(Part::EncAds, &codec::enc_ad_v2_key(pk))?
        .map(|v| codec::dec(&v, "v2 enc ad"))
        .transpose()
}

/// Both ads of a key, from one view.
pub(crate) fn enc_ads(r: &impl Reader, pk: &Key32) -> Result<EncAds> {
    Ok(EncAds {
        v1: enc_ad(r, pk)?,
        v2: enc_ad_v2(r, pk)?,
    })
}

pub(crate) fn sender_list(r: &impl Reader, target: &Key32) -> Result<Option<SenderList>> {
    r.get(Part::SenderLists, target)?
        .map(|v| codec::dec(&v, "sender list"))
        .transpose()
}

pub(crate) fn dedup_row(r: &impl Reader, dkey: &[u8]) -> Result<Option<DedupRow>> {
    r.get(Part::Dedup, dkey)?
        .map(|v| codec::dec(&v, "dedup"))
        .transpose()
}

pub(crate) fn item(r: &impl Reader, target: &Key32, seq: u64) -> Result<Option<ItemRecord>> {
    r.get(Part::Items, &codec::item_key(target, seq))?
        .map(|v| codec::dec(&v, "item"))
        .transpose()
}

/// Last seq allocated for a target (0: none).
pub(crate) fn head(r: &impl Reader, target: &Key32) -> Result<u64> {
    get_u64(r, Part::Seqs, target)
}

pub(crate) fn acked_through(r: &impl Reader, target: &Key32) -> Result<u64> {
    get_u64(r, Part::Acked, target)
}

pub(crate) fn usage(r: &impl Reader, scope: &UsageScope) -> Result<Usage> {
    match r.get(Part::Usage, &codec::usage_key(scope))? {
        Some(v) => codec::dec(&v, "usage"),
        None => Ok(Usage::default()),
    }
}
