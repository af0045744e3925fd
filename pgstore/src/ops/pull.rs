//! A pull page in one read-only snapshot and two round trips: BEGIN (REPEATABLE READ, read
//! only) in one flight with the queue's cursor, the sizes of the next items and whether the
//! node may still answer (`crate::fence::SERVABLE_NOW`), then the page's items in one flight
//! with COMMIT. The page's bounds are decided in Rust between the two.

use relay_store::{Key32, Page, QueuedItem, Result};
use tokio_postgres::types::ToSql;

use crate::db::{i, key32, u, OpResult};
use crate::fence::{servable, SERVABLE_NOW};
use crate::ops::kind::kind_of;
use crate::pipeline::{commit_with, rollback};

const HEAD: &str = "SELECT head_seq, acked_through FROM queues WHERE target = $1";
/// Sizes first, so wire bytes are read only for the items that make the page; from the later
/// of `after` and the acked cursor (the same snapshot as HEAD).
const SIZES: &str = "SELECT bytes FROM items WHERE target = $1 AND seq > GREATEST($2, \
    COALESCE((SELECT acked_through FROM queues WHERE target = $1), 0)) ORDER BY seq LIMIT $3";
const ITEMS: &str = "SELECT seq, kind, item_id, sender, wire, accepted_at_ms, expires_at_ms \
    FROM items WHERE target = $1 AND seq > GREATEST($2, \
    COALESCE((SELECT acked_through FROM queues WHERE target = $1), 0)) ORDER BY seq LIMIT $3";

/// A page of `target`'s queue after `after`: at most `limit` items and about `max_bytes` (at
/// least one item when any is queued).
pub(crate) async fn pull(
    c: &deadpool_postgres::Object,
    target: &Key32,
    after: u64,
    limit: i64,
    max_bytes: u64,
) -> OpResult<Page> {
    let (head, sizes, items, check) = (
        c.prepare_cached(HEAD).await?,
        c.prepare_cached(SIZES).await?,
        c.prepare_cached(ITEMS).await?,
        c.prepare_cached(SERVABLE_NOW).await?,
    );
    let t = target.as_slice();
    let (after, more_limit) = (i(after), limit + 1);
    let (p0, p1): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) =
        (&[&t], &[&t, &after, &more_limit]);
    let (begun, q, sizes, servable_now) = tokio::join!(biased;
        c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
        c.query_opt(&head, p0),
        c.query(&sizes, p1),
        c.query_one(&check, &[]),
    );
    begun?;
    let (q, sizes) = match (q, sizes, servable(servable_now)) {
        (Ok(q), Ok(s), Ok(())) => (q, s),
        (Err(e), _, _) | (_, Err(e), _) => return rollback(c, e.into()).await.0,
        (_, _, Err(e)) => return rollback(c, e).await.0,
    };
    let (head_seq, acked_through) = q.map_or((0, 0), |r| (u(r.get(0)), u(r.get(1))));
    let mut take = 0i64;
    let mut bytes = 0u64;
    let mut more = false;
    for r in &sizes {
        let b = u(r.get(0));
        if take >= limit || (take > 0 && bytes.saturating_add(b) > max_bytes) {
            more = true;
            break;
        }
        bytes = bytes.saturating_add(b);
        take += 1;
    }
    let read = async {
        if take == 0 {
            return Ok(Vec::new());
        }
        Ok(c.query(&items, &[&t, &after, &take]).await?)
    };
    let rows: Vec<tokio_postgres::Row> = commit_with(c, read).await.0?;
    let items = rows
        .iter()
        .map(|r| {
            Ok(QueuedItem {
                seq: u(r.get(0)),
                kind: kind_of(r.get(1))?,
                item_id: r.get(2),
                sender: key32(r.get::<_, &[u8]>(3), "item sender")?,
                wire: r.get(4),
                accepted_at_ms: u(r.get(5)),
                expires_at_ms: u(r.get(6)),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Page {
        items,
        head_seq,
        acked_through,
        more,
    })
}
