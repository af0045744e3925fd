//! Encryption-key ads and sender allowlists.

use crate::api::{EncAd, Pending, SenderList, SenderListOutcome};
use crate::codec;
use crate::parts::Part;
use crate::reader;
use crate::Store;

impl Store {
    /// Store a (verified) enc ad, replacing the previous one of that key.
    pub fn put_enc_ad(&self, ad: EncAd) -> Pending<()> {
        self.submit(move |tx| {
            tx.put(Part::EncAds, &ad.host_pubkey, codec::enc(&ad));
            Ok(())
        })
    }

    /// Store a (verified) sender list if strictly newer than the stored one.
    pub fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome> {
        self.submit(move |tx| {
            if let Some(old) = reader::sender_list(tx, &list.target)? {
                if old.iat_ms >= list.iat_ms {
                    return Ok(SenderListOutcome::NotNewer);
                }
            }
            tx.put(Part::SenderLists, &list.target, codec::enc(&list));
            Ok(SenderListOutcome::Stored)
        })
    }
}
