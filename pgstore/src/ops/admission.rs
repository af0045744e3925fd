//! The reads that admit a push to its targets (each target's enrolment and sender list) as one
//! statement for the whole push: two round trips per target before, each blocking a relay
//! worker.

use relay_store::{Admission, Key32, Result, StoreError};

use crate::cached::Cached as _;
use crate::ctx::Ctx;
use crate::db::{Conn, OpResult};
use crate::ops::enrol::{self, COLS};
use crate::ops::lists::{list_from_row, LIST_COLS};
use crate::ops::Answer;

/// `target`'s enrolment and sender list, from one snapshot.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn admission(ctx: &Ctx, target: &Key32) -> Result<Admission> {
    let target = *target;
    let read = ctx.read(move |c| Box::pin(async move { read(c, &[target]).await }))?;
    read.into_iter()
        .next()
        .ok_or_else(|| StoreError::Corrupt("admission read: no row".into()))
}

/// Each of `targets`' enrolment and sender list, in `targets` order, from one snapshot;
/// the caller awaits it instead of blocking.
pub(crate) fn admissions(ctx: &Ctx, targets: &[Key32]) -> Answer<Vec<Admission>> {
    if targets.is_empty() {
        return Answer::ready(Ok(Vec::new()));
    }
    let targets = targets.to_vec();
    ctx.read_async(move |c| Box::pin(async move { read(c, &targets).await }))
}

/// The admission rows of `targets`: one statement, prepared once per connection (every push
/// runs it).
async fn read(c: &Conn, targets: &[Key32]) -> OpResult<Vec<Admission>> {
    // One key (a single push) as a scalar: PostgreSQL keeps a generic plan of that, where an
    // array's custom plan was made again on every call (114 us of its CPU per push).
    let keys = if targets.len() == 1 {
        "(VALUES ($1::bytea, 1)) AS k(target, n)"
    } else {
        "unnest($1::bytea[]) WITH ORDINALITY AS k(target, n)"
    };
    // Both tables are keyed by the target, so every key gives exactly one row; each looked up
    // by its primary key (`LATERAL ... LIMIT 1`: a young table's plan was a hash join over a
    // sequential scan of both).
    let sql = format!(
        "SELECT {}, {} FROM {keys} \
         LEFT JOIN LATERAL (SELECT * FROM enrolments WHERE host_pubkey = k.target LIMIT 1) e \
             ON true \
         LEFT JOIN LATERAL (SELECT * FROM sender_lists WHERE target = k.target LIMIT 1) l \
             ON true \
         ORDER BY k.n",
        qualified("e", COLS),
        qualified("l", LIST_COLS)
    );
    let rows = match targets {
        [one] => c.query_cached(&sql, &[&one.as_slice()]).await?,
        many => {
            let keys: Vec<&[u8]> = many.iter().map(|k| k.as_slice()).collect();
            c.query_cached(&sql, &[&keys]).await?
        }
    };
    if rows.len() != targets.len() {
        return Err(StoreError::Corrupt(format!(
            "admission read: {} rows for {} targets",
            rows.len(),
            targets.len()
        ))
        .into());
    }
    // The sender list's columns follow the enrolment's.
    let list_at = COLS.split(',').count();
    let read = targets
        .iter()
        .zip(&rows)
        .map(|(t, r)| {
            let enrolled = r.get::<_, Option<&[u8]>>(0).is_some();
            let listed = r.get::<_, Option<&[u8]>>(list_at).is_some();
            Ok(Admission {
                enrolment: enrolled.then(|| enrol::from_row(r)).transpose()?,
                senders: listed.then(|| list_from_row(*t, r, list_at)).transpose()?,
            })
        })
        .collect::<Result<_>>()?;
    Ok(read)
}

/// `cols` (a comma-separated column list) each prefixed with `table.`.
fn qualified(table: &str, cols: &str) -> String {
    cols.split(',')
        .map(|c| format!("{table}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}
