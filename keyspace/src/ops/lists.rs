//! Encryption-key ads and sender allowlists, and the reverse index of the allowlists
//! (`sender_index`: which targets' lists name a sender) that every list write keeps in step. The
//! rules (newer wins, the index difference, swapping a key out) are relay-store's `rules::lists`.

use crate::codec;
use crate::parts::Part;
use crate::reader;
use crate::writer::Tx;
use relay_store::rules;
use relay_store::{EncAd, Key32, Result, SenderList, SenderListOutcome};

/// Store a (verified) enc ad, replacing the previous one of that key.
pub(crate) fn put_enc_ad(tx: &mut Tx<'_>, ad: &EncAd) {
    tx.put(Part::EncAds, &ad.host_pubkey, codec::enc(ad));
}

/// Store a (verified) sender list if strictly newer than the stored one (an equal `iat`
/// is `NotNewer`: the first list of a given time stays).
pub(crate) fn put_sender_list(tx: &mut Tx<'_>, list: &SenderList) -> Result<SenderListOutcome> {
    let stored = reader::sender_list(tx, &list.target)?;
    if !rules::lists::accepts(stored.as_ref(), list) {
        return Ok(SenderListOutcome::NotNewer);
    }
    write_list(tx, &list.target, Some(list))?;
    Ok(SenderListOutcome::Stored)
}

/// Put (`Some`) or delete (`None`) `target`'s list, and in the same batch add and remove the
/// `sender_index` rows by which it differs from the list stored now. The only way lists are
/// written, so the index always holds exactly one row per (sender named, target).
pub(crate) fn write_list(tx: &mut Tx<'_>, target: &Key32, list: Option<&SenderList>) -> Result<()> {
    let before = reader::sender_list(tx, target)?;
    let (gone, added) = rules::lists::index_change(before.as_ref(), list);
    for gone in &gone {
        tx.del(Part::SenderIndex, &codec::sender_index_key(gone, target));
    }
    for added in &added {
        tx.put(
            Part::SenderIndex,
            &codec::sender_index_key(added, target),
            Vec::new(),
        );
    }
    match list {
        Some(l) => tx.put(Part::SenderLists, target, codec::enc(l)),
        None => tx.del(Part::SenderLists, target),
    }
    Ok(())
}

/// Take `old` out of every other target's allowlist, putting `new` in its place (a rotation) or
/// nothing (a revocation). The lists are found through `sender_index`, so the cost follows how
/// many lists name `old`, not how many are stored. `old`'s and `new`'s own lists are left to the
/// caller. Returns how many lists changed.
pub(crate) fn replace_sender(
    tx: &mut Tx<'_>,
    old: &Key32,
    new: Option<&Key32>,
    limit: usize,
) -> Result<u64> {
    let mut changed = 0;
    for target in targets_naming(tx, old, limit)? {
        if target == *old || Some(&target) == new {
            continue; // the caller's (and not read)
        }
        let Some(list) = reader::sender_list(tx, &target)? else {
            continue;
        };
        let Some(list) = rules::lists::replace_sender(&list, old, new) else {
            continue;
        };
        write_list(tx, &target, Some(&list))?;
        changed += 1;
    }
    Ok(changed)
}

/// The targets whose list names `sender`, from the index (at most `limit`).
pub(crate) fn targets_naming(tx: &Tx<'_>, sender: &Key32, limit: usize) -> Result<Vec<Key32>> {
    use crate::reader::Reader;
    Ok(tx
        .prefix(Part::SenderIndex, sender, limit)?
        .iter()
        .filter_map(|(k, _)| codec::sender_index_parse(k).map(|(_, target)| target))
        .collect())
}
