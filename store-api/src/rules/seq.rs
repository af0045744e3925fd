//! Seq allocation: a target's next seq is `max(head + 1, now_ms)`, so a seq is never handed out
//! twice for a target and seqs stay near wall-clock time across restarts, restores and epochs.

/// The seq after `head` for an item accepted at `now_ms`.
pub fn next(head: u64, now_ms: u64) -> u64 {
    head.saturating_add(1).max(now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_seq_is_max_of_head_plus_one_and_now() {
        assert_eq!(next(0, 1_000), 1_000);
        assert_eq!(next(1_000, 1_000), 1_001, "same millisecond: head + 1");
        assert_eq!(
            next(5_000, 1_000),
            5_001,
            "a clock behind the head never reuses a seq"
        );
        assert_eq!(next(u64::MAX, 0), u64::MAX, "saturates");
    }
}
