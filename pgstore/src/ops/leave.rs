//! Items leave their queues (the sweep's expiries, an admin's purge, a host's delete), each
//! expired or purged envelope's sender told by a notice queued right after it, as the fjall
//! store does one item at a time. Here a run of items leaves in one statement ([`LEAVE`]) and
//! their notices follow in one insert batch, which gives what one at a time gives whenever no
//! item of the run takes usage off a queue or account that an earlier item's notice is charged
//! to ([`runs`] cuts the runs there). One item and one row at a time took six to eight round
//! trips per item, and the sweep expired 430 items/s on a 500,000-item store.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use deadpool_postgres::Transaction;
use relay_store::{ExpiredItem, Key32, NoticeFn, Quotas};
use tokio_postgres::Row;

use crate::cached::Cached as _;
use crate::db::{i, key32, u, OpResult};
use crate::ops::insert::insert_batch;
use crate::ops::kind::kind_of;

/// The notice builder, callable from the transaction's task (it is `Send`, not `Sync`).
pub(crate) type SharedNotice = Arc<Mutex<NoticeFn>>;

/// `SELECT` of the items (alias `it`) about to leave, as [`Due`] reads them ([`due_from`]),
/// followed by `$where` (a `WHERE ... ORDER BY ...` over `it`).
macro_rules! select_due {
    ($where:literal) => {
        concat!(
            "SELECT it.target, it.seq, it.account, it.sender, e.account FROM items it \
             LEFT JOIN enrolments e ON e.host_pubkey = it.sender ",
            $where
        )
    };
}
pub(crate) use select_due;

/// Delete the items ($1 targets, $2 seqs) that are due by $3 (all when NULL), start their dedup
/// horizons at $4, and take their usage off their queue, sender-share and account rows: the sum
/// per row, clamped at zero, which for decrements is what clamping after each one gives
/// (max(max(x - a, 0) - b, 0) = max(x - a - b, 0) for a, b >= 0); a row whose items and bytes
/// both reach zero is deleted, as no row is kept for nothing. The queue rows are the callers'
/// to lock first, as every writer of a target's items does.
const LEAVE: &str = "WITH gone AS (\
        DELETE FROM items it USING unnest($1::bytea[], $2::bigint[]) AS k(target, seq) \
        WHERE it.target = k.target AND it.seq = k.seq \
            AND ($3::bigint IS NULL OR it.expires_at_ms <= $3) \
        RETURNING it.target, it.seq, it.kind, it.item_id, it.sender, it.account, it.bytes, \
            it.accepted_at_ms, it.expires_at_ms), \
    h AS (UPDATE dedup d SET gone_at_ms = $4 FROM gone g \
        WHERE d.target = g.target AND d.sender = g.sender AND d.item_id = g.item_id), \
    qn AS (SELECT target, count(*)::bigint AS n, sum(bytes)::bigint AS b FROM gone \
        GROUP BY target), \
    q AS (UPDATE queues q SET items = GREATEST(q.items - qn.n, 0), \
            bytes = GREATEST(q.bytes - qn.b, 0) \
        FROM qn WHERE q.target = qn.target), \
    sn AS (SELECT target, sender, count(*)::bigint AS n, sum(bytes)::bigint AS b FROM gone \
        GROUP BY target, sender), \
    sd AS (DELETE FROM usage_sender us USING sn \
        WHERE us.target = sn.target AND us.sender = sn.sender \
            AND us.items <= sn.n AND us.bytes <= sn.b), \
    su AS (UPDATE usage_sender us SET items = GREATEST(us.items - sn.n, 0), \
            bytes = GREATEST(us.bytes - sn.b, 0) \
        FROM sn WHERE us.target = sn.target AND us.sender = sn.sender \
            AND NOT (us.items <= sn.n AND us.bytes <= sn.b)), \
    an AS (SELECT account, count(*)::bigint AS n, sum(bytes)::bigint AS b FROM gone \
        WHERE account IS NOT NULL GROUP BY account), \
    ad AS (DELETE FROM usage_account ua USING an \
        WHERE ua.account = an.account AND ua.items <= an.n AND ua.bytes <= an.b), \
    au AS (UPDATE usage_account ua SET items = GREATEST(ua.items - an.n, 0), \
            bytes = GREATEST(ua.bytes - an.b, 0) \
        FROM an WHERE ua.account = an.account AND NOT (ua.items <= an.n AND ua.bytes <= an.b)) \
    SELECT target, seq, kind, item_id, sender, bytes, accepted_at_ms, expires_at_ms FROM gone \
    ORDER BY target, seq";

/// An item that left its queue, as its row held it.
pub(crate) struct Left {
    pub(crate) item: ExpiredItem,
    pub(crate) bytes: i64,
}

/// Take `items` (target, seq; in that order) out of their queues at `now` (see [`LEAVE`]);
/// with `due_by`, only those that expire by then. Returns the ones that were there (and due),
/// in (target, seq) order.
pub(crate) async fn leave(
    t: &Transaction<'_>,
    items: &[(Key32, u64)],
    due_by: Option<u64>,
    now: u64,
) -> OpResult<Vec<Left>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let targets: Vec<&[u8]> = items.iter().map(|(k, _)| k.as_slice()).collect();
    let seqs: Vec<i64> = items.iter().map(|&(_, s)| i(s)).collect();
    let rows = t
        .query_cached(LEAVE, &[&targets, &seqs, &due_by.map(i), &i(now)])
        .await?;
    let left = rows
        .iter()
        .map(|r| {
            Ok(Left {
                item: ExpiredItem {
                    target: key32(r.get::<_, &[u8]>(0), "item target")?,
                    seq: u(r.get(1)),
                    kind: kind_of(r.get(2))?,
                    item_id: r.get(3),
                    sender: key32(r.get::<_, &[u8]>(4), "item sender")?,
                    accepted_at_ms: u(r.get(6)),
                    expires_at_ms: u(r.get(7)),
                },
                bytes: r.get(5),
            })
        })
        .collect::<relay_store::Result<_>>()?;
    Ok(left)
}

/// An item about to leave, as read before its queue was locked: where it is, the account it is
/// charged to, its sender (whom its notice goes to) and the sender's account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Due {
    pub(crate) target: Key32,
    pub(crate) seq: u64,
    pub(crate) account: Option<String>,
    pub(crate) sender: Key32,
    pub(crate) sender_account: Option<String>,
}

/// A row of [`select_due`].
pub(crate) fn due_from(r: &Row) -> relay_store::Result<Due> {
    Ok(Due {
        target: key32(r.get::<_, &[u8]>(0), "item target")?,
        seq: u(r.get(1)),
        account: r.get(2),
        sender: key32(r.get::<_, &[u8]>(3), "item sender")?,
        sender_account: r.get(4),
    })
}

/// Cut `due` (in the order they leave) into runs that may each leave at once before their
/// notices: a run ends before an item charged to a queue or an account that the notice of an
/// earlier item of the run is charged to (that notice's quota checks must not see it go).
pub(crate) fn runs(due: &[Due]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut told: HashSet<&Key32> = HashSet::new();
    let mut told_accounts: HashSet<&str> = HashSet::new();
    for (n, d) in due.iter().enumerate() {
        let charged_to_earlier_notice = told.contains(&d.target)
            || d.account
                .as_deref()
                .is_some_and(|a| told_accounts.contains(a));
        if charged_to_earlier_notice {
            out.push(start..n);
            start = n;
            told.clear();
            told_accounts.clear();
        }
        told.insert(&d.sender);
        if let Some(a) = d.sender_account.as_deref() {
            told_accounts.insert(a);
        }
    }
    if start < due.len() {
        out.push(start..due.len());
    }
    out
}

/// What items did: per item that left, its row and whether a new notice was queued.
pub(crate) type LeftAndTold = Vec<(Left, bool)>;

/// How the senders of items that leave are told: `notice` builds each notice, inserted at `now`
/// with `quotas` and `retention_ms` like any insert.
pub(crate) struct Telling<'a> {
    pub(crate) notice: &'a SharedNotice,
    pub(crate) quotas: Quotas,
    pub(crate) retention_ms: u64,
    pub(crate) now: u64,
}

/// `due` (in the order they leave) leaves in runs ([`runs`]), at most `max_runs` of them, each
/// run in one statement ([`leave`]; with `due_by`, only items due by then) followed by its
/// notices. Answers what left and whether runs were left over for another call.
pub(crate) async fn leave_in_runs(
    t: &Transaction<'_>,
    due: &[Due],
    due_by: Option<u64>,
    max_runs: usize,
    tell: &Telling<'_>,
) -> OpResult<(LeftAndTold, bool)> {
    let runs = runs(due);
    let mut out = Vec::with_capacity(due.len());
    for run in runs.iter().take(max_runs) {
        out.extend(leave_and_tell(t, &due[run.clone()], due_by, tell).await?);
    }
    Ok((out, runs.len() > max_runs))
}

/// One run leaves and each envelope's sender gets its notice (sender only; enrolment, quotas
/// and dedup as any insert, in the run's order, in one batch).
async fn leave_and_tell(
    t: &Transaction<'_>,
    run: &[Due],
    due_by: Option<u64>,
    tell: &Telling<'_>,
) -> OpResult<LeftAndTold> {
    let keys: Vec<(Key32, u64)> = run.iter().map(|d| (d.target, d.seq)).collect();
    let left = leave(t, &keys, due_by, tell.now).await?;
    // The rule (sender only; enrolment, quotas and dedup as any insert) is relay-store's.
    let (asked, reqs): (Vec<usize>, Vec<_>) = {
        let f = tell.notice.lock().unwrap_or_else(|p| p.into_inner());
        left.iter()
            .enumerate()
            .filter_map(|(n, l)| {
                relay_store::notice::notice_request(
                    &l.item,
                    &f,
                    tell.quotas,
                    tell.retention_ms,
                    tell.now,
                )
                .map(|r| (n, r))
            })
            .unzip()
    };
    let mut told = vec![false; left.len()];
    if !reqs.is_empty() {
        let outcomes = insert_batch(t, &reqs, tell.now).await?;
        for (n, o) in asked.into_iter().zip(&outcomes) {
            told[n] = relay_store::notice::notice_queued(o);
        }
    }
    Ok(left.into_iter().zip(told).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn due(target: u8, sender: u8, account: Option<&str>, sender_account: Option<&str>) -> Due {
        Due {
            target: [target; 32],
            seq: 1,
            account: account.map(str::to_string),
            sender: [sender; 32],
            sender_account: sender_account.map(str::to_string),
        }
    }

    /// Items whose notices go to hosts none of them is queued for leave in one run.
    #[test]
    fn items_unrelated_to_earlier_notices_leave_in_one_run() {
        let d = [
            due(1, 9, Some("a"), None),
            due(2, 9, None, None),
            due(1, 8, Some("a"), Some("b")),
        ];
        assert_eq!(runs(&d), vec![0..3]);
        assert!(runs(&[]).is_empty());
    }

    /// An item queued for the host an earlier item's notice goes to starts a new run, and so
    /// does one charged to the account that notice is charged to.
    #[test]
    fn a_run_ends_before_an_item_charged_where_an_earlier_notice_goes() {
        let d = [
            due(1, 9, None, None),
            due(9, 7, None, None), // queued for 9, told by item 0's notice
            due(2, 6, None, Some("x")),
            due(3, 5, Some("x"), None), // charged to x, item 2's sender's account
            due(6, 4, None, None),      // queued for 6: item 2's sender, an earlier run's
        ];
        assert_eq!(runs(&d), vec![0..1, 1..3, 3..5]);
    }

    /// Its own notice does not cut an item's run: a host's own item to itself leaves with the
    /// others, its notice after its own departure as one at a time.
    #[test]
    fn an_items_own_notice_does_not_cut_its_run() {
        assert_eq!(
            runs(&[due(1, 1, None, None), due(2, 3, None, None)]),
            vec![0..2]
        );
    }
}
