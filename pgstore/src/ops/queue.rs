//! Mail besides the insert (`ops/insert.rs`, grouped by `combine`): pulls, cursors, usage,
//! dedup rows, ack and single-item delete, and the queue-row helpers the other writes share.
//!
//! A target's `queues` row holds its head, acked cursor and its usage; every write to a queue
//! locks that row first (`FOR UPDATE`, several targets in key order), so inserts, acks, sweeps
//! and rotations of one target are serialised across processes, and a seq is never handed out
//! twice. Sender-share usage rows are covered by their target's lock; account rows are locked
//! themselves (a deadlock between two accounts' orders is retried by `Db::tx`).

use deadpool_postgres::Transaction;
use relay_store::{AckOutcome, Cursor, DedupRow, Key32, Page, Result, Usage};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use crate::db::{key32, u, OpResult};
use crate::fence::{servable, SERVABLE_NOW};
use crate::ops::ack::Ack;
use crate::ops::leave::leave;
use crate::ops::pull;
use crate::ops::Answer;

/// A locked queue row: head and usage of one target.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QueueRow {
    pub head: u64,
    pub acked: u64,
    pub usage: Usage,
}

/// Lock (creating it when missing) the `queues` row of `target`.
pub(crate) async fn lock_queue(t: &Transaction<'_>, target: &Key32) -> OpResult<QueueRow> {
    t.execute_cached(
        "INSERT INTO queues (target) VALUES ($1) ON CONFLICT (target) DO NOTHING",
        &[&target.as_slice()],
    )
    .await?;
    let r = t
        .query_one_cached(
            "SELECT head_seq, acked_through, items, bytes FROM queues WHERE target = $1 FOR UPDATE",
            &[&target.as_slice()],
        )
        .await?;
    Ok(QueueRow {
        head: u(r.get(0)),
        acked: u(r.get(1)),
        usage: Usage {
            items: u(r.get(2)),
            bytes: u(r.get(3)),
        },
    })
}

/// Lock the `queues` rows of `targets` in key order, in one statement, as [`lock_queue`] locks
/// one; for targets that hold queued items, whose rows exist (the insert that queued them made
/// them).
pub(crate) async fn lock_queues(t: &Transaction<'_>, targets: &[Key32]) -> OpResult<()> {
    let keys: Vec<&[u8]> = targets.iter().map(|k| k.as_slice()).collect();
    t.execute_cached(
        "SELECT 1 FROM queues WHERE target = ANY($1::bytea[]) ORDER BY target FOR UPDATE",
        &[&keys],
    )
    .await?;
    Ok(())
}

/// Move the sender-share and account usage of an item's scopes by (`items`, `bytes`); the
/// target's own usage lives in its `queues` row, which the caller moves.
pub(crate) async fn add_usage(
    t: &Transaction<'_>,
    target: &Key32,
    sender: &Key32,
    account: Option<&str>,
    items: i64,
    bytes: i64,
) -> OpResult<()> {
    t.execute_cached("INSERT INTO usage_sender (target, sender, items, bytes) VALUES ($1, $2, GREATEST($3::BIGINT, 0), \
             GREATEST($4::BIGINT, 0)) ON CONFLICT (target, sender) DO UPDATE \
         SET items = GREATEST(usage_sender.items + $3, 0), bytes = GREATEST(usage_sender.bytes + $4, 0)",
        &[&target.as_slice(), &sender.as_slice(), &items, &bytes],
    )
    .await?;
    t.execute_cached(
        "DELETE FROM usage_sender WHERE target = $1 AND sender = $2 AND items = 0 AND bytes = 0",
        &[&target.as_slice(), &sender.as_slice()],
    )
    .await?;
    if let Some(a) = account {
        t.execute_cached("INSERT INTO usage_account (account, items, bytes) VALUES ($1, GREATEST($2::BIGINT, 0), \
                 GREATEST($3::BIGINT, 0)) ON CONFLICT (account) DO UPDATE \
             SET items = GREATEST(usage_account.items + $2, 0), \
                 bytes = GREATEST(usage_account.bytes + $3, 0)",
            &[&a, &items, &bytes],
        )
        .await?;
        t.execute_cached(
            "DELETE FROM usage_account WHERE account = $1 AND items = 0 AND bytes = 0",
            &[&a],
        )
        .await?;
    }
    Ok(())
}

/// Move a target's own usage in its (locked) `queues` row.
pub(crate) async fn add_queue_usage(
    t: &Transaction<'_>,
    target: &Key32,
    items: i64,
    bytes: i64,
) -> OpResult<()> {
    t.execute_cached(
        "UPDATE queues SET items = GREATEST(items + $2, 0), bytes = GREATEST(bytes + $3, 0) \
         WHERE target = $1",
        &[&target.as_slice(), &items, &bytes],
    )
    .await?;
    Ok(())
}

/// The dedup row of (sender, item_id, target).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn dedup(
    ctx: &Ctx,
    sender: &Key32,
    item_id: &str,
    target: &Key32,
) -> Result<Option<DedupRow>> {
    let (sender, target, item_id) = (*sender, *target, item_id.to_string());
    ctx.read(move |c| {
        Box::pin(async move {
            let r = c
                .query_opt(
                    "SELECT wire_hash, seq, accepted_at_ms FROM dedup \
                     WHERE target = $1 AND sender = $2 AND item_id = $3",
                    &[&target.as_slice(), &sender.as_slice(), &item_id],
                )
                .await?;
            let row = r.map(|r| {
                Ok::<_, relay_store::StoreError>(DedupRow {
                    wire_hash: key32(r.get::<_, &[u8]>(0), "dedup wire hash")?,
                    seq: u(r.get(1)),
                    accepted_at_ms: u(r.get(2)),
                })
            });
            Ok(row.transpose()?)
        })
    })
}

/// A page of the target's queue after `after` (one snapshot): at most `limit` items and
/// about `max_bytes` (at least one item when any is queued).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn pull(
    ctx: &Ctx,
    target: &Key32,
    after: u64,
    limit: usize,
    max_bytes: u64,
) -> Result<Page> {
    let target = *target;
    let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX - 1);
    ctx.read(move |c| {
        Box::pin(async move { pull::pull(c, &target, after, limit, max_bytes).await })
    })
}

/// Head and acked-through of a target, read with the pull's check that the node may still
/// answer (`crate::fence::SERVABLE_NOW`, sent after the read): a host is never shown a cursor
/// older than one it saw on a promoted standby.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn cursor(ctx: &Ctx, target: &Key32) -> Result<Cursor> {
    let target = *target;
    ctx.read(move |c| {
        Box::pin(async move {
            let (read, check) = (
                c.prepare_cached("SELECT head_seq, acked_through FROM queues WHERE target = $1")
                    .await?,
                c.prepare_cached(SERVABLE_NOW).await?,
            );
            let t = target.as_slice();
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&t];
            let (q, now) = tokio::join!(biased;
                c.query_opt(&read, &params),
                c.query_one(&check, &[]),
            );
            servable(now)?;
            Ok(q?.map_or(Cursor::default(), |r| Cursor {
                head_seq: u(r.get(0)),
                acked_through: u(r.get(1)),
            }))
        })
    })
}

/// The usage row `sql` finds for the key(s) `keys` (none: zero).
fn usage_query(ctx: &Ctx, sql: &'static str, keys: UsageKeys) -> Result<Usage> {
    ctx.read(move |c| {
        Box::pin(async move {
            let r = match &keys {
                UsageKeys::Target(t) => c.query_opt(sql, &[t]).await,
                UsageKeys::Pair(t, s) => c.query_opt(sql, &[t, s]).await,
                UsageKeys::Account(a) => c.query_opt(sql, &[a]).await,
            }?;
            Ok(r.map_or(Usage::default(), |r| Usage {
                items: u(r.get(0)),
                bytes: u(r.get(1)),
            }))
        })
    })
}

/// The key of a usage row.
enum UsageKeys {
    Target(Vec<u8>),
    Pair(Vec<u8>, Vec<u8>),
    Account(String),
}

/// Queue usage of a target.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn usage_target(ctx: &Ctx, target: &Key32) -> Result<Usage> {
    usage_query(
        ctx,
        "SELECT items, bytes FROM queues WHERE target = $1",
        UsageKeys::Target(target.to_vec()),
    )
}

/// Queue usage of a sender within a target.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn usage_sender(ctx: &Ctx, sender: &Key32, target: &Key32) -> Result<Usage> {
    usage_query(
        ctx,
        "SELECT items, bytes FROM usage_sender WHERE target = $1 AND sender = $2",
        UsageKeys::Pair(target.to_vec(), sender.to_vec()),
    )
}

/// Queue usage of a proven account.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn usage_account(ctx: &Ctx, account: &str) -> Result<Usage> {
    usage_query(
        ctx,
        "SELECT items, bytes FROM usage_account WHERE account = $1",
        UsageKeys::Account(account.to_string()),
    )
}

/// Delete the target's items with seq <= through and record acked_through.
pub(crate) fn ack(ctx: &Ctx, target: &Key32, through: u64) -> Answer<AckOutcome> {
    let ack = Ack {
        target: *target,
        through,
        now: ctx.now_ms(),
    };
    let (db, guesses, target) = (ctx.db.clone(), std::sync::Arc::clone(&ctx.guesses), *target);
    ctx.spawn(async move {
        let acked = db.run(ack).await;
        // The queue moved: the next push to it reads it again (`crate::guess`).
        guesses.forget_target(&target);
        acked
    })
}

/// Delete one queued item (and its usage); false if it was not queued.
pub(crate) fn delete_item(ctx: &Ctx, target: &Key32, seq: u64) -> Answer<bool> {
    let guesses = std::sync::Arc::clone(&ctx.guesses);
    ctx.write((*target, seq), move |t, &(target, seq), env| {
        let guesses = std::sync::Arc::clone(&guesses);
        Box::pin(async move {
            lock_queue(t, &target).await?;
            // The queue moves: the next push to it reads it again (`crate::guess`).
            guesses.forget_target(&target);
            Ok(!leave(t, &[(target, seq)], None, env.now).await?.is_empty())
        })
    })
}
