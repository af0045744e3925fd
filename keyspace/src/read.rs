//! Reads served to callers. Every one comes from the last durable snapshot the writer
//! published, never from committed-but-not-yet-fsynced state.

use std::ops::Bound;

use crate::api::{
    Cursor, DedupRow, EncAd, EncAds, Enrolment, Key32, Meta, Page, QueuedItem, Result, SenderList,
    Usage,
};
use crate::codec::{self, fingerprint, ItemView, UsageScope};
use crate::ops::enrol;
use crate::parts::Part;
use crate::pulled::ItemHint;
use fjall::Readable;

use crate::reader::{self, Reader as _, SnapView};
use crate::Store;

impl Store {
    /// Current meta (epoch, relay key, schema, heartbeat).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn meta(&self) -> Result<Meta> {
        reader::meta(&*self.view()?)
    }

    /// The enrolment of a key, live or revoked.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn enrolment(&self, key: &Key32) -> Result<Option<Enrolment>> {
        reader::enrolment(&*self.view()?, key)
    }

    /// Live enrolments whose name equals `name` case-insensitively, at most `limit`.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn live_enrolments_by_name(&self, name: &str, limit: usize) -> Result<Vec<Enrolment>> {
        reader::live_by_name(&*self.view()?, name, limit)
    }

    /// Number of live enrolments (O(1): a counter).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn live_enrolment_count(&self) -> Result<u64> {
        enrol::live_count(&*self.view()?)
    }

    /// The enc ad of a key.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn enc_ad(&self, key: &Key32) -> Result<Option<EncAd>> {
        reader::enc_ad(&*self.view()?, key)
    }

    /// Both enc ads of a key (v1 pair and v2 ad), from one durable snapshot.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn enc_ads(&self, key: &Key32) -> Result<EncAds> {
        reader::enc_ads(&*self.view()?, key)
    }

    /// A target's sender list.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn sender_list(&self, target: &Key32) -> Result<Option<SenderList>> {
        reader::sender_list(&*self.view()?, target)
    }

    /// The durable dedup row of (sender, item_id, target).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn dedup(&self, sender: &Key32, item_id: &str, target: &Key32) -> Result<Option<DedupRow>> {
        reader::dedup_row(&*self.view()?, &codec::dedup_key(target, sender, item_id))
    }

    /// A page of the target's queue after `after`: at most `limit` items and about `max_bytes`
    /// (always at least one item when any is queued). Reads only durable state.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn pull(&self, target: &Key32, after: u64, limit: usize, max_bytes: u64) -> Result<Page> {
        let (page, hints) = pull(&*self.view()?, target, after, limit, max_bytes)?;
        self.inner.pulled.note(target, hints);
        Ok(page)
    }

    /// Head and acked-through of a target (durable state).
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn cursor(&self, target: &Key32) -> Result<Cursor> {
        let v = self.view()?;
        Ok(Cursor {
            head_seq: reader::head(&*v, target)?,
            acked_through: reader::acked_through(&*v, target)?,
        })
    }

    /// Queue usage of a target.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn usage_target(&self, target: &Key32) -> Result<Usage> {
        reader::usage(&*self.view()?, &UsageScope::Target(*target))
    }

    /// Queue usage of a sender within a target.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn usage_sender(&self, sender: &Key32, target: &Key32) -> Result<Usage> {
        reader::usage(
            &*self.view()?,
            &UsageScope::Sender {
                target: *target,
                sender: *sender,
            },
        )
    }

    /// Queue usage of a proven account.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn usage_account(&self, account: &str) -> Result<Usage> {
        reader::usage(&*self.view()?, &UsageScope::Account(account.to_string()))
    }

    /// Enrolments (live or revoked) whose fingerprint starts with `prefix` (hex digits, dashes
    /// and case ignored), at most `limit`. Reads every enrolment row once, a page at a time:
    /// for an admin's command, not a request path.
    ///
    /// # Errors
    /// `Closed`, `Corrupt`, `Engine`.
    pub fn enrolments_by_fingerprint(&self, prefix: &str, limit: usize) -> Result<Vec<Enrolment>> {
        const PAGE: usize = 1024;
        let want: String = prefix
            .chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect();
        let v = self.view()?;
        let (first, end) = codec::enrol_rows();
        let mut lo_bound = Bound::Included(first);
        let mut out = Vec::new();
        loop {
            let rows = v.range(
                Part::Enrolments,
                lo_bound.as_ref().map(Vec::as_slice),
                Bound::Excluded(&end),
                PAGE,
            )?;
            let Some((last, _)) = rows.last() else {
                break;
            };
            let next = Bound::Excluded(last.to_vec());
            for (k, val) in &rows {
                let Some(pk) = codec::enrol_key_parse(k) else {
                    continue;
                };
                if fingerprint(&pk).replace('-', "").starts_with(&want) {
                    out.push(codec::dec(val, "enrolment")?);
                    if out.len() >= limit {
                        return Ok(out);
                    }
                }
            }
            if rows.len() < PAGE {
                break;
            }
            lo_bound = next;
        }
        Ok(out)
    }
}

/// One pull page from a snapshot, and the hints its items leave for the ack ([`ItemHint`]).
fn pull(
    v: &SnapView,
    target: &Key32,
    after: u64,
    limit: usize,
    max_bytes: u64,
) -> Result<(Page, Vec<(u64, ItemHint)>)> {
    let head_seq = reader::head(v, target)?;
    let acked_through = reader::acked_through(v, target)?;
    // IMPORTANT: start at the acked cursor at least, so the scan skips ack tombstones.
    let start = after.max(acked_through);
    let lo = codec::item_key(target, start);
    let hi = codec::item_key(target, u64::MAX);
    let limit = limit.max(1);
    let mut items = Vec::with_capacity(limit.min(1024));
    let mut hints = Vec::with_capacity(limit.min(1024));
    let mut bytes = 0u64;
    let mut more = false;
    let bounds = (
        Bound::Excluded(lo.as_slice()),
        Bound::Included(hi.as_slice()),
    );
    for g in v.snap.range::<&[u8], _>(v.parts.ks(Part::Items), bounds) {
        let (k, val) = g.into_inner().map_err(crate::engine)?;
        let Some((_, seq)) = codec::item_key_parse(&k) else {
            continue;
        };
        // Read in place: the wire bytes are copied once, into the page, and only when the
        // item makes the page.
        let rec: ItemView = codec::dec(&val, "item")?;
        if items.len() >= limit
            || (!items.is_empty() && bytes.saturating_add(rec.bytes) > max_bytes)
        {
            more = true;
            break;
        }
        bytes = bytes.saturating_add(rec.bytes);
        hints.push((
            seq,
            ItemHint {
                sender: rec.sender,
                item_id: Box::from(rec.item_id),
                account: rec.account.map(Box::from),
                bytes: rec.bytes,
                expires_at_ms: rec.expires_at_ms,
            },
        ));
        items.push(QueuedItem {
            seq,
            kind: rec.kind,
            item_id: rec.item_id.to_owned(),
            sender: rec.sender,
            wire: rec.wire.to_vec(),
            accepted_at_ms: rec.accepted_at_ms,
            expires_at_ms: rec.expires_at_ms,
        });
    }
    let page = Page {
        items,
        head_seq,
        acked_through,
        more,
    };
    Ok((page, hints))
}
