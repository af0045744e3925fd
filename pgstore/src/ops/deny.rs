//! The deny list (`relay-tool deny`, spec §8 "Revocation"): the `deny_list` table, keyed by
//! subject kind (`host`: the key's bytes, `client`: the client id's UTF-8) and value; added
//! here, read by enrolment. The rules are relay-store's `rules::deny`; adding serialises on the
//! `meta` row (as invites do), so the cap holds across processes.

use relay_store::rules::deny::{admits, kept_until};
use relay_store::{log_text, DenyEntry, DenyOutcome, DenySubject, Result};

use crate::ctx::Ctx;
use crate::db::{i, u};
use crate::ops::{oplog, Answer};

/// The table's `(kind, subject)` of a subject.
fn columns(s: &DenySubject) -> (&'static str, Vec<u8>) {
    match s {
        DenySubject::Host(k) => ("host", k.to_vec()),
        DenySubject::Client(c) => ("client", c.as_bytes().to_vec()),
    }
}

/// Store `entry` (kept until `kept_until`) after pruning the expired entries, unless `max`
/// unexpired ones are stored.
pub(crate) fn put_deny(ctx: &Ctx, entry: DenyEntry, max: u64) -> Answer<DenyOutcome> {
    let entry = DenyEntry {
        expires_ms: kept_until(&entry),
        ..entry
    };
    ctx.write(entry, move |t, entry, env| {
        Box::pin(async move {
            t.execute("SELECT 1 FROM meta WHERE id = 1 FOR UPDATE", &[])
                .await?;
            let pruned = t
                .execute(
                    "DELETE FROM deny_list WHERE expires_ms <= $1",
                    &[&i(env.now)],
                )
                .await?;
            let (kind, subject) = columns(&entry.subject);
            let unexpired: i64 = t
                .query_one(
                    "SELECT count(*) FROM deny_list WHERE (kind, subject) <> ($1, $2)",
                    &[&kind, &subject],
                )
                .await?
                .get(0);
            if !admits(u(unexpired), max) {
                return Ok(DenyOutcome::Full);
            }
            t.execute(
                "INSERT INTO deny_list (kind, subject, added_ms, expires_ms, note) \
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT (kind, subject) DO UPDATE SET \
                 added_ms = $3, expires_ms = $4, note = $5",
                &[
                    &kind,
                    &subject,
                    &i(entry.added_ms),
                    &i(entry.expires_ms),
                    &entry.note,
                ],
            )
            .await?;
            let detail = log_text::deny_added(entry, pruned);
            oplog::append(t, env, "deny", &detail).await?;
            Ok(DenyOutcome::Added)
        })
    })
}

/// Whether an unexpired entry at `now_ms` names one of `subjects`.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn denied(ctx: &Ctx, subjects: &[DenySubject], now_ms: u64) -> Result<bool> {
    let wanted: Vec<(&'static str, Vec<u8>)> = subjects.iter().map(columns).collect();
    ctx.read(move |c| {
        Box::pin(async move {
            for (kind, subject) in &wanted {
                let hit = c
                    .query_opt(
                        "SELECT 1 FROM deny_list WHERE kind = $1 AND subject = $2 \
                         AND expires_ms > $3",
                        &[kind, subject, &i(now_ms)],
                    )
                    .await?;
                if hit.is_some() {
                    return Ok(true);
                }
            }
            Ok(false)
        })
    })
}
