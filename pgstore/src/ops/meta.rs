//! Meta: reading it, pinning the relay key, epoch rotation (the database's epoch, shared by
//! every relay process on it), heartbeat.

use relay_store::{fingerprint, Key32, Meta, Result, StoreError};

use crate::ctx::Ctx;
use crate::db::{i, key32, u};
use crate::ops::{oplog, Answer};
use crate::schema::PG_SCHEMA_VERSION;

/// Current meta (epoch, relay key, schema, heartbeat).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn meta(ctx: &Ctx) -> Result<Meta> {
    ctx.read(|c| {
        Box::pin(async move {
            let r = c
                .query_one(
                    "SELECT epoch, relay_pubkey, heartbeat_ms, created_ms FROM meta WHERE id = 1",
                    &[],
                )
                .await?;
            Ok(Meta {
                epoch: r.get(0),
                relay_pubkey: r
                    .get::<_, Option<Vec<u8>>>(1)
                    .map(|k| key32(&k, "meta relay_pubkey"))
                    .transpose()?,
                schema_version: PG_SCHEMA_VERSION,
                heartbeat_ms: r.get::<_, Option<i64>>(2).map(u),
                created_ms: u(r.get(3)),
            })
        })
    })
}

/// Record the relay public key on first use; refuse a different one (`RelayKeyMismatch`).
pub(crate) fn pin_relay_pubkey(ctx: &Ctx, pk: Key32) -> Answer<()> {
    ctx.write(pk, |t, pk, _| {
        Box::pin(async move {
            let r = t
                .query_one("SELECT relay_pubkey FROM meta WHERE id = 1 FOR UPDATE", &[])
                .await?;
            match r.get::<_, Option<Vec<u8>>>(0) {
                Some(stored) if stored == *pk => Ok(()),
                Some(stored) => Err(StoreError::RelayKeyMismatch {
                    stored_fp: fingerprint(&stored),
                    given_fp: fingerprint(pk),
                }
                .into()),
                None => {
                    t.execute(
                        "UPDATE meta SET relay_pubkey = $1 WHERE id = 1",
                        &[&pk.as_slice()],
                    )
                    .await?;
                    Ok(())
                }
            }
        })
    })
}

/// Write a new random epoch (UUID v4) and a relay-log entry with `reason`.
pub(crate) fn rotate_epoch(ctx: &Ctx, reason: &str) -> Answer<String> {
    ctx.write(reason.to_string(), |t, reason, env| {
        Box::pin(async move {
            let old: String = t
                .query_one("SELECT epoch FROM meta WHERE id = 1 FOR UPDATE", &[])
                .await?
                .get(0);
            let epoch = uuid::Uuid::new_v4().to_string();
            t.execute("UPDATE meta SET epoch = $1 WHERE id = 1", &[&epoch])
                .await?;
            let detail = format!("{old} -> {epoch}: {reason}");
            oplog::append(t, env, "epoch-rotate", &detail).await?;
            crate::watch::notify(t, crate::watch::epoch_payload()).await?;
            Ok(epoch)
        })
    })
}

/// Record the heartbeat (ms).
pub(crate) fn heartbeat(ctx: &Ctx, now_ms: u64) -> Answer<()> {
    ctx.write(i(now_ms), |t, now_ms, _| {
        Box::pin(async move {
            t.execute("UPDATE meta SET heartbeat_ms = $1 WHERE id = 1", &[now_ms])
                .await?;
            Ok(())
        })
    })
}
