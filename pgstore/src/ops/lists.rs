//! Enc ads (v1 pair, v2 signed record) and sender allowlists with their reverse index
//! (`sender_index`), kept in step by the one list write path (relay-store's `rules::lists`).

use deadpool_postgres::Transaction;
use relay_store::rules;
use relay_store::{EncAd, EncAdV2, EncAds, Key32, Result, SenderList, SenderListOutcome};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use crate::db::{i, key32, u, OpResult};
use crate::ops::{enrol, Answer};

/// Sender keys stored as one `bytea` of 32-byte keys.
pub(crate) fn pack(keys: &[Key32]) -> Vec<u8> {
    keys.iter().flat_map(|k| k.iter().copied()).collect()
}

pub(crate) fn unpack(b: &[u8]) -> Result<Vec<Key32>> {
    b.chunks(32).map(|c| key32(c, "sender list")).collect()
}

/// `target`'s list from [`LIST_COLS`] at columns `at..at + 4` of `r`.
pub(crate) fn list_from_row(
    target: Key32,
    r: &tokio_postgres::Row,
    at: usize,
) -> Result<SenderList> {
    Ok(SenderList {
        target,
        senders: unpack(r.get::<_, &[u8]>(at))?,
        iat_ms: u(r.get(at + 1)),
        record: r.get(at + 2),
        sig: r.get(at + 3),
    })
}

pub(crate) const LIST_COLS: &str = "senders, iat_ms, record, sig";

/// `target`'s list inside `t`, locked for update.
pub(crate) async fn get_list(t: &Transaction<'_>, target: &Key32) -> OpResult<Option<SenderList>> {
    let r = t
        .query_opt(
            &format!("SELECT {LIST_COLS} FROM sender_lists WHERE target = $1 FOR UPDATE"),
            &[&target.as_slice()],
        )
        .await?;
    Ok(r.map(|r| list_from_row(*target, &r, 0)).transpose()?)
}

/// Put (`Some`) or delete (`None`) `target`'s list and move the index rows by which it differs.
pub(crate) async fn write_list(
    t: &Transaction<'_>,
    target: &Key32,
    list: Option<&SenderList>,
) -> OpResult<()> {
    let before = get_list(t, target).await?;
    let (gone, added) = rules::lists::index_change(before.as_ref(), list);
    for gone in &gone {
        t.execute(
            "DELETE FROM sender_index WHERE sender = $1 AND target = $2",
            &[&gone.as_slice(), &target.as_slice()],
        )
        .await?;
    }
    for added in &added {
        t.execute(
            "INSERT INTO sender_index (sender, target) VALUES ($1, $2) ON CONFLICT DO NOTHING",
            &[&added.as_slice(), &target.as_slice()],
        )
        .await?;
    }
    match list {
        Some(l) => {
            t.execute(
                "INSERT INTO sender_lists (target, senders, iat_ms, record, sig) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (target) DO UPDATE \
                 SET senders = $2, iat_ms = $3, record = $4, sig = $5",
                &[
                    &target.as_slice(),
                    &pack(&l.senders),
                    &i(l.iat_ms),
                    &l.record,
                    &l.sig,
                ],
            )
            .await?;
        }
        None => {
            t.execute(
                "DELETE FROM sender_lists WHERE target = $1",
                &[&target.as_slice()],
            )
            .await?;
        }
    }
    Ok(())
}

/// Store a (verified) v1 enc ad, replacing the key's previous one.
pub(crate) fn put_enc_ad(ctx: &Ctx, ad: EncAd) -> Answer<()> {
    ctx.write(ad, |t, ad, _| {
        Box::pin(async move {
            t.execute(
                "INSERT INTO enc_ads (host_pubkey, enc_pub, sig, at_ms) \
                         VALUES ($1, $2, $3, $4) ON CONFLICT (host_pubkey) DO UPDATE \
                         SET enc_pub = $2, sig = $3, at_ms = $4",
                &[
                    &ad.host_pubkey.as_slice(),
                    &ad.enc_pub,
                    &ad.sig,
                    &i(ad.at_ms),
                ],
            )
            .await?;
            Ok(())
        })
    })
}

/// Store a (verified) v2 enc ad whatever its `iat`; `false`, storing nothing, when the key
/// is not enrolled and live at commit time (`rules::enc_ad::stores_v2`; the enrolment row
/// is share-locked until commit, so a revocation cannot slip in before the write).
pub(crate) fn put_enc_ad_v2(ctx: &Ctx, ad: EncAdV2) -> Answer<bool> {
    ctx.write(ad, |t, ad, _| {
        Box::pin(async move {
            let owner = enrol::get(t, &ad.host_pubkey, false).await?;
            if !rules::enc_ad::stores_v2(owner.as_ref()) {
                return Ok(false);
            }
            t.execute(
                "INSERT INTO enc_ads_v2 (host_pubkey, record, sig, at_ms) \
                         VALUES ($1, $2, $3, $4) ON CONFLICT (host_pubkey) DO UPDATE \
                         SET record = $2, sig = $3, at_ms = $4",
                &[
                    &ad.host_pubkey.as_slice(),
                    &ad.record,
                    &ad.sig,
                    &i(ad.at_ms),
                ],
            )
            .await?;
            Ok(true)
        })
    })
}

/// The v1 enc ad of a key.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn enc_ad(ctx: &Ctx, key: &Key32) -> Result<Option<EncAd>> {
    Ok(enc_ads(ctx, key)?.v1)
}

/// Both enc ads of a key, from one snapshot.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn enc_ads(ctx: &Ctx, key: &Key32) -> Result<EncAds> {
    let key = *key;
    ctx.read(move |c| {
        Box::pin(async move {
            // One statement: one snapshot.
            let r = c
                .query_one(
                    "SELECT a.enc_pub, a.sig, a.at_ms, b.record, b.sig, b.at_ms FROM \
                 (SELECT 1) one \
                 LEFT JOIN enc_ads a ON a.host_pubkey = $1 \
                 LEFT JOIN enc_ads_v2 b ON b.host_pubkey = $1",
                    &[&key.as_slice()],
                )
                .await?;
            let v1 = r.get::<_, Option<String>>(0).map(|enc_pub| EncAd {
                host_pubkey: key,
                enc_pub,
                sig: r.get(1),
                at_ms: u(r.get(2)),
            });
            let v2 = r.get::<_, Option<Vec<u8>>>(3).map(|record| EncAdV2 {
                host_pubkey: key,
                record,
                sig: r.get(4),
                at_ms: u(r.get(5)),
            });
            Ok(EncAds { v1, v2 })
        })
    })
}

/// Store a (verified) sender list if strictly newer than the stored one.
pub(crate) fn put_sender_list(ctx: &Ctx, list: SenderList) -> Answer<SenderListOutcome> {
    ctx.write(list, |t, list, _| {
        Box::pin(async move {
            let stored = get_list(t, &list.target).await?;
            if !rules::lists::accepts(stored.as_ref(), list) {
                return Ok(SenderListOutcome::NotNewer);
            }
            write_list(t, &list.target, Some(list)).await?;
            Ok(SenderListOutcome::Stored)
        })
    })
}

/// A target's sender list.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn sender_list(ctx: &Ctx, target: &Key32) -> Result<Option<SenderList>> {
    let target = *target;
    ctx.read(move |c| {
        Box::pin(async move {
            let sql = format!("SELECT {LIST_COLS} FROM sender_lists WHERE target = $1");
            let rows = c.query_cached(&sql, &[&target.as_slice()]).await?;
            Ok(rows
                .first()
                .map(|r| list_from_row(target, r, 0))
                .transpose()?)
        })
    })
}
