//! The relay processes serving the database (`processes`: a row each, renewed every
//! [`relay_store::PROCESS_BEAT`] while it runs; `relay_store::ProcessRow`), and the queue heads
//! of the keys a process has waiters for (its one-second poll behind `crate::watch`).

use relay_store::{Key32, ProcessRow, Result, MAX_PROCESSES, PROCESS_FORGET_MS};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use crate::db::{i, key32, u};
use crate::ops::Answer;

/// Write or renew `row`, and drop rows not renewed for [`PROCESS_FORGET_MS`].
pub(crate) fn beat_process(ctx: &Ctx, row: ProcessRow) -> Answer<()> {
    ctx.write(row, |t, row, _| {
        let forget = i(row.heartbeat_ms.saturating_sub(PROCESS_FORGET_MS));
        Box::pin(async move {
            // Losing a beat to a crash costs nothing: the next one rewrites it.
            t.batch_execute("SET LOCAL synchronous_commit = off")
                .await?;
            t.execute(
                "INSERT INTO processes (id, address, version, started_ms, heartbeat_ms) \
                         VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE \
                         SET address = $2, version = $3, heartbeat_ms = $5",
                &[
                    &row.id,
                    &row.address,
                    &row.version,
                    &i(row.started_ms),
                    &i(row.heartbeat_ms),
                ],
            )
            .await?;
            t.execute("DELETE FROM processes WHERE heartbeat_ms < $1", &[&forget])
                .await?;
            Ok(())
        })
    })
}

/// Remove process `id`'s row (its clean stop).
pub(crate) fn leave_process(ctx: &Ctx, id: &str) -> Answer<()> {
    ctx.write(id.to_string(), |t, id, _| {
        Box::pin(async move {
            t.execute("DELETE FROM processes WHERE id = $1", &[id])
                .await?;
            Ok(())
        })
    })
}

/// Every process row (at most [`MAX_PROCESSES`]), oldest start first.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn processes(ctx: &Ctx) -> Result<Vec<ProcessRow>> {
    ctx.read(|c| {
        Box::pin(async move {
            let rows = c
                .query_cached(
                    "SELECT id, address, version, started_ms, heartbeat_ms FROM processes \
                 ORDER BY started_ms, id LIMIT $1",
                    &[&i(MAX_PROCESSES as u64)],
                )
                .await?;
            Ok(rows
                .iter()
                .map(|r| ProcessRow {
                    id: r.get(0),
                    address: r.get(1),
                    version: r.get(2),
                    started_ms: u(r.get(3)),
                    heartbeat_ms: u(r.get(4)),
                })
                .collect())
        })
    })
}

/// The head seq of each of `keys` that has a queue row, in one statement.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn queue_heads(ctx: &Ctx, keys: &[Key32]) -> Result<Vec<(Key32, u64)>> {
    let keys = keys.to_vec();
    ctx.read(move |c| {
        Box::pin(async move {
            let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            let rows = c
                .query_cached(
                    "SELECT target, head_seq FROM queues WHERE target = ANY($1::bytea[])",
                    &[&keys],
                )
                .await?;
            let heads = rows
                .iter()
                .map(|r| Ok((key32(r.get::<_, &[u8]>(0), "queue target")?, u(r.get(1)))))
                .collect::<Result<_>>()?;
            Ok(heads)
        })
    })
}
