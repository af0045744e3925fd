//! Admin-side operations: idle-enrolment expiry (relay-store's `rules::idle`), the
//! hosts listing and whole-store figures. Reads take one snapshot (REPEATABLE READ).

use deadpool_postgres::Transaction;
use relay_store::rules;
use relay_store::{HostFilter, HostRow, IdleReport, Key32, Result, Stats, Usage};

use crate::ctx::{Ctx, WriteEnv};
use crate::db::{db_err, key32, u, OpResult};
use crate::ops::lists::write_list;
use crate::ops::{enrol, oplog, Answer};

/// The first column after an enrolment's ([`enrol::COLS`]).
const N: usize = enrol::N_COLS;

/// Most hosts one listing reads (bounded: enrolments are capped far below this).
const MAX_HOSTS: i64 = 10_000_000;

/// What one idle-expiry call scans: from when, idle how long, after which key, how many.
#[derive(Clone, Copy)]
struct IdleScan {
    now_ms: u64,
    idle_ms: u64,
    after: Option<Key32>,
    max: i64,
}

async fn expire_idle_in(t: &Transaction<'_>, a: &IdleScan, env: WriteEnv) -> OpResult<IdleReport> {
    let IdleScan {
        now_ms,
        idle_ms,
        after,
        max,
    } = *a;
    // The call's own time decides and is logged (the caller's clock), as in the keyspace.
    let env = WriteEnv { now: now_ms, ..env };
    t.query_one("SELECT 1 FROM meta WHERE id = 1 FOR UPDATE", &[])
        .await?;
    let after = after.map(|k| k.to_vec()).unwrap_or_default();
    let rows = t
        .query(
            &format!(
                "SELECT {}, e.last_seen_day, COALESCE(q.items, 0), COALESCE(q.bytes, 0) \
                 FROM enrolments e LEFT JOIN queues q ON q.target = e.host_pubkey \
                 WHERE e.host_pubkey > $1 ORDER BY e.host_pubkey LIMIT $2 FOR UPDATE OF e",
                enrol::COLS
                    .split(", ")
                    .map(|c| format!("e.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            &[&after, &(max + 1)],
        )
        .await?;
    let mut scan = rules::idle::Scan::new(usize::try_from(max).unwrap_or(usize::MAX), rows.len());
    for r in rows.iter().take(scan.take()) {
        let e = enrol::from_row(r)?;
        let day = r
            .get::<_, Option<i32>>(N)
            .map(|d| u32::try_from(d).unwrap_or(0));
        let queue = Usage {
            items: u(r.get(N + 1)),
            bytes: u(r.get(N + 2)),
        };
        let expires = rules::idle::expires(&e, day, queue, now_ms, idle_ms);
        if expires {
            let pk = e.host_pubkey.as_slice();
            write_list(t, &e.host_pubkey, None).await?;
            for sql in [
                "DELETE FROM enc_ads WHERE host_pubkey = $1",
                "DELETE FROM enc_ads_v2 WHERE host_pubkey = $1",
                "DELETE FROM enrolments WHERE host_pubkey = $1",
            ] {
                t.execute(sql, &[&pk]).await?;
            }
            enrol::bump(t, -1, 0).await?;
        }
        scan.row(e.host_pubkey, expires);
    }
    let (report, entry) = scan.finish(idle_ms);
    if let Some(entry) = entry {
        oplog::append(t, env, entry.kind, &entry.detail).await?;
    }
    Ok(report)
}

/// Delete live enrolments idle `idle_ms` with an empty queue, scanning at most `max` rows
/// after `after`; logged when any went.
pub(crate) fn expire_idle(
    ctx: &Ctx,
    now_ms: u64,
    idle_ms: u64,
    after: Option<Key32>,
    max: usize,
) -> Answer<IdleReport> {
    let scan = IdleScan {
        now_ms,
        idle_ms,
        after,
        max: i64::try_from(max.max(1)).unwrap_or(i64::MAX - 1),
    };
    ctx.write(scan, |t, scan, env| Box::pin(expire_idle_in(t, scan, env)))
}

/// Every enrolment passing `filter`, in key order, handed to `each`; answers how many.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`, or what `each` returned.
pub(crate) fn hosts(
    ctx: &Ctx,
    filter: &HostFilter,
    each: &mut dyn FnMut(&HostRow) -> Result<()>,
) -> Result<u64> {
    let rows = ctx.read(|c| {
        Box::pin(async move {
            let cols = enrol::COLS
                .split(", ")
                .map(|c| format!("e.{c}"))
                .collect::<Vec<_>>()
                .join(", ");
            let rows = c
                .query(
                    &format!(
                        "SELECT {cols}, e.last_seen_day, COALESCE(q.items, 0), \
                         COALESCE(q.bytes, 0), a.at_ms, b.at_ms \
                     FROM enrolments e LEFT JOIN queues q ON q.target = e.host_pubkey \
                     LEFT JOIN enc_ads a ON a.host_pubkey = e.host_pubkey \
                     LEFT JOIN enc_ads_v2 b ON b.host_pubkey = e.host_pubkey \
                     ORDER BY e.host_pubkey LIMIT $1"
                    ),
                    &[&MAX_HOSTS],
                )
                .await?;
            let hosts = rows
                .iter()
                .map(|r| {
                    Ok(HostRow {
                        enrolment: enrol::from_row(r)?,
                        last_seen_day: r
                            .get::<_, Option<i32>>(N)
                            .map(|d| u32::try_from(d).unwrap_or(0)),
                        queue: Usage {
                            items: u(r.get(N + 1)),
                            bytes: u(r.get(N + 2)),
                        },
                        enc_ad_v1_at_ms: r.get::<_, Option<i64>>(N + 3).map(u),
                        enc_ad_v2_at_ms: r.get::<_, Option<i64>>(N + 4).map(u),
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(hosts)
        })
    })?;
    let mut n = 0;
    for row in rows.iter().filter(|r| filter.matches(r)) {
        each(row)?;
        n += 1;
    }
    Ok(n)
}

/// Whole-store figures (an admin's command: counts over tables are fine here).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn stats(ctx: &Ctx) -> Result<Stats> {
    let meta = super::meta::meta(ctx)?;
    ctx.read(|c| {
        Box::pin(async move {
            let t = crate::db::snapshot(c).await?;
            let one = |sql: &'static str| {
                let t = &t;
                async move {
                    t.query_one(sql, &[])
                        .await
                        .map_err(db_err)
                        .map(|r| r.get::<_, Option<i64>>(0))
                }
            };
            let live = one("SELECT live_enrolments FROM meta WHERE id = 1").await?;
            let revoked = one("SELECT revoked_enrolments FROM meta WHERE id = 1").await?;
            let items = one("SELECT sum(items)::BIGINT FROM queues").await?;
            let bytes = one("SELECT sum(bytes)::BIGINT FROM queues").await?;
            let dedup = one("SELECT count(*) FROM dedup").await?;
            let v1 = one("SELECT count(*) FROM enc_ads").await?;
            let v2 = one("SELECT count(*) FROM enc_ads_v2").await?;
            let oldest = one("SELECT min(accepted_at_ms) FROM items").await?;
            let disk = one("SELECT pg_database_size(current_database())").await?;
            let top = t
                .query(
                    "SELECT target, items, bytes FROM queues WHERE items > 0 \
                 ORDER BY items DESC, target LIMIT 10",
                    &[],
                )
                .await?;
            let top_targets = top
                .iter()
                .map(|r| {
                    Ok((
                        key32(r.get::<_, &[u8]>(0), "queue target")?,
                        Usage {
                            items: u(r.get(1)),
                            bytes: u(r.get(2)),
                        },
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            let n = |v: Option<i64>| v.map_or(0, u);
            Ok(Stats {
                meta,
                live_enrolments: n(live),
                revoked_enrolments: n(revoked),
                queued: Usage {
                    items: n(items),
                    bytes: n(bytes),
                },
                top_targets,
                dedup_rows: n(dedup),
                enc_ads_v1: n(v1),
                enc_ads_v2: n(v2),
                oldest_queued_ms: oldest.map(u),
                disk_bytes: n(disk),
            })
        })
    })
}
