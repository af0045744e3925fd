//! The insert rule (relay-store's `rules::insert::decide`, the one the keyspace runs) applied to
//! a whole batch in memory: from the rows the batch read (and locked) once, decide every item in
//! order as if each ran alone, each seeing the rows the items before it stored
//! ([`Rows::apply`]), and gather what to write. `ops/insert.rs` reads the rows and writes the
//! plan in one statement: no statement per item.

use relay_store::rules::insert::rows::{QueueState, Rows};
use relay_store::rules::insert::{decide, NewRow};
use relay_store::{InsertOutcome, InsertRequest, Key32, Result, Usage};

/// The outcomes (in request order) and the writes that make them so.
#[derive(Debug, Default)]
pub(crate) struct Plan {
    pub outcomes: Vec<InsertOutcome>,
    /// New item rows (and their dedup rows): `reqs[i]`'s row.
    pub rows: Vec<(usize, NewRow)>,
    /// Queue rows whose head or usage moved: their new values.
    pub queues: Vec<(Key32, QueueState)>,
    /// Usage added per (target, sender) and per account.
    pub senders: Vec<((Key32, Key32), Usage)>,
    pub accounts: Vec<(String, Usage)>,
    /// The rows as the batch leaves them (what the next push of this process guesses it
    /// reads: `crate::guess`).
    pub after: Rows,
}

/// Decide the batch `reqs` at `now` against `start`.
pub(crate) fn plan(reqs: &[InsertRequest], start: &Rows, now: u64) -> Result<Plan> {
    let mut rows = start.clone();
    let mut out = Plan::default();
    for (ri, req) in reqs.iter().enumerate() {
        let d = decide(req, now, &rows)?;
        for row in d.rows {
            rows.apply(req, &row, now);
            out.rows.push((ri, row));
        }
        out.outcomes.push(d.outcome);
    }
    let delta = |now: Usage, was: Option<&Usage>| {
        let was = was.copied().unwrap_or_default();
        Usage {
            items: now.items.saturating_sub(was.items),
            bytes: now.bytes.saturating_sub(was.bytes),
        }
    };
    out.queues = rows
        .queues
        .iter()
        .filter(|(k, v)| start.queues.get(*k).copied().unwrap_or_default() != **v)
        .map(|(k, v)| (*k, *v))
        .collect();
    out.senders = rows
        .senders
        .iter()
        .map(|(k, v)| (*k, delta(*v, start.senders.get(k))))
        .filter(|(_, d)| *d != Usage::default())
        .collect();
    out.accounts = rows
        .accounts
        .iter()
        .map(|(k, v)| (k.clone(), delta(*v, start.accounts.get(k))))
        .filter(|(_, d)| *d != Usage::default())
        .collect();
    out.after = rows;
    Ok(out)
}
