//! The store's own bookkeeping against its data, for tests: every counter row against a
//! recount of the items it counts, the live/revoked counters against the enrolments, the
//! sender index against the lists. Not part of the supported API.

use relay_store::Result;

use crate::db::db_err;
use crate::store::PgStore;

/// Queries that return one row per disagreement (empty: the bookkeeping holds).
const CHECKS: &[(&str, &str)] = &[
    (
        "queue usage differs from its items",
        "SELECT q.target FROM queues q LEFT JOIN (SELECT target, count(*) n, sum(bytes) b \
         FROM items GROUP BY target) i ON i.target = q.target \
         WHERE q.items <> COALESCE(i.n, 0) OR q.bytes <> COALESCE(i.b, 0)",
    ),
    (
        "items of a target without a queue row",
        "SELECT i.target FROM items i LEFT JOIN queues q ON q.target = i.target \
         WHERE q.target IS NULL",
    ),
    (
        "an item above its queue's head or at/below its acked cursor",
        "SELECT i.target FROM items i JOIN queues q ON q.target = i.target \
         WHERE i.seq > q.head_seq OR i.seq <= q.acked_through",
    ),
    (
        "sender-share usage differs from its items",
        "SELECT COALESCE(u.target, i.target) FROM usage_sender u FULL JOIN \
         (SELECT target, sender, count(*) n, sum(bytes) b FROM items GROUP BY target, sender) i \
         ON i.target = u.target AND i.sender = u.sender \
         WHERE COALESCE(u.items, 0) <> COALESCE(i.n, 0) OR COALESCE(u.bytes, 0) <> COALESCE(i.b, 0)",
    ),
    (
        "account usage differs from its items",
        "SELECT COALESCE(u.account, i.account) FROM usage_account u FULL JOIN \
         (SELECT account, count(*) n, sum(bytes) b FROM items WHERE account IS NOT NULL \
          GROUP BY account) i ON i.account = u.account \
         WHERE COALESCE(u.items, 0) <> COALESCE(i.n, 0) OR COALESCE(u.bytes, 0) <> COALESCE(i.b, 0)",
    ),
    (
        "a queued item without its dedup row",
        "SELECT i.target FROM items i LEFT JOIN dedup d ON d.target = i.target \
         AND d.sender = i.sender AND d.item_id = i.item_id AND d.seq = i.seq \
         WHERE d.target IS NULL",
    ),
    (
        "a queued item's dedup row has a horizon (it could be pruned while queued)",
        "SELECT i.target FROM items i JOIN dedup d ON d.target = i.target \
         AND d.sender = i.sender AND d.item_id = i.item_id AND d.seq = i.seq \
         WHERE d.gone_at_ms IS NOT NULL",
    ),
    (
        "live/revoked counters differ from the enrolments",
        "SELECT 1 FROM meta m WHERE m.live_enrolments <> \
             (SELECT count(*) FROM enrolments WHERE revoked_at_ms IS NULL) \
         OR m.revoked_enrolments <> (SELECT count(*) FROM enrolments WHERE revoked_at_ms IS NOT NULL)",
    ),
    (
        "the relay log's enrolment count differs from its entries",
        "SELECT 1 FROM meta m WHERE m.ops_enrol_held <> \
             (SELECT count(*) FROM ops WHERE kind IN ('enrol', 're-enrol'))",
    ),
];

impl PgStore {
    /// Every disagreement between the store's counters/indexes and its data, named.
    ///
    /// # Errors
    /// `Engine` on database errors.
    #[doc(hidden)]
    pub fn bookkeeping_errors_for_tests(&self) -> Result<Vec<String>> {
        self.ctx().read(|c| {
            Box::pin(async move {
                let mut out = Vec::new();
                for (what, sql) in CHECKS {
                    let rows = c.query(*sql, &[]).await.map_err(db_err)?;
                    if !rows.is_empty() {
                        out.push(format!("{what} ({} rows)", rows.len()));
                    }
                }
                // The sender index holds exactly one row per (sender named, target).
                let lists = c
                    .query("SELECT target, senders FROM sender_lists", &[])
                    .await
                    .map_err(db_err)?;
                let mut want = std::collections::BTreeSet::new();
                for r in &lists {
                    let target: Vec<u8> = r.get(0);
                    let senders: &[u8] = r.get(1);
                    for sender in senders.chunks(32) {
                        want.insert((sender.to_vec(), target.clone()));
                    }
                }
                let have: std::collections::BTreeSet<(Vec<u8>, Vec<u8>)> = c
                    .query("SELECT sender, target FROM sender_index", &[])
                    .await
                    .map_err(db_err)?
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect();
                if want != have {
                    out.push("the sender index differs from the lists".into());
                }
                Ok(out)
            })
        })
    }
}
