//! Dedup per (sender, item_id, target): the wire hash decides duplicate or conflict
//! (docs/protocol.md §2).

use crate::types::{DedupRow, Key32};

/// What an item's target is, given the dedup row stored for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// No row: a new item for this target.
    New,
    /// The same wire bytes again: answer the stored seq and acceptance time.
    Duplicate {
        /// The stored seq.
        seq: u64,
        /// When the item was first accepted.
        accepted_at_ms: u64,
    },
    /// The same (sender, item_id) with other bytes: refused, nothing of the item stored.
    Conflict,
}

/// The verdict for a target whose dedup row is `stored`, for wire bytes hashing to `wire_hash`.
pub fn verdict(stored: Option<&DedupRow>, wire_hash: &Key32) -> Verdict {
    match stored {
        None => Verdict::New,
        Some(row) if row.wire_hash == *wire_hash => Verdict::Duplicate {
            seq: row.seq,
            accepted_at_ms: row.accepted_at_ms,
        },
        Some(_) => Verdict::Conflict,
    }
}

/// The time a stored item answers: now when any target was new, else the first duplicate's
/// original acceptance (a retry answers what the first push answered).
pub fn stored_at(any_new: bool, first_duplicate_at: Option<u64>, now_ms: u64) -> u64 {
    if any_new {
        now_ms
    } else {
        first_duplicate_at.unwrap_or(now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(hash: u8) -> DedupRow {
        DedupRow {
            wire_hash: [hash; 32],
            seq: 7,
            accepted_at_ms: 70,
        }
    }

    #[test]
    fn no_row_is_new() {
        assert_eq!(verdict(None, &[1; 32]), Verdict::New);
    }

    #[test]
    fn same_hash_is_duplicate_with_the_stored_seq() {
        assert_eq!(
            verdict(Some(&row(1)), &[1; 32]),
            Verdict::Duplicate {
                seq: 7,
                accepted_at_ms: 70
            }
        );
    }

    #[test]
    fn other_hash_is_conflict() {
        assert_eq!(verdict(Some(&row(1)), &[2; 32]), Verdict::Conflict);
    }

    #[test]
    fn a_retry_answers_the_first_acceptance_time() {
        assert_eq!(stored_at(false, Some(70), 100), 70);
        assert_eq!(stored_at(true, Some(70), 100), 100, "anything new: now");
        assert_eq!(stored_at(false, None, 100), 100);
    }
}
