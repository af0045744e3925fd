//! A push in one round trip, when its rows were guessed (`crate::guess`): the batch is decided
//! in Rust against the guess (the same `plan` as the two round trips of `ops/insert.rs`, so the
//! insert rule is still stated once, in `relay_store::rules::insert`), then BEGIN, [`LOCK`],
//! [`GUARDED`] and COMMIT go in one flight.
//!
//! LOCK is the two-trip path's own: enrolments shared, queue rows created or locked, and the
//! count of what it locked kept in the transaction's setting `mbx.insert_locks`. GUARDED is
//! one statement: its `g` part locks the guessed accounts' usage rows and compares every row
//! the rule reads with the guess, and every write of [`write_parts`] (and the notification)
//! runs only when `g` holds. Its snapshot is taken after LOCK's locks are held, so what it
//! compares is what a two-trip READ sent behind LOCK would read, and stays so until COMMIT:
//!
//! - enrolments: every key's liveness and account equal the guess, and LOCK locked as many
//!   live enrolments as the guess has (the ones it locked are still live, so they are these);
//! - queue rows: every live target's head, items and bytes equal the guess, and LOCK left no
//!   live target's row unlocked (a row created after its snapshot is not locked by it);
//! - dedup rows: none for any (target, sender, item_id) of a live target (a guess has none);
//! - sender shares and account usage (a missing row is zero): equal to the guess; the account
//!   rows are locked here, the shares are covered by their target's queue row lock.
//!
//! Since the rule is a function of these rows, the decision from the guess is the decision the
//! two round trips would take at this point. When `g` fails nothing is written (LOCK may have
//! created empty queue rows, as the two round trips do for a refused item) and the push runs
//! again in two round trips.

use std::sync::Arc;

use deadpool_postgres::GenericClient;
use relay_store::rules::insert::rows::Rows;
use relay_store::{InsertOutcome, InsertRequest, Usage};
use tokio_postgres::types::ToSql;

use crate::db::{i, Attempt, Conn, Tried};
use crate::ops::insert::{
    prepare_lock, unzip3, unzip4, write_parts, KeyColumns, PairColumns, WriteArgs,
};
use crate::ops::insert_keys::{slices, Keys};
use crate::ops::insert_plan::Plan;

/// The guard ($25-$41, beside WRITE's $1-$24) and the guarded writes. `ok` is whether every
/// row the rule reads equals the guess; the statement answers it in one row.
const GUARDED: &str = concat!(
    "WITH g AS MATERIALIZED (SELECT \
        current_setting('mbx.insert_locks', true) IS NOT DISTINCT FROM \
            ((SELECT count(*) FROM unnest($26::bool[]) AS l WHERE l) || '/0') \
        AND NOT EXISTS (SELECT 1 FROM unnest($25::bytea[], $26::bool[], $27::text[]) \
                AS p(k, live, account) \
            LEFT JOIN LATERAL (SELECT true AS found, account FROM enrolments \
                WHERE host_pubkey = p.k AND revoked_at_ms IS NULL LIMIT 1) e ON true \
            WHERE (e.found IS NOT NULL) <> p.live \
                OR (p.live AND e.account IS DISTINCT FROM p.account)) \
        AND NOT EXISTS (SELECT 1 FROM unnest($28::bytea[], $29::bigint[], $30::bigint[], \
                $31::bigint[]) AS p(t, head, items, bytes) \
            LEFT JOIN LATERAL (SELECT head_seq, items, bytes FROM queues \
                WHERE target = p.t LIMIT 1) q ON true \
            WHERE q.head_seq IS DISTINCT FROM p.head OR q.items IS DISTINCT FROM p.items \
                OR q.bytes IS DISTINCT FROM p.bytes) \
        AND NOT EXISTS (SELECT 1 FROM unnest($32::bytea[], $33::bytea[], $34::text[]) \
                AS p(t, s, i) \
            CROSS JOIN LATERAL (SELECT 1 FROM dedup \
                WHERE target = p.t AND sender = p.s AND item_id = p.i LIMIT 1) d) \
        AND NOT EXISTS (SELECT 1 FROM unnest($35::bytea[], $36::bytea[], $37::bigint[], \
                $38::bigint[]) AS p(t, s, items, bytes) \
            LEFT JOIN LATERAL (SELECT items, bytes FROM usage_sender \
                WHERE target = p.t AND sender = p.s LIMIT 1) u ON true \
            WHERE COALESCE(u.items, 0) <> p.items OR COALESCE(u.bytes, 0) <> p.bytes) \
        AND NOT EXISTS (SELECT 1 FROM unnest($39::text[], $40::bigint[], $41::bigint[]) \
                AS p(a, items, bytes) \
            LEFT JOIN LATERAL (SELECT items, bytes FROM usage_account \
                WHERE account = p.a LIMIT 1 FOR UPDATE) u ON true \
            WHERE COALESCE(u.items, 0) <> p.items OR COALESCE(u.bytes, 0) <> p.bytes) \
        AS ok), ",
    write_parts!("(SELECT ok FROM g)"),
    " SELECT ok, (SELECT count(*) FROM (SELECT pg_notify($23, p) FROM unnest($24::text[]) AS p \
        WHERE ok) n) FROM g"
);

/// A push decided from a guess, sent in one flight. Its answer: the outcomes when the guard
/// held (committed), `None` when it did not (nothing written).
pub(crate) struct Flight {
    pub reqs: Arc<Vec<InsertRequest>>,
    pub now: u64,
    /// The rows guessed, and the plan decided from them.
    pub guess: Rows,
    pub plan: Plan,
}

impl Attempt<Option<Vec<InsertOutcome>>> for Flight {
    fn once<'c>(&'c mut self, c: &'c mut Conn) -> Tried<'c, Option<Vec<InsertOutcome>>>
    where
        Option<Vec<InsertOutcome>>: 'c,
    {
        Box::pin(async move {
            let c: &deadpool_postgres::Object = c;
            let (lock, guarded) = match tokio::try_join!(prepare_lock(c), c.prepare_cached(GUARDED))
            {
                Ok(st) => st,
                Err(e) => return (Err(e.into()), false),
            };
            let held = {
                let keys = Keys::of(&self.reqs);
                let (enrolled, targets) = keys.lock_args();
                let lock_params: [&(dyn ToSql + Sync); 2] = [&enrolled, &targets];
                let write = WriteArgs::of(&self.reqs, &self.plan, self.now);
                let guard = GuardArgs::of(&keys, &self.guess);
                let params: Vec<&(dyn ToSql + Sync)> =
                    write.params().into_iter().chain(guard.params()).collect();
                let (begun, locked, held, committed) = tokio::join!(biased;
                    c.batch_execute("BEGIN"),
                    c.query(&lock, &lock_params),
                    c.query_one(&guarded, &params),
                    c.batch_execute("COMMIT"),
                );
                // The first error in statement order (a failed statement aborts the
                // transaction, and COMMIT then rolls it back); COMMIT was sent either way.
                begun
                    .and(locked)
                    .and(held)
                    .and_then(|row| committed.map(|()| row.get::<_, bool>(0)))
            };
            let answer = match held {
                Ok(true) => Ok(Some(std::mem::take(&mut self.plan.outcomes))),
                Ok(false) => Ok(None),
                Err(e) => Err(e.into()),
            };
            (answer, true)
        })
    }
}

/// The guard's parameters ($25-$41) from the guess, in key order (account rows are locked in
/// it, as the two round trips lock them).
struct GuardArgs<'a> {
    enrolled: Vec<&'a [u8]>,
    live: Vec<bool>,
    account: Vec<Option<&'a str>>,
    queues: KeyColumns<'a>,
    dedup: (Vec<&'a [u8]>, Vec<&'a [u8]>, Vec<&'a str>),
    shares: PairColumns<'a>,
    accounts: (Vec<&'a str>, Vec<i64>, Vec<i64>),
}

impl<'a> GuardArgs<'a> {
    fn of(keys: &Keys<'a>, guess: &'a Rows) -> GuardArgs<'a> {
        let live = |k: &[u8; 32]| guess.live.contains_key(k);
        let zero = Usage::default();
        let mut accounts: Vec<(&str, &Usage)> = guess
            .accounts
            .iter()
            .map(|(a, u)| (a.as_str(), u))
            .collect();
        accounts.sort_unstable_by_key(|(a, _)| *a);
        GuardArgs {
            enrolled: slices(&keys.enrolled),
            live: keys.enrolled.iter().map(|k| live(k)).collect(),
            account: keys
                .enrolled
                .iter()
                .map(|k| guess.live.get(*k).and_then(|a| a.as_deref()))
                .collect(),
            queues: unzip4(keys.targets.iter().filter(|t| live(t)).map(|t| {
                let q = guess.queues.get(*t).copied().unwrap_or_default();
                (t.as_slice(), i(q.head), i(q.usage.items), i(q.usage.bytes))
            })),
            dedup: unzip3(
                keys.dedup
                    .iter()
                    .filter(|(t, _, _)| live(t))
                    .map(|(t, s, id)| (t.as_slice(), s.as_slice(), *id)),
            ),
            shares: unzip4(keys.shares.iter().filter(|(t, _)| live(t)).map(|(t, s)| {
                let u = guess.senders.get(&(**t, **s)).unwrap_or(&zero);
                (t.as_slice(), s.as_slice(), i(u.items), i(u.bytes))
            })),
            accounts: unzip3(
                accounts
                    .into_iter()
                    .map(|(a, u)| (a, i(u.items), i(u.bytes))),
            ),
        }
    }

    /// $25-$41 in order.
    fn params(&self) -> [&(dyn ToSql + Sync); 17] {
        let (qt, qh, qi, qb) = &self.queues;
        let (dt, ds, di) = &self.dedup;
        let (st, ss, si, sb) = &self.shares;
        let (an, ai, ab) = &self.accounts;
        [
            &self.enrolled,
            &self.live,
            &self.account,
            qt,
            qh,
            qi,
            qb,
            dt,
            ds,
            di,
            st,
            ss,
            si,
            sb,
            an,
            ai,
            ab,
        ]
    }
}
