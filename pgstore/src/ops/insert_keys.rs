//! The keys a batch's insert rule reads, each once and in lock order: one definition for the
//! two-round-trip push, the single flight and the guesses, in a file of its own so the guesses
//! need nothing of the insert operation.

use std::collections::BTreeSet;

use relay_store::{InsertRequest, Key32};

/// The keys a batch's rule reads, each once and in key order (the order rows are locked in).
pub(crate) struct Keys<'r> {
    /// The targets, and the senders that must be live: their enrolments are read (and locked).
    pub enrolled: Vec<&'r Key32>,
    pub targets: Vec<&'r Key32>,
    /// (target, sender, item_id) of every item's targets: their dedup rows.
    pub dedup: Vec<(&'r Key32, &'r Key32, &'r str)>,
    /// (target, sender): the sender-share usage rows.
    pub shares: Vec<(&'r Key32, &'r Key32)>,
}

impl<'r> Keys<'r> {
    pub(crate) fn of(reqs: &'r [InsertRequest]) -> Keys<'r> {
        let targets: BTreeSet<&Key32> = reqs
            .iter()
            .flat_map(|r| r.item.targets.iter().map(|x| &x.target))
            .collect();
        let enrolled: BTreeSet<&Key32> = reqs
            .iter()
            .filter(|r| r.require_live_sender)
            .map(|r| &r.item.sender)
            .chain(targets.iter().copied())
            .collect();
        let mut dedup = BTreeSet::new();
        let mut shares = BTreeSet::new();
        for r in reqs {
            for tg in &r.item.targets {
                dedup.insert((&tg.target, &r.item.sender, r.item.item_id.as_str()));
                shares.insert((&tg.target, &r.item.sender));
            }
        }
        Keys {
            enrolled: enrolled.into_iter().collect(),
            targets: targets.into_iter().collect(),
            dedup: dedup.into_iter().collect(),
            shares: shares.into_iter().collect(),
        }
    }

    /// LOCK's parameters: the enrolments to lock, the targets.
    pub(crate) fn lock_args(&self) -> (Vec<&'r [u8]>, Vec<&'r [u8]>) {
        (slices(&self.enrolled), slices(&self.targets))
    }
}

/// Keys as the `bytea[]` parameters they are sent as.
pub(crate) fn slices<'r>(keys: &[&'r Key32]) -> Vec<&'r [u8]> {
    keys.iter().map(|k| k.as_slice()).collect()
}
