//! Mail: insert (the rules of keyspace/src/ops/insert.rs: every target live at commit time,
//! dedup per (sender, item_id, target) with the wire hash deciding duplicate vs conflict,
//! inclusive quotas for new targets, seq = max(head + 1, now_ms), all or nothing), pulls,
//! cursors, usage, ack and single-item delete.
//!
//! A target's `queues` row holds its head, acked cursor and its usage; every write to a queue
//! locks that row first (`FOR UPDATE`, several targets in key order), so inserts, acks, sweeps
//! and rotations of one target are serialised across processes, and a seq is never handed out
//! twice. Sender-share usage rows are covered by their target's lock; account rows are locked
//! themselves (a deadlock between two accounts' orders is retried by `Db::tx`).

use deadpool_postgres::Transaction;
use relay_store::{
    AckOutcome, Cursor, DedupRow, InsertOutcome, InsertRequest, ItemKind, Key32, Page, Result,
    StoreError, Usage,
};

use crate::db::{db_err, i, key32, u, OpResult};
use crate::ops::ack::Ack;
use crate::ops::pull;
use crate::ops::Answer;
use crate::store::PgStore;

pub(crate) fn kind_code(k: ItemKind) -> i16 {
    match k {
        ItemKind::Envelope => 0,
        ItemKind::Receipt => 1,
        ItemKind::Expired => 2,
    }
}

pub(crate) fn kind_of(code: i16) -> Result<ItemKind> {
    match code {
        0 => Ok(ItemKind::Envelope),
        1 => Ok(ItemKind::Receipt),
        2 => Ok(ItemKind::Expired),
        other => Err(StoreError::Corrupt(format!("item kind {other} is unknown"))),
    }
}

/// A locked queue row: head and usage of one target.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct QueueRow {
    pub head: u64,
    pub acked: u64,
    pub usage: Usage,
}

/// Lock (creating it when missing) the `queues` row of `target`.
pub(crate) async fn lock_queue(t: &Transaction<'_>, target: &Key32) -> OpResult<QueueRow> {
    t.execute(
        &t.prepare_cached(
            "INSERT INTO queues (target) VALUES ($1) ON CONFLICT (target) DO NOTHING",
        )
        .await?,
        &[&target.as_slice()],
    )
    .await?;
    let r = t
        .query_one(
            &t.prepare_cached("SELECT head_seq, acked_through, items, bytes FROM queues WHERE target = $1 FOR UPDATE").await?,
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
    t.execute(
        &t.prepare_cached("INSERT INTO usage_sender (target, sender, items, bytes) VALUES ($1, $2, GREATEST($3::BIGINT, 0), \
             GREATEST($4::BIGINT, 0)) ON CONFLICT (target, sender) DO UPDATE \
         SET items = GREATEST(usage_sender.items + $3, 0), bytes = GREATEST(usage_sender.bytes + $4, 0)").await?,
        &[&target.as_slice(), &sender.as_slice(), &items, &bytes],
    )
    .await?;
    t.execute(
        &t.prepare_cached("DELETE FROM usage_sender WHERE target = $1 AND sender = $2 AND items = 0 AND bytes = 0").await?,
        &[&target.as_slice(), &sender.as_slice()],
    )
    .await?;
    if let Some(a) = account {
        t.execute(
            &t.prepare_cached("INSERT INTO usage_account (account, items, bytes) VALUES ($1, GREATEST($2::BIGINT, 0), \
                 GREATEST($3::BIGINT, 0)) ON CONFLICT (account) DO UPDATE \
             SET items = GREATEST(usage_account.items + $2, 0), \
                 bytes = GREATEST(usage_account.bytes + $3, 0)").await?,
            &[&a, &items, &bytes],
        )
        .await?;
        t.execute(
            &t.prepare_cached(
                "DELETE FROM usage_account WHERE account = $1 AND items = 0 AND bytes = 0",
            )
            .await?,
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
    t.execute(
        &t.prepare_cached(
            "UPDATE queues SET items = GREATEST(items + $2, 0), bytes = GREATEST(bytes + $3, 0) \
         WHERE target = $1",
        )
        .await?,
        &[&target.as_slice(), &items, &bytes],
    )
    .await?;
    Ok(())
}

/// The item (`target`, `sender`, `item_id`) left its queue at `now`: its dedup row's horizon
/// starts (the sweep prunes it once `now` is past the horizon). Same transaction as the delete.
pub(crate) async fn start_dedup_horizon(
    t: &Transaction<'_>,
    target: &Key32,
    sender: &[u8],
    item_id: &str,
    now: u64,
) -> OpResult<()> {
    t.execute(
        "UPDATE dedup SET gone_at_ms = $4 WHERE target = $1 AND sender = $2 AND item_id = $3",
        &[&target.as_slice(), &sender, &item_id, &i(now)],
    )
    .await?;
    Ok(())
}

/// Insert one item over all its targets atomically.
pub(crate) fn insert(store: &PgStore, req: InsertRequest) -> Answer<InsertOutcome> {
    let s = store.clone();
    store.spawn(async move {
        s.insert_grouped(vec![req])
            .await?
            .pop()
            .ok_or_else(|| StoreError::Engine("postgres: an insert answered no outcome".into()))
    })
}

/// Insert several items, each its own atomic operation, in one transaction (with the other
/// pushes waiting then: `combine`): one commit, as the keyspace's one group commit.
pub(crate) fn insert_many(store: &PgStore, reqs: Vec<InsertRequest>) -> Answer<Vec<InsertOutcome>> {
    let s = store.clone();
    store.spawn(async move { s.insert_grouped(reqs).await })
}

/// The dedup row of (sender, item_id, target).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn dedup(
    store: &PgStore,
    sender: &Key32,
    item_id: &str,
    target: &Key32,
) -> Result<Option<DedupRow>> {
    let (s, sender, target, item_id) = (store.clone(), *sender, *target, item_id.to_string());
    store.block(async move {
        let c = s.inner.db.conn().await?;
        let r = c
            .query_opt(
                "SELECT wire_hash, seq, accepted_at_ms FROM dedup \
                 WHERE target = $1 AND sender = $2 AND item_id = $3",
                &[&target.as_slice(), &sender.as_slice(), &item_id],
            )
            .await
            .map_err(db_err)?;
        r.map(|r| {
            Ok(DedupRow {
                wire_hash: key32(r.get::<_, &[u8]>(0), "dedup wire hash")?,
                seq: u(r.get(1)),
                accepted_at_ms: u(r.get(2)),
            })
        })
        .transpose()
    })
}

/// A page of the target's queue after `after` (one snapshot): at most `limit` items and
/// about `max_bytes` (at least one item when any is queued).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn pull(
    store: &PgStore,
    target: &Key32,
    after: u64,
    limit: usize,
    max_bytes: u64,
) -> Result<Page> {
    let (s, target) = (store.clone(), *target);
    let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX - 1);
    store.block(async move {
        let c = s.inner.db.conn().await?;
        pull::pull(&c, &target, after, limit, max_bytes).await
    })
}

/// Head and acked-through of a target.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn cursor(store: &PgStore, target: &Key32) -> Result<Cursor> {
    let (s, target) = (store.clone(), *target);
    store.block(async move {
        let c = s.inner.db.conn().await?;
        let q = c
            .query_opt(
                "SELECT head_seq, acked_through FROM queues WHERE target = $1",
                &[&target.as_slice()],
            )
            .await
            .map_err(db_err)?;
        Ok(q.map_or(Cursor::default(), |r| Cursor {
            head_seq: u(r.get(0)),
            acked_through: u(r.get(1)),
        }))
    })
}

fn usage_query(
    store: &PgStore,
    sql: &'static str,
    a: Vec<u8>,
    b: Option<Vec<u8>>,
) -> Result<Usage> {
    let s = store.clone();
    store.block(async move {
        let c = s.inner.db.conn().await?;
        let r = match &b {
            Some(b) => c.query_opt(sql, &[&a, b]).await,
            None => c.query_opt(sql, &[&a]).await,
        }
        .map_err(db_err)?;
        Ok(r.map_or(Usage::default(), |r| Usage {
            items: u(r.get(0)),
            bytes: u(r.get(1)),
        }))
    })
}

/// Queue usage of a target.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn usage_target(store: &PgStore, target: &Key32) -> Result<Usage> {
    usage_query(
        store,
        "SELECT items, bytes FROM queues WHERE target = $1",
        target.to_vec(),
        None,
    )
}

/// Queue usage of a sender within a target.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn usage_sender(store: &PgStore, sender: &Key32, target: &Key32) -> Result<Usage> {
    usage_query(
        store,
        "SELECT items, bytes FROM usage_sender WHERE target = $1 AND sender = $2",
        target.to_vec(),
        Some(sender.to_vec()),
    )
}

/// Queue usage of a proven account.
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn usage_account(store: &PgStore, account: &str) -> Result<Usage> {
    let (s, account) = (store.clone(), account.to_string());
    store.block(async move {
        let c = s.inner.db.conn().await?;
        let r = c
            .query_opt(
                "SELECT items, bytes FROM usage_account WHERE account = $1",
                &[&account],
            )
            .await
            .map_err(db_err)?;
        Ok(r.map_or(Usage::default(), |r| Usage {
            items: u(r.get(0)),
            bytes: u(r.get(1)),
        }))
    })
}

/// Delete the target's items with seq <= through and record acked_through.
pub(crate) fn ack(store: &PgStore, target: &Key32, through: u64) -> Answer<AckOutcome> {
    let s = store.clone();
    let ack = Ack {
        target: *target,
        through,
        now: s.now_ms(),
    };
    store.spawn(async move { s.inner.db.run(ack).await })
}

/// Delete one queued item (and its usage); false if it was not queued.
pub(crate) fn delete_item(store: &PgStore, target: &Key32, seq: u64) -> Answer<bool> {
    let (s, target) = (store.clone(), *target);
    store.spawn(async move {
        let now = s.now_ms();
        s.inner
            .db
            .tx(|t| {
                Box::pin(async move {
                    lock_queue(t, &target).await?;
                    let r = t
                        .query_opt(
                            "DELETE FROM items WHERE target = $1 AND seq = $2 \
                             RETURNING sender, account, bytes, item_id",
                            &[&target.as_slice(), &i(seq)],
                        )
                        .await?;
                    let Some(r) = r else { return Ok(false) };
                    let sender = key32(r.get::<_, &[u8]>(0), "item sender")?;
                    start_dedup_horizon(t, &target, &sender, r.get(3), now).await?;
                    let account: Option<String> = r.get(1);
                    let bytes: i64 = r.get(2);
                    add_queue_usage(t, &target, -1, -bytes).await?;
                    add_usage(t, &target, &sender, account.as_deref(), -1, -bytes).await?;
                    Ok(true)
                })
            })
            .await
    })
}
