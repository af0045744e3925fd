//! Whole-store figures for `relay-tool stats`, from one durable snapshot.

use std::ops::Bound;

use fjall::Readable;

use crate::codec::{self, meta_key, EncAdKey, UsageScope, EXPIRY_ITEM};
use crate::ops::enrol;
use crate::parts::Part;
use crate::reader::{self, meta_u64, Reader, SnapView};
use relay_store::{Key32, Result, Stats, Usage};

/// Targets listed in `top_targets`.
const TOP: usize = 10;

/// Whole-store figures.
///
/// # Errors
/// `Closed`, `Corrupt`, `Engine`.
pub(crate) fn stats(v: &SnapView) -> Result<Stats> {
    let mut queued = Usage::default();
    let mut targets: Vec<(Key32, Usage)> = Vec::new();
    // Per-target usage rows sort first (tag 0x00); stop at the first other row.
    for g in v.snap.prefix(v.parts.ks(Part::Usage), [0u8]) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let Some(UsageScope::Target(t)) = codec::usage_key_parse(&k) else {
            continue;
        };
        let u: Usage = codec::dec(&val, "usage")?;
        queued.items += u.items;
        queued.bytes += u.bytes;
        targets.push((t, u));
    }
    targets.sort_by(|a, b| b.1.items.cmp(&a.1.items).then(a.0.cmp(&b.0)));
    targets.truncate(TOP);
    // O(rows): an admin figure, not on any request path.
    let dedup_rows = v.snap.iter(v.parts.ks(Part::Dedup)).count() as u64;
    let (mut enc_ads_v1, mut enc_ads_v2) = (0u64, 0u64);
    for g in v.snap.iter(v.parts.ks(Part::EncAds)) {
        match codec::enc_ad_key_parse(&g.key().map_err(crate::engine_error)?) {
            Some(EncAdKey::V1(_)) => enc_ads_v1 += 1,
            Some(EncAdKey::V2(_)) => enc_ads_v2 += 1,
            None => {}
        }
    }
    let first = v.range(
        Part::Expiry,
        Bound::Included(&[EXPIRY_ITEM][..]),
        Bound::Excluded(&[EXPIRY_ITEM + 1][..]),
        1,
    )?;
    let mut oldest_queued_ms = None;
    if let Some((k, _)) = first.first() {
        if let Some((_, t, seq)) = codec::expiry_item_parse(k) {
            oldest_queued_ms = reader::item(v, &t, seq)?.map(|r| r.accepted_at_ms);
        }
    }
    Ok(Stats {
        meta: reader::meta(v)?,
        live_enrolments: enrol::live_count(v)?,
        revoked_enrolments: meta_u64(v, meta_key::REVOKED_ENROLMENTS)?.unwrap_or(0),
        queued,
        top_targets: targets,
        dedup_rows,
        enc_ads_v1,
        enc_ads_v2,
        oldest_queued_ms,
        disk_bytes: v.parts.db.disk_space().unwrap_or(0),
    })
}
