//! Ack, decided once for every backend: a cursor above the head changes nothing
//! (`BeyondHead`), one at or below the acked cursor deletes nothing, anything else deletes the
//! items in (acked, through] and frees their usage once per scope ([`Freed`]), then records
//! `through`. The backend reads head and acked cursor under its lock, deletes the range and
//! starts the deleted items' dedup horizons (spec §2) in the same commit.

use std::collections::HashMap;
use std::hash::Hash;

use crate::types::AckOutcome;

/// What an ack of `through` does to a queue at `head` acked through `acked`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Answer this; nothing changes.
    Answer(AckOutcome),
    /// Delete the items with `after < seq <= through`, then record `through`.
    Delete {
        /// The acked-through before this ack.
        after: u64,
        /// The acked-through after it.
        through: u64,
    },
}

/// Decide an ack of `through` against `head` and `acked`.
pub fn decide(head: u64, acked: u64, through: u64) -> Step {
    if through > head {
        Step::Answer(AckOutcome::BeyondHead { head_seq: head })
    } else if through <= acked {
        Step::Answer(AckOutcome::Acked {
            acked_through: acked,
            deleted: 0,
            head_seq: head,
        })
    } else {
        Step::Delete {
            after: acked,
            through,
        }
    }
}

/// The usage the deleted items free, as negative (items, bytes) deltas: summed per scope key
/// `K` (the item's sender and account), so each usage row moves once per ack, not once per
/// item; and the queue's own total.
#[derive(Debug)]
pub struct Freed<K> {
    /// Freed (items, bytes) per sender or account key.
    pub by_scope: HashMap<K, (i64, i64)>,
    /// Freed (items, bytes) of the queue itself.
    pub total: (i64, i64),
    /// How many items the ack deletes.
    pub deleted: u64,
}

impl<K> Default for Freed<K> {
    fn default() -> Self {
        Freed {
            by_scope: HashMap::new(),
            total: (0, 0),
            deleted: 0,
        }
    }
}

impl<K: Eq + Hash> Freed<K> {
    /// One deleted item of `bytes`, charged to `scope`.
    pub fn add(&mut self, scope: K, bytes: u64) {
        let b = i64::try_from(bytes).unwrap_or(i64::MAX);
        let f = self.by_scope.entry(scope).or_default();
        f.0 -= 1;
        f.1 = f.1.saturating_sub(b);
        self.total.0 -= 1;
        self.total.1 = self.total.1.saturating_sub(b);
        self.deleted += 1;
    }

    /// The answer once the range is deleted and `through` recorded.
    pub fn outcome(&self, through: u64, head: u64) -> AckOutcome {
        AckOutcome::Acked {
            acked_through: through,
            deleted: self.deleted,
            head_seq: head,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ack_above_the_head_changes_nothing() {
        assert_eq!(
            decide(10, 0, 11),
            Step::Answer(AckOutcome::BeyondHead { head_seq: 10 })
        );
    }

    #[test]
    fn an_ack_at_or_below_the_cursor_deletes_nothing_and_keeps_the_cursor() {
        let kept = Step::Answer(AckOutcome::Acked {
            acked_through: 7,
            deleted: 0,
            head_seq: 10,
        });
        assert_eq!(decide(10, 7, 7), kept);
        assert_eq!(decide(10, 7, 3), kept, "the cursor never moves back");
    }

    #[test]
    fn an_ack_deletes_from_the_cursor_through_the_given_seq_up_to_the_head() {
        assert_eq!(
            decide(10, 7, 9),
            Step::Delete {
                after: 7,
                through: 9
            }
        );
        assert_eq!(
            decide(10, 0, 10),
            Step::Delete {
                after: 0,
                through: 10
            }
        );
    }

    #[test]
    fn freed_usage_moves_once_per_scope_and_in_total() {
        let mut f = Freed::default();
        f.add(("s1", None::<&str>), 100);
        f.add(("s1", None), 50);
        f.add(("s2", Some("acct")), 10);
        assert_eq!(f.by_scope.len(), 2);
        assert_eq!(f.by_scope[&("s1", None)], (-2, -150));
        assert_eq!(f.by_scope[&("s2", Some("acct"))], (-1, -10));
        assert_eq!(f.total, (-3, -160));
        assert_eq!(
            f.outcome(9, 10),
            AckOutcome::Acked {
                acked_through: 9,
                deleted: 3,
                head_seq: 10
            }
        );
    }
}
