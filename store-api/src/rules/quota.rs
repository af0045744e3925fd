//! Quotas: inclusive caps per target queue, per sender's share of it and per proven account,
//! checked in that order for each new target of an item (docs/protocol.md §2).

use crate::types::{QuotaKind, Quotas, Usage};

/// `u` with one more item of `bytes`.
pub fn plus_one(u: Usage, bytes: u64) -> Usage {
    Usage {
        items: u.items.saturating_add(1),
        bytes: u.bytes.saturating_add(bytes),
    }
}

/// Which of the two caps `u` plus one item of `bytes` would exceed (reaching a cap is fine).
fn over(
    u: Usage,
    bytes: u64,
    max_items: u64,
    max_bytes: u64,
    kinds: [QuotaKind; 2],
) -> Option<QuotaKind> {
    let next = plus_one(u, bytes);
    if next.items > max_items {
        Some(kinds[0])
    } else if next.bytes > max_bytes {
        Some(kinds[1])
    } else {
        None
    }
}

/// The first quota one more item of `bytes` would exceed, given the target queue's usage, the
/// sender's share of it and (for a target with a proven account) the account's usage.
pub fn first_exceeded(
    queue: Usage,
    sender: Usage,
    account: Option<Usage>,
    bytes: u64,
    q: &Quotas,
) -> Option<QuotaKind> {
    use QuotaKind::*;
    over(
        queue,
        bytes,
        q.max_queue_items,
        q.max_queue_bytes,
        [QueueItems, QueueBytes],
    )
    .or_else(|| {
        over(
            sender,
            bytes,
            q.max_sender_items,
            q.max_sender_bytes,
            [SenderItems, SenderBytes],
        )
    })
    .or_else(|| {
        account.and_then(|a| {
            over(
                a,
                bytes,
                q.max_account_items,
                q.max_account_bytes,
                [AccountItems, AccountBytes],
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Quotas = Quotas {
        max_queue_items: 3,
        max_queue_bytes: 300,
        max_sender_items: 2,
        max_sender_bytes: 200,
        max_account_items: 1,
        max_account_bytes: 100,
    };

    fn u(items: u64, bytes: u64) -> Usage {
        Usage { items, bytes }
    }

    #[test]
    fn caps_are_inclusive() {
        assert_eq!(
            first_exceeded(u(2, 200), u(1, 100), Some(u(0, 0)), 100, &Q),
            None
        );
        assert_eq!(
            first_exceeded(u(3, 0), u(0, 0), None, 1, &Q),
            Some(QuotaKind::QueueItems)
        );
        assert_eq!(
            first_exceeded(u(0, 201), u(0, 0), None, 100, &Q),
            Some(QuotaKind::QueueBytes)
        );
    }

    #[test]
    fn order_is_queue_then_sender_then_account_items_before_bytes() {
        let full = Some(u(1, 100));
        assert_eq!(
            first_exceeded(u(3, 300), u(2, 200), full, 1, &Q),
            Some(QuotaKind::QueueItems)
        );
        assert_eq!(
            first_exceeded(u(0, 0), u(2, 200), full, 1, &Q),
            Some(QuotaKind::SenderItems)
        );
        assert_eq!(
            first_exceeded(u(0, 0), u(0, 200), full, 1, &Q),
            Some(QuotaKind::SenderBytes)
        );
        assert_eq!(
            first_exceeded(u(0, 0), u(0, 0), full, 1, &Q),
            Some(QuotaKind::AccountItems)
        );
        assert_eq!(
            first_exceeded(u(0, 0), u(0, 0), Some(u(0, 100)), 1, &Q),
            Some(QuotaKind::AccountBytes)
        );
    }

    #[test]
    fn no_account_no_account_cap() {
        assert_eq!(first_exceeded(u(0, 0), u(0, 0), None, 100, &Q), None);
    }

    #[test]
    fn counters_saturate() {
        assert_eq!(plus_one(u(u64::MAX, u64::MAX), 5), u(u64::MAX, u64::MAX));
        assert_eq!(
            first_exceeded(u(0, u64::MAX), u(0, 0), None, 5, &Q),
            Some(QuotaKind::QueueBytes)
        );
    }
}
