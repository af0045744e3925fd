//! Ack in two round trips, decided by `relay_store::rules::ack` (the keyspace's rule):
//!
//! 1. BEGIN, [`LOCK`] (the target's queue row for update) and [`RANGE`] (the items the ack
//!    would delete, read behind that lock, with their account usage rows locked) in one flight;
//! 2. the rule decides; when it deletes, [`DELETE`] (the items, their dedup horizons, the freed
//!    usage, the cursor) and COMMIT in one flight, else COMMIT alone.
//!
//! The usage rows the delete moves are locked (sender shares by the queue row, accounts by
//! RANGE), so the values DELETE's parts compute from are current.

use std::collections::HashMap;

use relay_store::rules::ack::{decide, Freed, Step};
use relay_store::{AckOutcome, Key32};
use tokio_postgres::types::ToSql;

use crate::db::{i, key32, u, Attempt, Conn, OpResult, Tried};
use crate::pipeline::{begin_with, commit_with, rollback};

const LOCK: &str = "SELECT head_seq, acked_through FROM queues WHERE target = $1 FOR UPDATE";
/// The items in (acked, $2] when $2 is not beyond the head (then the rule deletes nothing and
/// nothing is read), and their account rows locked in key order.
const RANGE: &str = "WITH q AS (SELECT head_seq, acked_through FROM queues WHERE target = $1), \
    r AS MATERIALIZED (SELECT sender, account, bytes FROM items \
        WHERE target = $1 AND seq > (SELECT acked_through FROM q) AND seq <= $2 \
        AND $2 <= (SELECT head_seq FROM q)), \
    a AS MATERIALIZED (SELECT account FROM usage_account \
        WHERE account IN (SELECT account FROM r) ORDER BY account FOR UPDATE) \
    SELECT 0::smallint, sender, account, bytes FROM r \
    UNION ALL SELECT 1::smallint, NULL::bytea, account, 0::bigint FROM a";
/// Delete (after $2, through $3] of target $1, start the dedup horizons at $4, move the queue
/// by ($5, $6), the sender shares ($7-$9) and accounts ($10-$12) by their (negative) deltas: a
/// row brought to zero is deleted, any other clamped at zero.
const DELETE: &str =
    "WITH gone AS (DELETE FROM items WHERE target = $1 AND seq > $2 AND seq <= $3 \
        RETURNING sender, item_id), \
    mark AS (UPDATE dedup d SET gone_at_ms = $4 FROM gone \
        WHERE d.target = $1 AND d.sender = gone.sender AND d.item_id = gone.item_id), \
    q AS (UPDATE queues SET acked_through = $3, items = GREATEST(items + $5, 0), \
        bytes = GREATEST(bytes + $6, 0) WHERE target = $1), \
    sv AS (SELECT * FROM unnest($7::bytea[], $8::bigint[], $9::bigint[]) AS v(sender, n, b)), \
    su AS (UPDATE usage_sender x SET items = GREATEST(x.items + sv.n, 0), \
        bytes = GREATEST(x.bytes + sv.b, 0) FROM sv WHERE x.target = $1 AND x.sender = sv.sender \
        AND (x.items + sv.n > 0 OR x.bytes + sv.b > 0)), \
    sd AS (DELETE FROM usage_sender x USING sv WHERE x.target = $1 AND x.sender = sv.sender \
        AND x.items + sv.n <= 0 AND x.bytes + sv.b <= 0), \
    av AS (SELECT * FROM unnest($10::text[], $11::bigint[], $12::bigint[]) AS v(account, n, b)), \
    au AS (UPDATE usage_account x SET items = GREATEST(x.items + av.n, 0), \
        bytes = GREATEST(x.bytes + av.b, 0) FROM av WHERE x.account = av.account \
        AND (x.items + av.n > 0 OR x.bytes + av.b > 0)), \
    ad AS (DELETE FROM usage_account x USING av WHERE x.account = av.account \
        AND x.items + av.n <= 0 AND x.bytes + av.b <= 0) \
    SELECT 1";

/// An ack of `target` through `through` at `now`, rerun as every write.
pub(crate) struct Ack {
    pub target: Key32,
    pub through: u64,
    pub now: u64,
}

impl Attempt<AckOutcome> for Ack {
    fn once<'c>(&'c mut self, c: &'c mut Conn) -> Tried<'c, AckOutcome>
    where
        AckOutcome: 'c,
    {
        Box::pin(async move {
            let c: &deadpool_postgres::Object = c;
            let st = match prepare(c).await {
                Ok(st) => st,
                Err(e) => return (Err(e.into()), false),
            };
            let decided = begin_with(c, read(c, &st, self)).await;
            let (step, head, freed) = match decided {
                Ok(d) => d,
                Err(e) => return rollback(c, e).await,
            };
            match step {
                Step::Answer(outcome) => {
                    let (r, sent) = commit_with(c, async { OpResult::Ok(()) }).await;
                    (r.map(|()| outcome), sent)
                }
                Step::Delete { after, through } => {
                    let outcome = freed.outcome(through, head);
                    let (r, sent) =
                        commit_with(c, delete(c, &st, self, after, through, &freed)).await;
                    (r.map(|()| outcome), sent)
                }
            }
        })
    }
}

type Statements = [tokio_postgres::Statement; 3];

async fn prepare(c: &deadpool_postgres::Object) -> Result<Statements, tokio_postgres::Error> {
    Ok([
        c.prepare_cached(LOCK).await?,
        c.prepare_cached(RANGE).await?,
        c.prepare_cached(DELETE).await?,
    ])
}

/// The queue row (locked) and the range, decided: the step, the head, the usage freed per
/// (sender, account).
async fn read(
    c: &deadpool_postgres::Object,
    st: &Statements,
    a: &Ack,
) -> OpResult<(Step, u64, Freed<(Key32, Option<String>)>)> {
    let t = a.target.as_slice();
    let through = i(a.through);
    let (p0, p1): (&[&(dyn ToSql + Sync)], &[&(dyn ToSql + Sync)]) = (&[&t], &[&t, &through]);
    let (q, range) = tokio::join!(biased; c.query_opt(&st[0], p0), c.query(&st[1], p1));
    let (head, acked) = q?.map_or((0, 0), |r| (u(r.get(0)), u(r.get(1))));
    let range = range?;
    let step = decide(head, acked, a.through);
    let mut freed = Freed::default();
    if matches!(step, Step::Delete { .. }) {
        for r in range.iter().filter(|r| r.get::<_, i16>(0) == 0) {
            let sender = key32(r.get::<_, &[u8]>(1), "item sender")?;
            freed.add((sender, r.get(2)), u(r.get(3)));
        }
    }
    Ok((step, head, freed))
}

/// Items and bytes deltas, one per usage row.
type Deltas = (Vec<i64>, Vec<i64>);

/// The delete and every count it moves, in one statement.
async fn delete(
    c: &deadpool_postgres::Object,
    st: &Statements,
    a: &Ack,
    after: u64,
    through: u64,
    freed: &Freed<(Key32, Option<String>)>,
) -> OpResult<()> {
    // One delta per usage row: a sender may have items charged to several accounts.
    let mut senders: HashMap<&[u8], (i64, i64)> = HashMap::new();
    let mut accounts: HashMap<&str, (i64, i64)> = HashMap::new();
    for ((sender, account), (n, b)) in &freed.by_scope {
        let s = senders.entry(sender.as_slice()).or_default();
        *s = (s.0 + n, s.1 + b);
        if let Some(acct) = account {
            let x = accounts.entry(acct.as_str()).or_default();
            *x = (x.0 + n, x.1 + b);
        }
    }
    let (ss, (sn, sb)): (Vec<_>, Deltas) = senders.into_iter().unzip();
    let (an, (a_n, ab)): (Vec<_>, Deltas) = accounts.into_iter().unzip();
    c.execute(
        &st[2],
        &[
            &a.target.as_slice(),
            &i(after),
            &i(through),
            &i(a.now),
            &freed.total.0,
            &freed.total.1,
            &ss,
            &sn,
            &sb,
            &an,
            &a_n,
            &ab,
        ],
    )
    .await?;
    Ok(())
}
