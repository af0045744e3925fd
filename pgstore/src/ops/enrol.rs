//! Enrolments: enrol (relay-store's `rules::enrol`: this file reads the stored row, the live
//! counter and the same-name rows, and writes what the rule decided), the reads, and last seen. Enrolments serialise on the `meta` row
//! (its live counter and the relay log), so the cap and the name rule hold across processes.

use std::collections::HashMap;

use deadpool_postgres::Transaction;
use relay_store::fingerprint;
use relay_store::rules::{self, enrol::Step};
use relay_store::{log_text, EnrolOutcome, EnrolRequest, Enrolment, Key32, Result};
use tokio_postgres::Row;

use crate::cached::Cached as _;
use crate::ctx::{Ctx, WriteEnv};
use crate::db::{i, key32, u, Conn, OpResult};
use crate::ops::{deny, invite, oplog, Answer};

/// The columns [`from_row`] reads, in order.
pub(crate) const COLS: &str = "host_pubkey, host_name, owner_fp, account, authorized_by, \
                               authority_rank, enrolled_at_ms, revoked_at_ms, org, client_id";
/// How many columns [`COLS`] names (a query's next column has this index).
pub(crate) const N_COLS: usize = 10;

pub(crate) fn from_row(r: &Row) -> Result<Enrolment> {
    Ok(Enrolment {
        host_pubkey: key32(r.get::<_, &[u8]>(0), "enrolment key")?,
        host_name: r.get(1),
        owner_fp: r.get(2),
        account: r.get(3),
        authorized_by: r.get(4),
        authority_rank: u8::try_from(r.get::<_, i16>(5)).unwrap_or(u8::MAX),
        enrolled_at_ms: u(r.get(6)),
        revoked_at_ms: r.get::<_, Option<i64>>(7).map(u),
        org: r.get(8),
        client_id: r.get(9),
    })
}

/// The enrolment of `key` on `c`: read by every signed request (its hop check).
async fn read_enrolment(c: &Conn, key: Key32) -> OpResult<Option<Enrolment>> {
    let sql = format!("SELECT {COLS} FROM enrolments WHERE host_pubkey = $1");
    let rows = c.query_cached(&sql, &[&key.as_slice()]).await?;
    Ok(rows.first().map(from_row).transpose()?)
}

/// The enrolment of `pk` inside `t`; `lock`: `FOR UPDATE` (writers), else `FOR SHARE`.
pub(crate) async fn get(
    t: &Transaction<'_>,
    pk: &Key32,
    lock: bool,
) -> OpResult<Option<Enrolment>> {
    let sql = format!(
        "SELECT {COLS} FROM enrolments WHERE host_pubkey = $1 {}",
        if lock { "FOR UPDATE" } else { "FOR SHARE" }
    );
    let row = t.query_opt_cached(&sql, &[&pk.as_slice()]).await?;
    Ok(row.as_ref().map(from_row).transpose()?)
}

/// Write `e` (insert or replace).
pub(crate) async fn write(t: &Transaction<'_>, e: &Enrolment) -> OpResult<()> {
    t.execute_cached(
        "INSERT INTO enrolments (host_pubkey, host_name, name_folded, owner_fp, account, \
             authorized_by, authority_rank, enrolled_at_ms, revoked_at_ms, org, client_id) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (host_pubkey) DO UPDATE SET host_name = $2, name_folded = $3, \
             owner_fp = $4, account = $5, authorized_by = $6, authority_rank = $7, \
             enrolled_at_ms = $8, revoked_at_ms = $9, org = $10, client_id = $11",
        &[
            &e.host_pubkey.as_slice(),
            &e.host_name,
            &e.host_name.to_lowercase(),
            &e.owner_fp,
            &e.account,
            &e.authorized_by,
            &i16::from(e.authority_rank),
            &i(e.enrolled_at_ms),
            &e.revoked_at_ms.map(i),
            &e.org,
            &e.client_id,
        ],
    )
    .await?;
    Ok(())
}

/// Add to the live and revoked counters in `meta`.
pub(crate) async fn bump(t: &Transaction<'_>, live: i64, revoked: i64) -> OpResult<()> {
    t.execute_cached(
        "UPDATE meta SET live_enrolments = live_enrolments + $1, \
             revoked_enrolments = revoked_enrolments + $2 WHERE id = 1",
        &[&live, &revoked],
    )
    .await?;
    Ok(())
}

/// Live enrolments whose name equals `name` case-insensitively, at most `limit` (inside `t`:
/// the `meta` row lock serialises enrolments, so what is read stays true until `COMMIT`).
async fn live_by_name(t: &Transaction<'_>, name: &str, limit: usize) -> OpResult<Vec<Enrolment>> {
    let rows = t
        .query_cached(
            &format!(
                "SELECT {COLS} FROM enrolments WHERE name_folded = $1 \
                 AND revoked_at_ms IS NULL ORDER BY host_pubkey LIMIT $2"
            ),
            &[
                &name.to_lowercase(),
                &i64::try_from(limit).unwrap_or(i64::MAX),
            ],
        )
        .await?;
    Ok(rows.iter().map(from_row).collect::<Result<_>>()?)
}

async fn enrol_in(t: &Transaction<'_>, req: EnrolRequest, env: WriteEnv) -> OpResult<EnrolOutcome> {
    let now = env.now;
    let live_count: i64 = t
        .query_one_cached(
            "SELECT live_enrolments FROM meta WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await?
        .get(0);
    // Under the `meta` row lock that `put_deny` takes too: an entry committed before this
    // refuses it, one committed after finds it enrolled. The three reads go in one flight
    // (tokio-postgres pipelines the statements of one connection polled together; `biased`
    // sends them in this order).
    let invite = async {
        match &req.invite {
            relay_store::InviteClaim::Presented(hash) => invite::get(t, hash).await,
            _ => Ok(None),
        }
    };
    let (denied, stored, invite) = tokio::try_join!(
        biased;
        deny::denied_in(t, &req.denied_if, now),
        get(t, &req.host_pubkey, true),
        invite,
    )?;
    if denied {
        return Ok(EnrolOutcome::Denied);
    }
    let max_live = req.max_live;
    let live = u(live_count);
    let (new, first, redeem) =
        match rules::enrol::decide(stored.as_ref(), req, live, invite.as_ref(), now) {
            Step::Answer(outcome) => return Ok(outcome),
            Step::Write { new, first, redeem } => (new, first, redeem),
        };
    // Without a proven account no name is taken: the rows are read only when they can matter.
    if new.account.is_some() {
        let same_name =
            live_by_name(t, &new.host_name, rules::enrol::name_rows_limit(max_live)).await?;
        if rules::enrol::name_taken(&new, &same_name) {
            return Ok(EnrolOutcome::NameTaken);
        }
    }
    // The row and the live counter in one flight (see the reads above).
    let counted = async {
        match stored {
            Some(_) => Ok(()),
            None => bump(t, 1, 0).await,
        }
    };
    tokio::try_join!(biased; write(t, &new), counted)?;
    if let Some(hash) = &redeem {
        invite::redeem(t, hash, &new.host_pubkey, env).await?;
    }
    match &stored {
        Some(old) => {
            let detail = log_text::re_enrolled(old, &new);
            oplog::append(t, env, "re-enrol", &detail).await?;
        }
        None => oplog::append(t, env, "enrol", &log_text::enrolled(&new)).await?,
    }
    Ok(Step::outcome_after_write(first))
}

/// Enrol (the keyspace's rules; see the module doc).
pub(crate) fn enrol(ctx: &Ctx, req: EnrolRequest) -> Answer<EnrolOutcome> {
    ctx.write(req, |t, req, env| Box::pin(enrol_in(t, req.clone(), env)))
}

/// The enrolment of a key, live or revoked.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn enrolment(ctx: &Ctx, key: &Key32) -> Result<Option<Enrolment>> {
    let key = *key;
    ctx.read(move |c| Box::pin(read_enrolment(c, key)))
}

/// `enrolment` answered later: the caller awaits it instead of blocking.
pub(crate) fn enrolment_async(ctx: &Ctx, key: &Key32) -> Answer<Option<Enrolment>> {
    let key = *key;
    ctx.read_async(move |c| Box::pin(read_enrolment(c, key)))
}

/// Which of `keys` are live now: one statement for all of them (the relay asks every
/// second for the keys with waiters, up to its waiter cap).
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn live_keys(ctx: &Ctx, keys: &[Key32]) -> Result<Vec<Key32>> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let keys = keys.to_vec();
    ctx.read(move |c| {
        Box::pin(async move {
            let list: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
            let sql = "SELECT host_pubkey FROM enrolments WHERE host_pubkey = ANY($1::bytea[]) \
                       AND revoked_at_ms IS NULL";
            let rows = c.query_cached(sql, &[&list]).await?;
            Ok(rows
                .iter()
                .map(|r| key32(r.get::<_, &[u8]>(0), "enrolment key"))
                .collect::<Result<_>>()?)
        })
    })
}

/// Live enrolments whose name equals `name` case-insensitively, at most `limit`.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn live_enrolments_by_name(
    ctx: &Ctx,
    name: &str,
    limit: usize,
) -> Result<Vec<Enrolment>> {
    let folded = name.to_lowercase();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    ctx.read(move |c| {
        Box::pin(async move {
            let rows = c
                .query(
                    &format!(
                        "SELECT {COLS} FROM enrolments WHERE name_folded = $1 \
                     AND revoked_at_ms IS NULL ORDER BY host_pubkey LIMIT $2"
                    ),
                    &[&folded, &limit],
                )
                .await?;
            Ok(rows.iter().map(from_row).collect::<Result<_>>()?)
        })
    })
}

/// Number of live enrolments (a counter row).
///
/// # Errors
/// `Engine`, `Closed`.
pub(crate) fn live_enrolment_count(ctx: &Ctx) -> Result<u64> {
    ctx.read(|c| {
        Box::pin(async move {
            let n: i64 = c
                .query_one_cached("SELECT live_enrolments FROM meta WHERE id = 1", &[])
                .await?
                .get(0);
            Ok(u(n))
        })
    })
}

/// Enrolments whose fingerprint starts with `prefix` (dashes and case ignored), at most
/// `limit`: reads every enrolment once, for an admin's command.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn enrolments_by_fingerprint(
    ctx: &Ctx,
    prefix: &str,
    limit: usize,
) -> Result<Vec<Enrolment>> {
    let want: String = prefix
        .chars()
        .filter(|c| *c != '-')
        .map(|c| c.to_ascii_lowercase())
        .collect();
    ctx.read(move |c| {
        Box::pin(async move {
            let rows = c
                .query(
                    &format!("SELECT {COLS} FROM enrolments ORDER BY host_pubkey"),
                    &[],
                )
                .await?;
            let mut out = Vec::new();
            for r in &rows {
                let e = from_row(r)?;
                if fingerprint(&e.host_pubkey)
                    .replace('-', "")
                    .starts_with(&want)
                {
                    out.push(e);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok(out)
        })
    })
}

/// Live enrolments recorded with `client_id`, at most `limit`, in key order.
///
/// # Errors
/// `Engine`, `Corrupt`, `Closed`.
pub(crate) fn live_enrolments_by_client(
    ctx: &Ctx,
    client_id: &str,
    limit: usize,
) -> Result<Vec<Enrolment>> {
    let client_id = client_id.to_owned();
    ctx.read(move |c| {
        Box::pin(async move {
            let rows = c
                .query(
                    &format!(
                        "SELECT {COLS} FROM enrolments WHERE client_id = $1 \
                         AND revoked_at_ms IS NULL ORDER BY host_pubkey LIMIT $2"
                    ),
                    &[&client_id, &i64::try_from(limit).unwrap_or(i64::MAX)],
                )
                .await?;
            Ok(rows.iter().map(from_row).collect::<Result<_>>()?)
        })
    })
}

/// Record last-seen days (`rules::seen::advances`: live keys only, never moving a day
/// back); answers rows written.
pub(crate) fn record_seen(ctx: &Ctx, mut seen: Vec<(Key32, u32)>) -> Answer<u64> {
    // Rows locked and updated in key order, as inserts lock them (no lock-order deadlock).
    seen.sort_unstable();
    ctx.write(seen, |t, seen, _| Box::pin(record_seen_in(t, seen)))
}

/// Read the enrolment rows of `seen` (sorted by key) at once, locked in key order, and write
/// each day the rule lets through.
async fn record_seen_in(t: &Transaction<'_>, seen: &[(Key32, u32)]) -> OpResult<u64> {
    let keys: Vec<&[u8]> = seen.iter().map(|(pk, _)| pk.as_slice()).collect();
    let rows = t
        .query(
            "SELECT host_pubkey, revoked_at_ms IS NULL, last_seen_day FROM enrolments \
             WHERE host_pubkey = ANY($1) ORDER BY host_pubkey FOR UPDATE",
            &[&keys],
        )
        .await?;
    // Key -> (live, stored day), kept up to date as days are written (a key named twice).
    let mut stored = HashMap::with_capacity(rows.len());
    for r in &rows {
        let day = r
            .get::<_, Option<i32>>(2)
            .map(|d| u32::try_from(d).unwrap_or(0));
        stored.insert(
            key32(r.get::<_, &[u8]>(0), "enrolment key")?,
            (r.get::<_, bool>(1), day),
        );
    }
    let mut written = 0;
    // Key -> the last day written to it (a key named twice keeps its later, larger day).
    let mut days: HashMap<&Key32, i32> = HashMap::new();
    for (pk, day) in seen {
        let Some((live, last)) = stored.get_mut(pk) else {
            continue; // not enrolled
        };
        if !rules::seen::advances(*live, *last, *day) {
            continue;
        }
        days.insert(pk, i32::try_from(*day).unwrap_or(i32::MAX));
        *last = Some(*day);
        written += 1;
    }
    if !days.is_empty() {
        let (keys, days): (Vec<&[u8]>, Vec<i32>) =
            days.into_iter().map(|(k, d)| (k.as_slice(), d)).unzip();
        // One statement for all (one round trip each held these rows' locks against pushes).
        t.execute(
            "UPDATE enrolments e SET last_seen_day = v.day \
             FROM unnest($1::bytea[], $2::int[]) AS v(pk, day) WHERE e.host_pubkey = v.pk",
            &[&keys, &days],
        )
        .await?;
    }
    Ok(written)
}
