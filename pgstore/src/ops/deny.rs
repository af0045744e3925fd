//! The deny list (`relay-tool deny`, spec §8 "Revocation"): the `deny_list` table, keyed by
//! subject kind (`host`: the key's bytes, `client`: the client id's UTF-8) and value; added
//! here, read by enrolment. The rules are relay-store's `rules::deny`; adding serialises on the
//! `meta` row (as invites do), so the cap holds across processes.

use relay_store::rules::deny::{admits, kept_until};
use relay_store::{log_text, DenyEntry, DenyOutcome, DenySubject, Result, StoreError};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use deadpool_postgres::GenericClient;

use crate::db::{i, key32, u, OpResult};
use crate::ops::{oplog, Answer};

/// The subject of a row's `(kind, subject)` ([`columns`] read back).
pub(crate) fn subject_of(kind: &str, subject: &[u8]) -> Result<DenySubject> {
    let bad = || StoreError::Corrupt(format!("a deny_list row of kind {kind:?} is malformed"));
    match kind {
        "host" => key32(subject, "deny_list host").map(DenySubject::Host),
        "client" => String::from_utf8(subject.to_vec())
            .map(DenySubject::Client)
            .map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// The table's `(kind, subject)` of a subject.
pub(crate) fn columns(s: &DenySubject) -> (&'static str, Vec<u8>) {
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

/// Whether an unexpired entry at `now_ms` names one of `subjects`, read on `c` (a connection,
/// or an enrolment's transaction).
pub(crate) async fn denied_in(
    c: &impl GenericClient,
    subjects: &[DenySubject],
    now_ms: u64,
) -> OpResult<bool> {
    if subjects.is_empty() {
        return Ok(false);
    }
    let (kinds, names): (Vec<&str>, Vec<Vec<u8>>) = subjects.iter().map(columns).unzip();
    let hit = c
        .query_opt_cached(
            "SELECT 1 FROM unnest($1::text[], $2::bytea[]) AS s(kind, subject) \
                 JOIN deny_list d ON d.kind = s.kind AND d.subject = s.subject \
                 WHERE d.expires_ms > $3 LIMIT 1",
            &[&kinds, &names, &i(now_ms)],
        )
        .await?;
    Ok(hit.is_some())
}

/// Whether an unexpired entry at `now_ms` names one of `subjects`.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn denied(ctx: &Ctx, subjects: &[DenySubject], now_ms: u64) -> Result<bool> {
    let subjects = subjects.to_vec();
    ctx.read(move |c| Box::pin(async move { denied_in(&**c, &subjects, now_ms).await }))
}
