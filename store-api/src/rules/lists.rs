//! Sender allowlists: a stored list is replaced only by a strictly newer one (an equal `iat`
//! keeps the first); the reverse index (`sender_index`: sender -> targets whose list names it)
//! moves by exactly the difference of two lists; a rotation or revocation swaps a key out of
//! the other targets' lists.

use std::collections::BTreeSet;

use crate::types::{Key32, SenderList};

/// `new` replaces `stored` (none stored, or `new` strictly newer).
pub fn accepts(stored: Option<&SenderList>, new: &SenderList) -> bool {
    stored.is_none_or(|old| old.iat_ms < new.iat_ms)
}

/// The index rows a list write moves: senders named `before` and not `after` (to delete), and
/// named `after` and not `before` (to add), each in key order.
pub fn index_change(
    before: Option<&SenderList>,
    after: Option<&SenderList>,
) -> (Vec<Key32>, Vec<Key32>) {
    let set = |l: Option<&SenderList>| -> BTreeSet<Key32> {
        l.map(|l| l.senders.iter().copied().collect())
            .unwrap_or_default()
    };
    let (b, a) = (set(before), set(after));
    (
        b.difference(&a).copied().collect(),
        a.difference(&b).copied().collect(),
    )
}

/// `list` (another target's, found through the index) with `old` taken out and `new` put in
/// its place (a rotation) or nothing (a revocation); `None` when it is to be left alone: it is
/// `old`'s or `new`'s own (the caller moves those), or does not name `old` (the index and the
/// lists agree by construction; a list is never added to blindly).
pub fn replace_sender(list: &SenderList, old: &Key32, new: Option<&Key32>) -> Option<SenderList> {
    if list.target == *old || Some(&list.target) == new || !list.senders.contains(old) {
        return None;
    }
    let mut out = list.clone();
    out.senders.retain(|s| s != old);
    if let Some(new) = new {
        if !out.senders.contains(new) {
            out.senders.push(*new);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::list;

    #[test]
    fn only_a_strictly_newer_list_replaces_the_stored_one() {
        let old = list(1, &[2], 100);
        assert!(accepts(None, &old));
        assert!(accepts(Some(&old), &list(1, &[3], 101)));
        assert!(
            !accepts(Some(&old), &list(1, &[3], 100)),
            "equal iat: the first stays"
        );
        assert!(!accepts(Some(&old), &list(1, &[3], 99)));
    }

    #[test]
    fn the_index_moves_by_exactly_the_difference() {
        let (gone, added) = index_change(Some(&list(1, &[2, 3], 1)), Some(&list(1, &[3, 4], 2)));
        assert_eq!(gone, vec![[2; 32]]);
        assert_eq!(added, vec![[4; 32]]);
        let (gone, added) = index_change(Some(&list(1, &[2, 3], 1)), None);
        assert_eq!(
            gone,
            vec![[2; 32], [3; 32]],
            "a deleted list leaves no index row"
        );
        assert!(added.is_empty());
    }

    #[test]
    fn a_rotation_swaps_the_old_key_for_the_new_in_other_lists() {
        let l = list(1, &[2, 3], 1);
        let out = replace_sender(&l, &[2; 32], Some(&[9; 32])).unwrap();
        assert_eq!(out.senders, vec![[3; 32], [9; 32]]);
        assert_eq!(out.iat_ms, 1, "the record the target signed stays");
        let l = list(1, &[2, 9], 1);
        let out = replace_sender(&l, &[2; 32], Some(&[9; 32])).unwrap();
        assert_eq!(out.senders, vec![[9; 32]], "the new key is not named twice");
    }

    #[test]
    fn a_revocation_takes_the_key_out() {
        let out = replace_sender(&list(1, &[2, 3], 1), &[2; 32], None).unwrap();
        assert_eq!(out.senders, vec![[3; 32]]);
    }

    #[test]
    fn own_lists_and_lists_not_naming_the_key_are_left_alone() {
        assert_eq!(replace_sender(&list(2, &[2], 1), &[2; 32], None), None);
        assert_eq!(
            replace_sender(&list(9, &[2], 1), &[2; 32], Some(&[9; 32])),
            None
        );
        assert_eq!(replace_sender(&list(1, &[3], 1), &[2; 32], None), None);
    }
}
