//! The reads served to callers that are more than one lookup (a pull page, a cursor, the
//! fingerprint search). Every one reads the last durable snapshot the writer published, never
//! committed-but-not-yet-fsynced state.

use std::ops::Bound;

use crate::codec::{self, fingerprint, ItemView};
use crate::parts::Part;
use crate::pulled::ItemHint;
use fjall::Readable;
use relay_store::{Cursor, Enrolment, Key32, Page, QueuedItem, Result};

use crate::reader::{self, Reader as _, SnapView};

/// Head and acked-through of a target.
pub(crate) fn cursor(v: &SnapView, target: &Key32) -> Result<Cursor> {
    Ok(Cursor {
        head_seq: reader::head(v, target)?,
        acked_through: reader::acked_through(v, target)?,
    })
}

/// Enrolments (live or revoked) whose fingerprint starts with `prefix` (hex digits, dashes
/// and case ignored), at most `limit`. Reads every enrolment row once, a page at a time:
/// for an admin's command, not a request path.
pub(crate) fn enrolments_by_fingerprint(
    v: &SnapView,
    prefix: &str,
    limit: usize,
) -> Result<Vec<Enrolment>> {
    let want: String = prefix
        .chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    scan_enrolments(v, limit, |pk, val| {
        if fingerprint(pk).replace('-', "").starts_with(&want) {
            codec::dec_enrolment(val).map(Some)
        } else {
            Ok(None)
        }
    })
}

/// Live enrolments recorded with `client_id`, at most `limit`, in key order. Reads every
/// enrolment row once, a page at a time: for an admin's deny, not a request path.
pub(crate) fn live_enrolments_by_client(
    v: &SnapView,
    client_id: &str,
    limit: usize,
) -> Result<Vec<Enrolment>> {
    scan_enrolments(v, limit, |_, val| {
        let e = codec::dec_enrolment(val)?;
        Ok((e.revoked_at_ms.is_none() && e.client_id.as_deref() == Some(client_id)).then_some(e))
    })
}

/// The enrolments `pick` keeps, at most `limit`, over every enrolment row in key order.
fn scan_enrolments(
    v: &SnapView,
    limit: usize,
    mut pick: impl FnMut(&Key32, &[u8]) -> Result<Option<Enrolment>>,
) -> Result<Vec<Enrolment>> {
    const PAGE: usize = 1024;
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
            if let Some(e) = pick(&pk, val)? {
                out.push(e);
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

/// One pull page from a snapshot, and the hints its items leave for the ack ([`ItemHint`]).
pub(crate) fn pull(
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
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
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
