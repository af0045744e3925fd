//! The reads that admit a push to its targets (each target's enrolment and sender list) as one
//! statement for the whole push: two round trips per target before, each blocking a relay
//! worker.

use relay_store::{Admission, Key32, Result, StoreError};

use crate::ops::enrol::{self, COLS};
use crate::ops::lists::{list_from_row, LIST_COLS};
use crate::ops::Answer;
use crate::store::PgStore;

/// `target`'s enrolment and sender list, from one snapshot.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn admission(store: &PgStore, target: &Key32) -> Result<Admission> {
    let read = store.block(read(store.clone(), vec![*target]))?;
    read.into_iter()
        .next()
        .ok_or_else(|| StoreError::Corrupt("admission read: no row".into()))
}

/// Each of `targets`' enrolment and sender list, in `targets` order, from one snapshot;
/// the caller awaits it instead of blocking.
pub(crate) fn admissions(store: &PgStore, targets: &[Key32]) -> Answer<Vec<Admission>> {
    store.spawn(read(store.clone(), targets.to_vec()))
}

/// The admission rows of `targets`: one statement, prepared once per connection (every push
/// runs it).
async fn read(s: PgStore, targets: Vec<Key32>) -> Result<Vec<Admission>> {
    if targets.is_empty() {
        return Ok(Vec::new());
    }
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
    let db = &s.inner.db;
    let rows = match &targets[..] {
        [one] => db.query_cached(&sql, &[&one.as_slice()]).await?,
        many => {
            let keys: Vec<&[u8]> = many.iter().map(|k| k.as_slice()).collect();
            db.query_cached(&sql, &[&keys]).await?
        }
    };
    if rows.len() != targets.len() {
        return Err(StoreError::Corrupt(format!(
            "admission read: {} rows for {} targets",
            rows.len(),
            targets.len()
        )));
    }
    // The sender list's columns follow the enrolment's.
    let list_at = COLS.split(',').count();
    targets
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
        .collect()
}

/// `cols` (a comma-separated column list) each prefixed with `table.`.
fn qualified(table: &str, cols: &str) -> String {
    cols.split(',')
        .map(|c| format!("{table}.{}", c.trim()))
        .collect::<Vec<_>>()
        .join(", ")
}
