//! Encryption-key ads and sender allowlists, and the reverse index of the allowlists
//! (`sender_index`: which targets' lists name a sender) that every list write keeps in step.

use std::collections::BTreeSet;

use crate::api::{EncAd, Key32, Pending, Result, SenderList, SenderListOutcome};
use crate::codec;
use crate::parts::Part;
use crate::reader;
use crate::writer::Tx;
use crate::Store;

impl Store {
    /// Store a (verified) enc ad, replacing the previous one of that key.
    pub fn put_enc_ad(&self, ad: EncAd) -> Pending<()> {
        self.submit(move |tx| {
            tx.put(Part::EncAds, &ad.host_pubkey, codec::enc(&ad));
            Ok(())
        })
    }

    /// Store a (verified) sender list if strictly newer than the stored one (an equal `iat`
    /// is `NotNewer`: the first list of a given time stays).
    pub fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome> {
        self.submit(move |tx| {
            if let Some(old) = reader::sender_list(tx, &list.target)? {
                if old.iat_ms >= list.iat_ms {
                    return Ok(SenderListOutcome::NotNewer);
                }
            }
            write_list(tx, &list.target, Some(&list))?;
            Ok(SenderListOutcome::Stored)
        })
    }
}

/// Put (`Some`) or delete (`None`) `target`'s list, and in the same batch add and remove the
/// `sender_index` rows by which it differs from the list stored now. The only way lists are
/// written, so the index always holds exactly one row per (sender named, target).
pub(crate) fn write_list(tx: &mut Tx<'_>, target: &Key32, list: Option<&SenderList>) -> Result<()> {
    let before: BTreeSet<Key32> = reader::sender_list(tx, target)?
        .map(|l| l.senders.into_iter().collect())
        .unwrap_or_default();
    let after: BTreeSet<Key32> = list
        .map(|l| l.senders.iter().copied().collect())
        .unwrap_or_default();
    for gone in before.difference(&after) {
        tx.del(Part::SenderIndex, &codec::sender_index_key(gone, target));
    }
    for added in after.difference(&before) {
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

/// The targets whose list names `sender`, from the index (at most `limit`).
pub(crate) fn targets_naming(tx: &Tx<'_>, sender: &Key32, limit: usize) -> Result<Vec<Key32>> {
    use crate::reader::Reader;
    Ok(tx
        .prefix(Part::SenderIndex, sender, limit)?
        .iter()
        .filter_map(|(k, _)| codec::sender_index_parse(k).map(|(_, target)| target))
        .collect())
}
