//! Storing a v2 (signed, expiring) enc ad (relay-store's `rules::enc_ad`): the last valid write
//! wins, the v1 pair is untouched.

use crate::codec;
use crate::parts::Part;
use crate::reader;
use crate::writer::Tx;
use relay_store::rules;
use relay_store::{EncAdV2, Result};

/// Store a (verified) v2 enc ad, replacing the previous v2 ad of that key whatever its
/// `iat` (senders guard against rollback themselves). The key's v1 pair is left alone.
/// `false`, storing nothing, when the key is no longer enrolled and live at commit time (a
/// rotation revoked it after the caller was authenticated).
pub(crate) fn put_enc_ad_v2(tx: &mut Tx<'_>, ad: &EncAdV2) -> Result<bool> {
    if !rules::enc_ad::stores_v2(reader::enrolment(tx, &ad.host_pubkey)?.as_ref()) {
        return Ok(false);
    }
    tx.put(
        Part::EncAds,
        &codec::enc_ad_v2_key(&ad.host_pubkey),
        codec::enc(ad),
    );
    Ok(true)
}
