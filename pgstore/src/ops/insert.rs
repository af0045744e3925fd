//! Insert a batch of items (a push, or one item) in one transaction of five statements, whatever
//! the batch's size, and two round trips ([`crate::pipeline`]):
//!
//! 1. BEGIN, [`LOCK`] (enrolments shared, missing queue rows created, queue rows for update,
//!    each in key order, then the targets' accounts) and [`READ`] (account usage rows for update, dedup and sender-share
//!    rows), in one flight. READ's snapshot is taken after LOCK holds its locks, so it sees
//!    every commit of an earlier holder of those rows.
//! 2. The decision in memory, by `relay_store::rules::insert` for each item in order
//!    ([`insert_plan`]), then [`WRITE`] (items, dedup, queues, sender and account usage as
//!    data-modifying `WITH` parts over `unnest` arrays) and COMMIT in one flight.
//!
//! The rules are those of one item at a time: the locks are held from the reads to `COMMIT`,
//! so what was read stays true (every writer of a target's items, dedup and sender-share rows
//! holds that target's queue row lock). A refused item writes nothing, so no savepoint is
//! needed.

use std::sync::Arc;

use deadpool_postgres::GenericClient;
use relay_store::rules::insert::rows::{QueueState, Rows};
use relay_store::{DedupRow, InsertOutcome, InsertRequest, Usage};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use crate::cached::Cached as _;
use crate::db::{i, key32, u, Attempt, Conn, OpResult, Tried};
use crate::guess::Guesses;
use crate::ops::insert_keys::Keys;
use crate::ops::insert_plan::{plan, Plan};
use crate::ops::kind::kind_code;
use crate::pipeline::{begin_with, commit_with, rollback};

/// Lock the enrolments ($1: targets and senders that must be live) shared, create the missing
/// queue rows of the live targets ($2) and lock the existing ones. A row created here is this
/// statement's own (locked until COMMIT) and invisible to its own `q` part, so it is returned
/// by `n`; one created by another transaction after this statement's snapshot is in neither
/// and is locked afterwards ([`lock_late_queues`]).
///
/// Last (`al`, after every queue lock, so no cycle with them), the accounts of the live targets
/// are locked in account order by a transaction advisory lock (class 1296193601, "MBXA", and the
/// account's hash): an account with no usage row
/// yet has no row for READ to lock, and without this two pushes to two of its targets would
/// both read it empty and both pass its quota. READ's snapshot is taken after these locks, so
/// it sees the usage of every earlier holder. Its one row (kind 2, which also keeps the count of
/// what was locked in `mbx.insert_locks` for the single flight's guard) is skipped by the reader.
const LOCK: &str = "WITH e AS MATERIALIZED (\
        SELECT host_pubkey, account FROM enrolments \
        WHERE host_pubkey = ANY($1::bytea[]) AND revoked_at_ms IS NULL \
        ORDER BY host_pubkey FOR SHARE), \
    t AS MATERIALIZED (SELECT host_pubkey FROM e WHERE host_pubkey = ANY($2::bytea[])), \
    n AS (INSERT INTO queues (target) SELECT host_pubkey FROM t ORDER BY host_pubkey \
        ON CONFLICT (target) DO NOTHING RETURNING target, head_seq, items, bytes), \
    q AS MATERIALIZED (SELECT target, head_seq, items, bytes FROM queues \
        WHERE target IN (SELECT host_pubkey FROM t) ORDER BY target FOR UPDATE OF queues), \
    al AS MATERIALIZED (SELECT pg_advisory_xact_lock(1296193601, hashtext(a.account)) \
        FROM (SELECT DISTINCT account FROM e \
            WHERE host_pubkey = ANY($2::bytea[]) AND account IS NOT NULL ORDER BY account) a) \
    SELECT 0::smallint, host_pubkey, account, 0::bigint, 0::bigint, 0::bigint FROM e \
    UNION ALL SELECT 1::smallint, target, NULL::text, head_seq, items, bytes FROM n \
    UNION ALL SELECT 1::smallint, target, NULL::text, head_seq, items, bytes FROM q \
    UNION ALL SELECT 2::smallint, NULL::bytea, set_config('mbx.insert_locks', \
        (SELECT count(*) FROM e) || '/' || ((SELECT count(*) FROM t) - (SELECT count(*) FROM n) \
            - (SELECT count(*) FROM q)), true), (SELECT count(*) FROM al), 0::bigint, 0::bigint";

/// Lock the account usage rows of the live targets ($1), read the dedup rows of ($2, $3, $4)
/// and the sender-share rows of ($5, $6): all covered by the locks LOCK took. Each key is
/// looked up by its primary key (a `LATERAL ... LIMIT 1` the planner cannot turn into a hash
/// join): a plan that scanned `dedup` whole on every push was chosen while the table was young,
/// a cost growing with every item ever accepted.
const READ: &str = "WITH a AS MATERIALIZED (\
        SELECT account, items, bytes FROM usage_account WHERE account IN (\
            SELECT account FROM enrolments \
            WHERE host_pubkey = ANY($1::bytea[]) AND revoked_at_ms IS NULL) \
        ORDER BY account FOR UPDATE OF usage_account) \
    SELECT 0::smallint, d.target, d.sender, d.item_id, d.wire_hash, d.seq, d.accepted_at_ms \
        FROM unnest($2::bytea[], $3::bytea[], $4::text[]) AS k(target, sender, item_id) \
        CROSS JOIN LATERAL (SELECT * FROM dedup WHERE target = k.target \
            AND sender = k.sender AND item_id = k.item_id LIMIT 1) d \
    UNION ALL SELECT 1::smallint, s.target, s.sender, NULL::text, NULL::bytea, s.items, s.bytes \
        FROM unnest($5::bytea[], $6::bytea[]) AS k(target, sender) \
        CROSS JOIN LATERAL (SELECT * FROM usage_sender \
            WHERE target = k.target AND sender = k.sender LIMIT 1) s \
    UNION ALL SELECT 2::smallint, NULL::bytea, NULL::bytea, account, NULL::bytea, items, bytes \
        FROM a";

/// The plan's writes, each run only `$when` (an SQL condition, `true` for the two round trips):
/// new items ($1-$11) and their dedup rows, the moved queue rows ($12-$15), the usage added per
/// sender share ($16-$19) and per account ($20-$22). Stated once for both ways a push is sent:
/// [`WRITE`] and the single flight's guarded write (`ops/insert_flight.rs`).
macro_rules! write_parts {
    ($when:literal) => {
        concat!(
            "it AS (\
                INSERT INTO items (target, seq, kind, item_id, sender, wire, wire_hash, bytes, \
                    accepted_at_ms, expires_at_ms, account) \
                SELECT target, seq, kind, item_id, sender, wire, wire_hash, bytes, $9, expires, \
                    account \
                FROM unnest($1::bytea[], $2::bigint[], $3::smallint[], $4::text[], $5::bytea[], \
                    $6::bytea[], $7::bytea[], $8::bigint[], $10::bigint[], $11::text[]) \
                    AS v(target, seq, kind, item_id, sender, wire, wire_hash, bytes, expires, \
                        account) \
                WHERE ", $when, "), \
            dd AS (\
                INSERT INTO dedup (target, sender, item_id, wire_hash, seq, accepted_at_ms) \
                SELECT target, sender, item_id, wire_hash, seq, $9 \
                FROM unnest($1::bytea[], $5::bytea[], $4::text[], $7::bytea[], $2::bigint[]) \
                    AS v(target, sender, item_id, wire_hash, seq) \
                WHERE ", $when, "), \
            qq AS (\
                UPDATE queues q SET head_seq = v.head, items = v.items, bytes = v.bytes \
                FROM unnest($12::bytea[], $13::bigint[], $14::bigint[], $15::bigint[]) \
                    AS v(target, head, items, bytes) WHERE q.target = v.target AND ", $when, "), \
            us AS (\
                INSERT INTO usage_sender (target, sender, items, bytes) \
                SELECT * FROM unnest($16::bytea[], $17::bytea[], $18::bigint[], $19::bigint[]) \
                    WHERE ", $when, " \
                ON CONFLICT (target, sender) DO UPDATE \
                SET items = usage_sender.items + EXCLUDED.items, \
                    bytes = usage_sender.bytes + EXCLUDED.bytes), \
            ua AS (\
                INSERT INTO usage_account (account, items, bytes) \
                SELECT * FROM unnest($20::text[], $21::bigint[], $22::bigint[]) \
                    WHERE ", $when, " \
                ON CONFLICT (account) DO UPDATE \
                SET items = usage_account.items + EXCLUDED.items, \
                    bytes = usage_account.bytes + EXCLUDED.bytes)"
        )
    };
}
pub(crate) use write_parts;

/// The plan's writes ([`write_parts`]); then the other relay processes are told which queues
/// grew (`crate::watch`: channel $23, payloads $24), delivered only if this transaction commits.
const WRITE: &str = concat!(
    "WITH ",
    write_parts!("true"),
    " SELECT pg_notify($23, p) FROM unnest($24::text[]) AS p"
);

/// The fallback of a queue row created by another transaction after LOCK's snapshot: create
/// (when still missing) and lock these targets' rows, in key order.
const LOCK_LATE: &str = "WITH n AS (INSERT INTO queues (target) \
        SELECT k FROM unnest($1::bytea[]) AS k ORDER BY k ON CONFLICT (target) DO NOTHING) \
    SELECT 1";
const LOCK_LATE_READ: &str = "SELECT target, head_seq, items, bytes FROM queues \
    WHERE target = ANY($1::bytea[]) ORDER BY target FOR UPDATE";

fn usage(items: i64, bytes: i64) -> Usage {
    Usage {
        items: u(items),
        bytes: u(bytes),
    }
}

/// A push: [`insert_batch`]'s statements in two round trips, rerun as every write. Its answer
/// is the whole plan: the outcomes, and the rows after it for the next push's guess
/// (`crate::guess`).
pub(crate) struct Push {
    pub reqs: Arc<Vec<InsertRequest>>,
    pub now: u64,
    /// Taught the rows the push leaves as soon as it has decided (under its locks, so in the
    /// order the pushes commit), for the pushes behind it.
    pub guesses: Arc<Guesses>,
    /// The handle's turn (`crate::combine`), held until the rows are taught: no flight guesses
    /// or locks in between, so the ones guessing from this push lock after it.
    pub turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Attempt<Plan> for Push {
    fn once<'c>(&'c mut self, c: &'c mut Conn) -> Tried<'c, Plan>
    where
        Plan: 'c,
    {
        Box::pin(async move {
            let c: &deadpool_postgres::Object = c;
            let (reqs, now) = (&self.reqs[..], self.now);
            let keys = Keys::of(reqs);
            let decided = match prepare(c).await {
                Ok(st) => match begin_with(c, read_locked(c, &st, &keys)).await {
                    Ok(rows) => plan(reqs, &rows, now).map(|p| (st, p)).map_err(Into::into),
                    Err(e) => Err(e),
                },
                Err(e) => return (Err(e.into()), false),
            };
            let (st, plan) = match decided {
                Ok(d) => d,
                Err(e) => return rollback(c, e).await,
            };
            self.guesses.learn(&keys, &plan.after);
            drop(self.turn.take());
            let (r, sent) = commit_with(c, write(c, &st, reqs, &plan, now)).await;
            (r.map(|()| plan), sent)
        })
    }
}

/// Insert `reqs` at `now` inside `t` (a sweep's notice): each item atomic on its own,
/// outcomes in request order.
pub(crate) async fn insert_batch(
    t: &deadpool_postgres::Transaction<'_>,
    reqs: &[InsertRequest],
    now: u64,
) -> OpResult<Vec<InsertOutcome>> {
    let st = prepare(t).await?;
    let rows = read_locked(t, &st, &Keys::of(reqs)).await?;
    let plan = plan(reqs, &rows, now)?;
    write(t, &st, reqs, &plan, now).await?;
    Ok(plan.outcomes)
}

/// The insert's statements: LOCK, READ, WRITE.
struct Statements([tokio_postgres::Statement; 3]);

async fn prepare(c: &impl GenericClient) -> Result<Statements, tokio_postgres::Error> {
    Ok(Statements([
        c.prepare_cached(LOCK).await?,
        c.prepare_cached(READ).await?,
        c.prepare_cached(WRITE).await?,
    ]))
}

/// LOCK prepared on `c` (the single flight sends it too).
pub(crate) async fn prepare_lock(
    c: &impl GenericClient,
) -> Result<tokio_postgres::Statement, tokio_postgres::Error> {
    c.prepare_cached(LOCK).await
}

/// Lock and read what the batch's outcomes depend on: LOCK and READ sent together.
async fn read_locked(c: &impl GenericClient, st: &Statements, keys: &Keys<'_>) -> OpResult<Rows> {
    let (enrolled, targets) = keys.lock_args();
    let (dt, ds, di) = unzip3(
        keys.dedup
            .iter()
            .map(|(t, s, i)| (t.as_slice(), s.as_slice(), *i)),
    );
    let (st_, ss): (Vec<&[u8]>, Vec<&[u8]>) = keys
        .shares
        .iter()
        .map(|(t, s)| (t.as_slice(), s.as_slice()))
        .unzip();
    let [lock, read, _] = &st.0;
    let lock_params: [&(dyn ToSql + Sync); 2] = [&enrolled, &targets];
    let read_params: [&(dyn ToSql + Sync); 6] = [&targets, &dt, &ds, &di, &st_, &ss];
    let (locked, first_read) = tokio::join!(biased;
        c.query(lock, &lock_params),
        c.query(read, &read_params),
    );
    let mut rows = Rows::default();
    let locked = locked?;
    let first_read = first_read?;
    for r in &locked {
        match r.get::<_, i16>(0) {
            0 => {
                let key = key32(r.get::<_, &[u8]>(1), "locked key")?;
                rows.live.insert(key, r.get(2));
            }
            1 => {
                let key = key32(r.get::<_, &[u8]>(1), "locked key")?;
                rows.queues.insert(key, queue_state(r, 3));
            }
            // The count of what was locked, for the single flight's guard.
            _ => {}
        }
    }
    let late: Vec<&[u8]> = keys
        .targets
        .iter()
        .filter(|k| rows.live.contains_key(**k) && !rows.queues.contains_key(**k))
        .map(|k| k.as_slice())
        .collect();
    if late.is_empty() {
        reads_into(&mut rows, &first_read)?;
    } else {
        lock_late_queues(c, &late, &mut rows).await?;
        // The rows READ saw may predate those locks: read them again behind them.
        let again = c.query(read, &read_params).await?;
        reads_into(&mut rows, &again)?;
    }
    Ok(rows)
}
/// A queue row's head and usage from columns `at`, `at + 1`, `at + 2`.
fn queue_state(r: &Row, at: usize) -> QueueState {
    QueueState {
        head: u(r.get(at)),
        usage: usage(r.get(at + 1), r.get(at + 2)),
    }
}

/// READ's rows: dedup (kind 0), sender share (1), account usage (2).
fn reads_into(rows: &mut Rows, read: &[Row]) -> OpResult<()> {
    for r in read {
        match r.get::<_, i16>(0) {
            0 => {
                rows.dedup.insert(
                    (
                        key32(r.get::<_, &[u8]>(1), "dedup target")?,
                        key32(r.get::<_, &[u8]>(2), "dedup sender")?,
                        r.get(3),
                    ),
                    DedupRow {
                        wire_hash: key32(r.get::<_, &[u8]>(4), "dedup wire hash")?,
                        seq: u(r.get(5)),
                        accepted_at_ms: u(r.get(6)),
                    },
                );
            }
            1 => {
                rows.senders.insert(
                    (
                        key32(r.get::<_, &[u8]>(1), "usage target")?,
                        key32(r.get::<_, &[u8]>(2), "usage sender")?,
                    ),
                    usage(r.get(5), r.get(6)),
                );
            }
            _ => {
                rows.accounts.insert(r.get(3), usage(r.get(5), r.get(6)));
            }
        }
    }
    Ok(())
}

/// Lock the queue rows LOCK could not see (created by another transaction since its snapshot).
async fn lock_late_queues(c: &impl GenericClient, late: &[&[u8]], rows: &mut Rows) -> OpResult<()> {
    c.execute_cached(LOCK_LATE, &[&late]).await?;
    for r in c.query_cached(LOCK_LATE_READ, &[&late]).await? {
        rows.queues.insert(
            key32(r.get::<_, &[u8]>(0), "queue target")?,
            queue_state(&r, 1),
        );
    }
    Ok(())
}

pub(crate) fn unzip3<A, B, C>(it: impl IntoIterator<Item = (A, B, C)>) -> (Vec<A>, Vec<B>, Vec<C>) {
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for (x, y, z) in it {
        a.push(x);
        b.push(y);
        c.push(z);
    }
    (a, b, c)
}

/// Write the plan in one statement (none when nothing is new: the flight is COMMIT alone).
async fn write(
    c: &impl GenericClient,
    st: &Statements,
    reqs: &[InsertRequest],
    plan: &Plan,
    now: u64,
) -> OpResult<()> {
    if plan.rows.is_empty() {
        return Ok(());
    }
    let args = WriteArgs::of(reqs, plan, now);
    c.execute(&st.0[2], &args.params()).await?;
    Ok(())
}

/// Array parameters of rows keyed by one key: the keys and three numbers (head or items, ...).
pub(crate) type KeyColumns<'a> = (Vec<&'a [u8]>, Vec<i64>, Vec<i64>, Vec<i64>);
/// Array parameters of rows keyed by (target, sender): the keys, items and bytes.
pub(crate) type PairColumns<'a> = (Vec<&'a [u8]>, Vec<&'a [u8]>, Vec<i64>, Vec<i64>);

/// The parameters of [`write_parts`] and the notification ($1-$24), built from a plan.
pub(crate) struct WriteArgs<'a> {
    target: Vec<&'a [u8]>,
    seq: Vec<i64>,
    kind: Vec<i16>,
    item_id: Vec<&'a str>,
    sender: Vec<&'a [u8]>,
    wire: Vec<&'a [u8]>,
    hash: Vec<&'a [u8]>,
    bytes: Vec<i64>,
    now: i64,
    expires: Vec<i64>,
    account: Vec<Option<&'a str>>,
    queues: KeyColumns<'a>,
    shares: PairColumns<'a>,
    accounts: (Vec<&'a str>, Vec<i64>, Vec<i64>),
    woken: Vec<String>,
}

impl<'a> WriteArgs<'a> {
    pub(crate) fn of(reqs: &'a [InsertRequest], plan: &'a Plan, now: u64) -> WriteArgs<'a> {
        let n = plan.rows.len();
        let mut w = WriteArgs {
            target: Vec::with_capacity(n),
            seq: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            item_id: Vec::with_capacity(n),
            sender: Vec::with_capacity(n),
            wire: Vec::with_capacity(n),
            hash: Vec::with_capacity(n),
            bytes: Vec::with_capacity(n),
            now: i(now),
            expires: Vec::with_capacity(n),
            account: Vec::with_capacity(n),
            queues: unzip4(
                plan.queues
                    .iter()
                    .map(|(k, q)| (k.as_slice(), i(q.head), i(q.usage.items), i(q.usage.bytes))),
            ),
            shares: unzip4(
                plan.senders
                    .iter()
                    .map(|((tk, sk), d)| (tk.as_slice(), sk.as_slice(), i(d.items), i(d.bytes))),
            ),
            accounts: unzip3(
                plan.accounts
                    .iter()
                    .map(|(a, d)| (a.as_str(), i(d.items), i(d.bytes))),
            ),
            woken: crate::watch::queued_payloads(plan.queues.iter().map(|(k, q)| (k, q.head))),
        };
        for (ri, row) in &plan.rows {
            let req = &reqs[*ri];
            let tg = &req.item.targets[row.target];
            w.target.push(tg.target.as_slice());
            w.seq.push(i(row.seq));
            w.kind.push(kind_code(req.item.kind));
            w.item_id.push(req.item.item_id.as_str());
            w.sender.push(req.item.sender.as_slice());
            w.wire.push(tg.wire.as_slice());
            w.hash.push(tg.wire_hash.as_slice());
            w.bytes.push(i(tg.wire.len() as u64));
            w.expires.push(i(row.expires_at_ms));
            w.account.push(row.account.as_deref());
        }
        w
    }

    /// $1-$24 in order.
    pub(crate) fn params(&self) -> [&(dyn ToSql + Sync); 24] {
        let (qt, qh, qi, qb) = &self.queues;
        let (ut, us, ui, ub) = &self.shares;
        let (an, ai, ab) = &self.accounts;
        [
            &self.target,
            &self.seq,
            &self.kind,
            &self.item_id,
            &self.sender,
            &self.wire,
            &self.hash,
            &self.bytes,
            &self.now,
            &self.expires,
            &self.account,
            qt,
            qh,
            qi,
            qb,
            ut,
            us,
            ui,
            ub,
            an,
            ai,
            ab,
            &crate::watch::CHANNEL,
            &self.woken,
        ]
    }
}

pub(crate) fn unzip4<A, B, C, D>(
    it: impl IntoIterator<Item = (A, B, C, D)>,
) -> (Vec<A>, Vec<B>, Vec<C>, Vec<D>) {
    let (mut a, mut b, mut c, mut d) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (w, x, y, z) in it {
        a.push(w);
        b.push(x);
        c.push(y);
        d.push(z);
    }
    (a, b, c, d)
}
