//! The expiry-notice rule every backend obeys when an item leaves its queue undelivered (the
//! sweep's expiries and an admin's purge): one statement of it; the backends only run the
//! insert it asks for, in the same operation as the deletion.

use crate::types::{ExpiredItem, InsertOutcome, InsertRequest, NoticeFn, Quotas};

/// The insert that queues `notice`'s notice for `gone`, or `None` when there is none. A
/// notice goes to the sender only (a built item naming anyone else is dropped); enrolment,
/// quotas and dedup then apply as to any insert (a sender no longer enrolled, a full queue or
/// an earlier notice: no notice; see [`notice_queued`]).
pub fn notice_request(
    gone: &ExpiredItem,
    notice: &NoticeFn,
    quotas: Quotas,
    retention_ms: u64,
    now_ms: u64,
) -> Option<InsertRequest> {
    let item = notice(gone, now_ms)?;
    if item.targets.is_empty() || item.targets.iter().any(|t| t.target != gone.sender) {
        return None;
    }
    Some(InsertRequest {
        item,
        quotas,
        retention_ms,
        require_live_sender: false,
    })
}

/// True when the notice's insert queued a new notice (not a duplicate of an earlier one).
pub fn notice_queued(outcome: &InsertOutcome) -> bool {
    match outcome {
        InsertOutcome::Stored { targets, .. } => targets.iter().any(|t| !t.duplicate),
        _ => false,
    }
}
