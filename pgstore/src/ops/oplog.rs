//! The relay log on PostgreSQL: the same log as the keyspace's (its chain, which appends happen
//! and its retention are `relay_store::rules::log`, shared, not copied), the head and the
//! checkpoint in the `meta` row.

use deadpool_postgres::Transaction;
use relay_store::rules::log::{self as rule, Admission, ChainCheck, Trim, MAX_DROP_PER_APPEND};
use relay_store::{LogCheckpoint, LogVerdict, OpEntry, Result};

use crate::cached::Cached as _;
use crate::ctx::{Ctx, WriteEnv};
use crate::db::{i, key32, u, OpResult};

fn hash32(v: Option<Vec<u8>>, what: &str) -> Result<Option<[u8; 32]>> {
    v.map(|b| key32(&b, what)).transpose()
}

/// Append an entry at `env.now` inside the current transaction. Locks the `meta` row, so
/// appends from several processes form one chain.
pub(crate) async fn append(
    t: &Transaction<'_>,
    env: WriteEnv,
    kind: &str,
    detail: &str,
) -> OpResult<()> {
    let WriteEnv { now: at_ms, keep } = env;
    let row = t
        .query_one_cached(
            "SELECT ops_next, ops_head, ops_cp_seq, ops_cp_hash, ops_enrol_held FROM meta \
                 WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await?;
    let held_before = u(row.get(4));
    let first = row.get::<_, Option<i64>>(2).map_or(0, |s| u(s) + 1);
    if rule::admission(kind, held_before, keep) == Admission::IfOldestIsEnrolment {
        let oldest = t
            .query_opt_cached("SELECT kind FROM ops WHERE seq = $1", &[&i(first)])
            .await?
            .is_some_and(|r| rule::is_enrolment_entry(r.get(0)));
        if !oldest {
            return Ok(()); // not logged one by one (relay_store::rules::log::Admission)
        }
    }
    let n = u(row.get(0));
    let hash = rule::next_hash(hash32(row.get(1), "meta ops_head")?, n, at_ms, kind, detail);
    let mut trim = Trim::after_append(kind, first, n + 1, at_ms, keep, held_before);
    // The entry, the new head and the trim's read in one flight: tokio-postgres pipelines
    // the statements of one connection polled together, the server runs them in the order
    // they are sent, and `biased` polls them in this order every time (so the trim reads
    // after the entry is written, as when they were sent one by one).
    let insert = async {
        t.execute_cached(
            "INSERT INTO ops (seq, at_ms, kind, detail, hash) VALUES ($1, $2, $3, $4, $5)",
            &[&i(n), &i(at_ms), &kind, &detail, &hash.as_slice()],
        )
        .await?;
        OpResult::Ok(())
    };
    let head = async {
        t.execute_cached(
            "UPDATE meta SET ops_next = $1, ops_head = $2 WHERE id = 1",
            &[&i(n + 1), &hash.as_slice()],
        )
        .await?;
        OpResult::Ok(())
    };
    tokio::try_join!(biased; insert, head, drop_old(t, &mut trim))?;
    if trim.held() != held_before {
        t.execute_cached(
            "UPDATE meta SET ops_enrol_held = $1 WHERE id = 1",
            &[&i(trim.held())],
        )
        .await?;
    }
    Ok(())
}

/// Drop the oldest entries `trim` lets go; the last one dropped becomes the checkpoint.
async fn drop_old(t: &Transaction<'_>, trim: &mut Trim) -> OpResult<()> {
    let Some(first) = trim.oldest() else {
        return Ok(());
    };
    // The candidates, oldest first, at most what one append drops (the trim stops before the
    // newest).
    let rows = t
        .query_cached(
            "SELECT seq, at_ms, hash, kind FROM ops WHERE seq >= $1 ORDER BY seq LIMIT $2",
            &[&i(first), &i(MAX_DROP_PER_APPEND)],
        )
        .await?;
    let mut last: Option<(i64, Vec<u8>)> = None;
    for r in &rows {
        let seq: i64 = r.get(0);
        if trim.oldest() != Some(u(seq)) {
            break; // a gap is left for `verify_log` to report, never papered over
        }
        if !trim.leaves(u(r.get(1)), r.get(3)) {
            break;
        }
        last = Some((seq, r.get(2)));
    }
    if let Some((seq, hash)) = last {
        t.execute_cached(
            "DELETE FROM ops WHERE seq >= $1 AND seq <= $2",
            &[&i(first), &seq],
        )
        .await?;
        t.execute_cached(
            "UPDATE meta SET ops_cp_seq = $1, ops_cp_hash = $2 WHERE id = 1",
            &[&seq, &hash],
        )
        .await?;
    }
    Ok(())
}

/// Append to the relay log.
pub(crate) fn log_op(ctx: &Ctx, kind: &str, detail: &str) -> super::Answer<()> {
    let entry = (kind.to_string(), detail.to_string());
    let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
    let before = ctx
        .log_order
        .lock()
        .ok()
        .and_then(|mut last| last.replace(done_rx));
    // The deadline runs from this append's turn, not from its submission (a queue of
    // appends would otherwise time out behind each other).
    let c = ctx.clone();
    ctx.spawn_queued(async move {
        if let Some(before) = before {
            let _ = before.await; // answered or dropped: either way its turn is over
        }
        let _done = done; // signals the next append when this one ends, however it ends
        crate::db::bounded(c.tx(entry, |t, (kind, detail), env| {
            Box::pin(append(t, env, kind, detail))
        }))
        .await
    })
}

/// The relay log, newest first, at most `limit` entries.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn ops(ctx: &Ctx, limit: usize) -> Result<Vec<OpEntry>> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    ctx.read(move |c| {
        Box::pin(async move {
            let rows = c
                .query(
                    "SELECT seq, at_ms, kind, detail, hash FROM ops ORDER BY seq DESC LIMIT $1",
                    &[&limit],
                )
                .await?;
            let entries = rows.iter().map(op_entry).collect::<Result<_>>()?;
            Ok(entries)
        })
    })
}

/// The newest entry of `kind`: a backward walk of the primary key that stops at the first
/// match, so it reads at most the retained log (no index on `kind` to keep up on every append).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn newest_of(ctx: &Ctx, kind: &str) -> Result<Option<OpEntry>> {
    let kind = kind.to_string();
    ctx.read(move |c| {
        Box::pin(async move {
            let row = c
                .query_opt(
                    "SELECT seq, at_ms, kind, detail, hash FROM ops WHERE kind = $1 \
                     ORDER BY seq DESC LIMIT 1",
                    &[&kind],
                )
                .await?;
            Ok(row.as_ref().map(op_entry).transpose()?)
        })
    })
}

fn op_entry(r: &tokio_postgres::Row) -> Result<OpEntry> {
    Ok(OpEntry {
        seq: u(r.get(0)),
        at_ms: u(r.get(1)),
        kind: r.get(2),
        detail: r.get(3),
        hash: key32(r.get::<_, &[u8]>(4), "ops hash")?,
    })
}

/// Recompute the relay log's chain from its checkpoint (one snapshot) and name the first
/// entry that does not match.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn verify_log(ctx: &Ctx) -> Result<LogVerdict> {
    ctx.read(|c| {
        Box::pin(async move {
            let t = crate::db::snapshot(c).await?;
            let m = t
                .query_one(
                    "SELECT ops_next, ops_head, ops_cp_seq, ops_cp_hash FROM meta WHERE id = 1",
                    &[],
                )
                .await?;
            let checkpoint = match (m.get::<_, Option<i64>>(2), m.get::<_, Option<Vec<u8>>>(3)) {
                (Some(seq), Some(h)) => Some(LogCheckpoint {
                    seq: u(seq),
                    hash: key32(&h, "ops checkpoint")?,
                }),
                _ => None,
            };
            let next = u(m.get(0));
            let head = hash32(m.get(1), "meta ops_head")?;
            let rows = t
                .query(
                    "SELECT seq, at_ms, kind, detail, hash FROM ops ORDER BY seq",
                    &[],
                )
                .await?;
            let mut check = ChainCheck::new(checkpoint);
            for r in &rows {
                let (seq, at_ms, kind, detail): (i64, i64, &str, &str) =
                    (r.get(0), r.get(1), r.get(2), r.get(3));
                let ok = match <[u8; 32]>::try_from(r.get::<_, &[u8]>(4)) {
                    Ok(hash) => check.entry(u(seq), u(at_ms), kind, detail, &hash),
                    Err(_) => check.fail_next(format!("entry {seq}'s hash is not 32 bytes")),
                };
                if !ok {
                    break;
                }
            }
            Ok(check.finish(Some(next), head))
        })
    })
}
