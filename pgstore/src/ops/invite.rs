//! Invites (`relay-tool invite`): the `invites` table, keyed by the hash of the code; issued
//! here, redeemed by a new enrolment (`ops::enrol`) in its transaction. The rules are
//! relay-store's `rules::invite`; issuing serialises on the `meta` row (as enrolments do), so
//! the cap holds across processes.

use deadpool_postgres::Transaction;
use relay_store::rules::invite::admits;
use relay_store::{log_text, Invite, InviteHash, InviteOutcome, Key32};

use crate::cached::Cached as _;
use crate::ctx::{Ctx, WriteEnv};
use crate::db::{i, u, OpResult};
use crate::ops::{oplog, Answer};

/// Store an invite after pruning the expired ones, unless `max` unexpired ones are stored.
pub(crate) fn put_invite(ctx: &Ctx, invite: Invite, max: u64) -> Answer<InviteOutcome> {
    ctx.write(invite, move |t, invite, env| {
        Box::pin(async move {
            let now = env.now;
            t.execute("SELECT 1 FROM meta WHERE id = 1 FOR UPDATE", &[])
                .await?;
            let pruned = t
                .execute("DELETE FROM invites WHERE expires_ms <= $1", &[&i(now)])
                .await?;
            let unexpired: i64 = t
                .query_one(
                    "SELECT count(*) FROM invites WHERE hash <> $1",
                    &[&invite.hash.as_slice()],
                )
                .await?
                .get(0);
            if !admits(u(unexpired), max) {
                return Ok(InviteOutcome::Full);
            }
            t.execute(
                "INSERT INTO invites (hash, created_ms, expires_ms, note) \
                             VALUES ($1, $2, $3, $4) ON CONFLICT (hash) DO UPDATE SET \
                             created_ms = $2, expires_ms = $3, note = $4",
                &[
                    &invite.hash.as_slice(),
                    &i(invite.created_ms),
                    &i(invite.expires_ms),
                    &invite.note,
                ],
            )
            .await?;
            let detail = log_text::invite_issued(invite, pruned);
            oplog::append(t, env, "invite", &detail).await?;
            Ok(InviteOutcome::Issued)
        })
    })
}

/// The stored invite of `hash`, locked for the enrolment redeeming it.
pub(crate) async fn get(t: &Transaction<'_>, hash: &InviteHash) -> OpResult<Option<Invite>> {
    let row = t
        .query_opt_cached(
            "SELECT created_ms, expires_ms, note FROM invites WHERE hash = $1 FOR UPDATE",
            &[&hash.as_slice()],
        )
        .await?;
    Ok(row.map(|r| Invite {
        hash: *hash,
        created_ms: u(r.get(0)),
        expires_ms: u(r.get(1)),
        note: r.get(2),
    }))
}

/// Redeem (delete) the invite of `hash` for the new enrolment of `key`, logged.
pub(crate) async fn redeem(
    t: &Transaction<'_>,
    hash: &InviteHash,
    key: &Key32,
    env: WriteEnv,
) -> OpResult<()> {
    t.execute("DELETE FROM invites WHERE hash = $1", &[&hash.as_slice()])
        .await?;
    let detail = log_text::invite_redeemed(hash, key);
    oplog::append(t, env, "invite-redeemed", &detail).await
}
