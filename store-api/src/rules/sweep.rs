//! Item expiry and the retention sweep's decisions: when an item expires, when it is due, and
//! what becomes of a dedup row past its horizon. (The expiry notice an expired item earns is
//! [`crate::notice`].)

use crate::types::NEVER_EXPIRES;

/// When an item accepted at `now_ms` with `retention_ms` expires ([`NEVER_EXPIRES`] stays never;
/// any other retention ends before it).
pub fn expires_at(now_ms: u64, retention_ms: u64) -> u64 {
    if retention_ms == NEVER_EXPIRES {
        NEVER_EXPIRES
    } else {
        now_ms.saturating_add(retention_ms).min(NEVER_EXPIRES - 1)
    }
}

/// An item is due for expiry once its time has come. (The keyspace reads its expiry index
/// through `now`; PostgreSQL says `expires_at_ms <= now` in SQL: the same rule, pinned by
/// `an_item_is_due_at_its_expiry_time`.)
pub fn due(expires_at_ms: u64, now_ms: u64) -> bool {
    expires_at_ms <= now_ms
}

/// A dedup row whose item left its queue at `gone_at_ms` is past the horizon (and may be
/// pruned) when that was before `horizon_ms` (retention + 7 days before now, the caller's).
/// (Read through the keyspace's prune index up to `horizon_ms` excluded; PostgreSQL's
/// `gone_at_ms < horizon` in SQL: pinned by `a_dedup_row_is_pruned_only_past_its_horizon`.)
pub fn past_horizon(gone_at_ms: u64, horizon_ms: u64) -> bool {
    gone_at_ms < horizon_ms
}

/// What the sweep does with a dedup row past its horizon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prune {
    /// Delete it: its item is gone for good.
    Delete,
    /// Keep it and drop its horizon (a rotation re-queued its item): the item's ack or expiry
    /// starts the horizon again. IMPORTANT: the row of a queued item is never pruned, or a
    /// retry of that item would be delivered twice.
    Keep,
}

/// The fate of a dedup row past its horizon whose item is (`item_queued`) or is not queued.
pub fn prune(item_queued: bool) -> Prune {
    if item_queued {
        Prune::Keep
    } else {
        Prune::Delete
    }
}

/// A sweep step reads `max + 1` rows: more remain when it got more than `max`.
pub fn more(read: usize, max: usize) -> bool {
    read > max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_is_due_at_its_expiry_time() {
        assert!(due(1_000, 1_000));
        assert!(!due(1_001, 1_000));
        assert!(
            !due(NEVER_EXPIRES, u64::MAX - 1),
            "never-expiring mail is never due"
        );
    }

    #[test]
    fn a_dedup_row_is_pruned_only_past_its_horizon() {
        assert!(past_horizon(999, 1_000));
        assert!(!past_horizon(1_000, 1_000));
    }

    #[test]
    fn a_queued_items_dedup_row_is_never_pruned() {
        assert_eq!(prune(true), Prune::Keep);
        assert_eq!(prune(false), Prune::Delete);
    }

    #[test]
    fn one_extra_row_says_whether_to_call_again() {
        assert!(more(11, 10));
        assert!(!more(10, 10));
    }

    #[test]
    fn an_item_expires_after_its_retention_and_never_means_never() {
        assert_eq!(expires_at(1_000, 500), 1_500);
        assert_eq!(expires_at(1_000, NEVER_EXPIRES), NEVER_EXPIRES);
        assert_eq!(
            expires_at(u64::MAX - 1, u64::MAX - 1),
            NEVER_EXPIRES - 1,
            "only `never` is never"
        );
    }
}
