//! The relay log on PostgreSQL: the same hash chain as the keyspace's (its canonical entry
//! bytes and hash are `relay_store::log::chain_hash`, shared, not copied), the head and the
//! checkpoint in the `meta` row, bounded by age and count like the keyspace's.

use deadpool_postgres::Transaction;
use relay_store::log::chain_hash as log_chain_hash;
use relay_store::log::{
    drop_for_enrolment_budget, enrolment_budget, enrolment_entry_fits, is_enrolment_entry,
};
use relay_store::{LogCheckpoint, LogRetention, LogVerdict, OpEntry, Result};

use crate::db::{db_err, i, key32, u, OpResult};
use crate::store::PgStore;

/// Most old entries one append drops (as the keyspace's).
const MAX_DROP_PER_APPEND: i64 = 64;

fn hash32(v: Option<Vec<u8>>, what: &str) -> Result<Option<[u8; 32]>> {
    v.map(|b| key32(&b, what)).transpose()
}

/// Append an entry inside the current transaction. Locks the `meta` row, so appends from
/// several processes form one chain.
pub(crate) async fn append(
    t: &Transaction<'_>,
    at_ms: u64,
    keep: LogRetention,
    kind: &str,
    detail: &str,
) -> OpResult<()> {
    let row = t
        .query_one(
            "SELECT ops_next, ops_head, ops_cp_seq, ops_cp_hash, ops_enrol_held FROM meta \
             WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await?;
    let held_before = u(row.get(4));
    let enrolment = is_enrolment_entry(kind);
    if enrolment && held_before >= enrolment_budget(keep) {
        let first = row.get::<_, Option<i64>>(2).map_or(0, |s| s + 1);
        let oldest = t
            .query_opt("SELECT kind FROM ops WHERE seq = $1", &[&first])
            .await?
            .is_some_and(|r| is_enrolment_entry(r.get(0)));
        if !enrolment_entry_fits(held_before, keep, oldest) {
            return Ok(()); // not logged one by one (relay_store::log::enrolment_entry_fits)
        }
    }
    let next: i64 = row.get(0);
    let prev = hash32(row.get(1), "meta ops_head")?.unwrap_or([0; 32]);
    let n = u(next);
    let hash = log_chain_hash(&prev, n, at_ms, kind, detail);
    t.execute(
        "INSERT INTO ops (seq, at_ms, kind, detail, hash) VALUES ($1, $2, $3, $4, $5)",
        &[&next, &i(at_ms), &kind, &detail, &hash.as_slice()],
    )
    .await?;
    t.execute(
        "UPDATE meta SET ops_next = $1, ops_head = $2 WHERE id = 1",
        &[&(next + 1), &hash.as_slice()],
    )
    .await?;
    let cp_seq: Option<i64> = row.get(2);
    let held = held_before + u64::from(enrolment);
    let held = drop_old(t, next + 1, cp_seq, at_ms, keep, held).await?;
    if held != held_before {
        t.execute(
            "UPDATE meta SET ops_enrol_held = $1 WHERE id = 1",
            &[&i(held)],
        )
        .await?;
    }
    Ok(())
}

/// Drop the oldest entries beyond `keep` (never the newest), and enrolment entries over the
/// enrolment budget while the oldest is one, at most [`MAX_DROP_PER_APPEND`]; the last dropped
/// becomes the checkpoint. `held`: the enrolment entries in the log; answers what is left.
async fn drop_old(
    t: &Transaction<'_>,
    next: i64,
    cp_seq: Option<i64>,
    now_ms: u64,
    keep: LogRetention,
    mut held: u64,
) -> OpResult<u64> {
    let first = cp_seq.map_or(0, |s| s + 1);
    let count = next - first;
    if count <= 1 {
        return Ok(held);
    }
    let cutoff = match keep.max_age_ms {
        0 => 0,
        age => now_ms.saturating_sub(age),
    };
    let max_entries = i(keep.max_entries.max(1));
    // Entries to drop by count, and then by age among the rest (never the newest).
    let by_count = (count - max_entries).max(0);
    let rows = t
        .query(
            "SELECT seq, at_ms, hash, kind FROM ops WHERE seq >= $1 AND seq < $2 ORDER BY seq \
             LIMIT $3",
            &[&first, &(next - 1), &MAX_DROP_PER_APPEND],
        )
        .await?;
    let mut last: Option<(i64, Vec<u8>)> = None;
    for (k, (expect, r)) in (first..).zip(rows.iter()).enumerate() {
        let seq: i64 = r.get(0);
        if seq != expect {
            break; // a gap is left for `verify_log` to report, never papered over
        }
        let at: i64 = r.get(1);
        let kind: &str = r.get(3);
        if i64::try_from(k).unwrap_or(i64::MAX) >= by_count
            && u(at) >= cutoff
            && !drop_for_enrolment_budget(held, keep, kind)
        {
            break;
        }
        if is_enrolment_entry(kind) {
            held = held.saturating_sub(1);
        }
        last = Some((seq, r.get(2)));
    }
    if let Some((seq, hash)) = last {
        t.execute(
            "DELETE FROM ops WHERE seq >= $1 AND seq <= $2",
            &[&first, &seq],
        )
        .await?;
        t.execute(
            "UPDATE meta SET ops_cp_seq = $1, ops_cp_hash = $2 WHERE id = 1",
            &[&seq, &hash],
        )
        .await?;
    }
    Ok(held)
}

impl PgStore {
    /// Append to the relay log.
    pub fn log_op(&self, kind: &str, detail: &str) -> super::Answer<()> {
        let (kind, detail) = (kind.to_string(), detail.to_string());
        let s = self.clone();
        let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
        let before = self
            .inner
            .log_order
            .lock()
            .ok()
            .and_then(|mut last| last.replace(done_rx));
        // The deadline runs from this append's turn, not from its submission (a queue of
        // appends would otherwise time out behind each other).
        self.spawn_queued(async move {
            if let Some(before) = before {
                let _ = before.await; // answered or dropped: either way its turn is over
            }
            let _done = done; // signals the next append when this one ends, however it ends
            let now = s.now_ms();
            let keep = s.inner.retention;
            crate::db::bounded(s.inner.db.tx(|t| {
                let (kind, detail) = (kind.clone(), detail.clone());
                Box::pin(async move { append(t, now, keep, &kind, &detail).await })
            }))
            .await
        })
    }

    /// The relay log, newest first, at most `limit` entries.
    ///
    /// # Errors
    /// `Engine`, `Corrupt`, `Closed`.
    pub fn ops(&self, limit: usize) -> Result<Vec<OpEntry>> {
        let s = self.clone();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.block(async move {
            let c = s.inner.db.conn().await?;
            let rows = c
                .query(
                    "SELECT seq, at_ms, kind, detail, hash FROM ops ORDER BY seq DESC LIMIT $1",
                    &[&limit],
                )
                .await
                .map_err(db_err)?;
            rows.iter()
                .map(|r| {
                    Ok(OpEntry {
                        seq: u(r.get(0)),
                        at_ms: u(r.get(1)),
                        kind: r.get(2),
                        detail: r.get(3),
                        hash: key32(r.get::<_, &[u8]>(4), "ops hash")?,
                    })
                })
                .collect()
        })
    }

    /// Recompute the relay log's chain from its checkpoint (one snapshot) and name the first
    /// entry that does not match.
    ///
    /// # Errors
    /// `Engine`, `Corrupt`, `Closed`.
    pub fn verify_log(&self) -> Result<LogVerdict> {
        let s = self.clone();
        self.block(async move {
            let mut c = s.inner.db.conn().await?;
            let t = crate::db::snapshot(&mut c).await?;
            let m = t
                .query_one(
                    "SELECT ops_next, ops_head, ops_cp_seq, ops_cp_hash FROM meta WHERE id = 1",
                    &[],
                )
                .await
                .map_err(db_err)?;
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
                .await
                .map_err(db_err)?;
            Ok(check_chain(checkpoint, next, head, &rows))
        })
    }
}

/// The chain verdict over rows (seq, at_ms, kind, detail, hash) in seq order.
fn check_chain(
    checkpoint: Option<LogCheckpoint>,
    next: u64,
    head: Option<[u8; 32]>,
    rows: &[tokio_postgres::Row],
) -> LogVerdict {
    let mut expect = checkpoint.map_or(0, |c| c.seq + 1);
    let mut prev = checkpoint.map_or([0; 32], |c| c.hash);
    let mut entries = 0u64;
    for r in rows {
        let seq = u(r.get(0));
        if seq != expect {
            let why = if seq > expect {
                format!("entry {expect} is missing (the next stored entry is {seq})")
            } else {
                format!("entry {seq} is out of place (entry {expect} was expected)")
            };
            return LogVerdict::Broken { seq: expect, why };
        }
        let (at_ms, kind, detail): (i64, String, String) = (r.get(1), r.get(2), r.get(3));
        let stored: &[u8] = r.get(4);
        let hash = log_chain_hash(&prev, seq, u(at_ms), &kind, &detail);
        if hash.as_slice() != stored {
            return LogVerdict::Broken {
                seq,
                why: format!(
                    "entry {seq} ({kind} at {at_ms} ms) does not match its hash: it was edited or \
                     moved, or the entry before it was removed or changed"
                ),
            };
        }
        prev = hash;
        expect = seq + 1;
        entries += 1;
    }
    if expect != next {
        return LogVerdict::Broken {
            seq: expect.min(next),
            why: format!("the log ends at entry {expect} but its head records {next}"),
        };
    }
    let reached = if entries == 0 && checkpoint.is_none() {
        [0; 32]
    } else {
        prev
    };
    if head.unwrap_or([0; 32]) != reached {
        return LogVerdict::Broken {
            seq: next.saturating_sub(1),
            why: "the newest entry's hash differs from the head recorded in meta".into(),
        };
    }
    LogVerdict::Intact {
        entries,
        checkpoint,
    }
}
