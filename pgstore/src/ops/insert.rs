//! Insert a batch of items (a push, or one item) inside one transaction with a fixed number of
//! statements, whatever the batch's size: lock the rows every item depends on (enrolments
//! shared, then queue rows and account usage rows for update, each in key order), read the
//! dedup and sender-share rows once, decide every item in memory ([`insert_plan`]), then write
//! one multi-row statement per table (`unnest` arrays). Statements are prepared once per
//! connection (the pool's statement cache).
//!
//! The rules are those of one item at a time: the locks are held from the reads to `COMMIT`,
//! so what was read stays true (every writer of a target's items, dedup and sender-share rows
//! holds that target's queue row lock). A refused item writes nothing, so no savepoint is
//! needed.

use std::collections::BTreeSet;

use deadpool_postgres::Transaction;
use relay_store::{InsertOutcome, InsertRequest, Key32, Usage};

use crate::db::{i, key32, u, OpResult};
use crate::ops::insert_plan::{plan, DedupHit, Plan, QueueState, Snapshot};
use crate::ops::queue::kind_code;

fn usage(items: i64, bytes: i64) -> Usage {
    Usage {
        items: u(items),
        bytes: u(bytes),
    }
}

/// Insert `reqs` at `now` inside `t`: each item atomic on its own, outcomes in request order.
pub(crate) async fn insert_batch(
    t: &Transaction<'_>,
    reqs: &[InsertRequest],
    now: u64,
) -> OpResult<Vec<InsertOutcome>> {
    let snap = read_locked(t, reqs).await?;
    let plan = plan(reqs, snap, now)?;
    write(t, reqs, &plan, now).await?;
    Ok(plan.outcomes)
}

/// Lock and read what the batch's outcomes depend on.
async fn read_locked(t: &Transaction<'_>, reqs: &[InsertRequest]) -> OpResult<Snapshot> {
    let mut snap = Snapshot::default();
    let targets: BTreeSet<Key32> = reqs
        .iter()
        .flat_map(|r| r.item.targets.iter().map(|x| x.target))
        .collect();
    // The senders that must be live are read (and locked) with the targets.
    let enrolled: BTreeSet<Key32> = reqs
        .iter()
        .filter(|r| r.require_live_sender)
        .map(|r| r.item.sender)
        .chain(targets.iter().copied())
        .collect();
    let keys: Vec<&[u8]> = enrolled.iter().map(|k| k.as_slice()).collect();
    // A revocation (which locks the enrolment for update) cannot slip in before COMMIT.
    let st = t
        .prepare_cached(
            "SELECT host_pubkey, account FROM enrolments WHERE host_pubkey = ANY($1::bytea[]) \
             AND revoked_at_ms IS NULL ORDER BY host_pubkey FOR SHARE",
        )
        .await?;
    for r in t.query(&st, &[&keys]).await? {
        snap.live
            .insert(key32(r.get::<_, &[u8]>(0), "enrolment key")?, r.get(1));
    }
    // Queue rows of the live targets only (a sender that is no target gets none).
    let live: Vec<&[u8]> = targets
        .iter()
        .filter(|k| snap.live.contains_key(*k))
        .map(|k| k.as_slice())
        .collect();
    if live.is_empty() {
        return Ok(snap);
    }
    let st = t
        .prepare_cached(
            "INSERT INTO queues (target) SELECT k FROM unnest($1::bytea[]) AS k ORDER BY k \
             ON CONFLICT (target) DO NOTHING",
        )
        .await?;
    t.execute(&st, &[&live]).await?;
    let st = t
        .prepare_cached(
            "SELECT target, head_seq, items, bytes FROM queues WHERE target = ANY($1::bytea[]) \
             ORDER BY target FOR UPDATE",
        )
        .await?;
    for r in t.query(&st, &[&live]).await? {
        snap.queues.insert(
            key32(r.get::<_, &[u8]>(0), "queue target")?,
            QueueState {
                head: u(r.get(1)),
                usage: usage(r.get(2), r.get(3)),
            },
        );
    }
    let accounts: BTreeSet<&str> = targets
        .iter()
        .filter_map(|k| snap.live.get(k))
        .flatten()
        .map(String::as_str)
        .collect();
    if !accounts.is_empty() {
        let names: Vec<&str> = accounts.into_iter().collect();
        let st = t
            .prepare_cached(
                "SELECT account, items, bytes FROM usage_account WHERE account = ANY($1::text[]) \
                 ORDER BY account FOR UPDATE",
            )
            .await?;
        for r in t.query(&st, &[&names]).await? {
            snap.accounts.insert(r.get(0), usage(r.get(1), r.get(2)));
        }
    }
    // Dedup and sender-share rows of the live targets (covered by their queue row locks).
    let mut dk: BTreeSet<(&[u8], &[u8], &str)> = BTreeSet::new();
    let mut sk: BTreeSet<(&[u8], &[u8])> = BTreeSet::new();
    for r in reqs {
        for tg in &r.item.targets {
            if snap.live.contains_key(&tg.target) {
                dk.insert((&tg.target, &r.item.sender, &r.item.item_id));
                sk.insert((&tg.target, &r.item.sender));
            }
        }
    }
    let (dt, ds, di): (Vec<&[u8]>, Vec<&[u8]>, Vec<&str>) = unzip3(dk);
    let st = t
        .prepare_cached(
            "SELECT d.target, d.sender, d.item_id, d.wire_hash, d.seq, d.accepted_at_ms \
             FROM unnest($1::bytea[], $2::bytea[], $3::text[]) AS k(target, sender, item_id) \
             JOIN dedup d ON d.target = k.target AND d.sender = k.sender AND d.item_id = k.item_id",
        )
        .await?;
    for r in t.query(&st, &[&dt, &ds, &di]).await? {
        snap.dedup.insert(
            (
                key32(r.get::<_, &[u8]>(0), "dedup target")?,
                key32(r.get::<_, &[u8]>(1), "dedup sender")?,
                r.get(2),
            ),
            DedupHit {
                wire_hash: key32(r.get::<_, &[u8]>(3), "dedup wire hash")?,
                seq: u(r.get(4)),
                accepted_at_ms: u(r.get(5)),
            },
        );
    }
    let (st_, ss): (Vec<&[u8]>, Vec<&[u8]>) = sk.into_iter().unzip();
    let st = t
        .prepare_cached(
            "SELECT s.target, s.sender, s.items, s.bytes \
             FROM unnest($1::bytea[], $2::bytea[]) AS k(target, sender) \
             JOIN usage_sender s ON s.target = k.target AND s.sender = k.sender",
        )
        .await?;
    for r in t.query(&st, &[&st_, &ss]).await? {
        snap.senders.insert(
            (
                key32(r.get::<_, &[u8]>(0), "usage target")?,
                key32(r.get::<_, &[u8]>(1), "usage sender")?,
            ),
            usage(r.get(2), r.get(3)),
        );
    }
    Ok(snap)
}

fn unzip3<A, B, C>(it: impl IntoIterator<Item = (A, B, C)>) -> (Vec<A>, Vec<B>, Vec<C>) {
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for (x, y, z) in it {
        a.push(x);
        b.push(y);
        c.push(z);
    }
    (a, b, c)
}

/// Write the plan: new items and their dedup rows, moved queue rows, added usage.
async fn write(t: &Transaction<'_>, reqs: &[InsertRequest], plan: &Plan, now: u64) -> OpResult<()> {
    if plan.rows.is_empty() {
        return Ok(());
    }
    let n = plan.rows.len();
    let (mut target, mut seq, mut kind, mut item_id, mut sender) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    let (mut wire, mut hash, mut bytes, mut expires, mut account) = (
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
        Vec::with_capacity(n),
    );
    for row in &plan.rows {
        let req = &reqs[row.req];
        let tg = &req.item.targets[row.target];
        target.push(tg.target.as_slice());
        seq.push(i(row.seq));
        kind.push(kind_code(req.item.kind));
        item_id.push(req.item.item_id.as_str());
        sender.push(req.item.sender.as_slice());
        wire.push(tg.wire.as_slice());
        hash.push(tg.wire_hash.as_slice());
        bytes.push(i(tg.wire.len() as u64));
        expires.push(i(relay_store::rules::sweep::expires_at(
            now,
            req.retention_ms,
        )));
        account.push(plan.live.get(&tg.target).and_then(|a| a.as_deref()));
    }
    let st = t
        .prepare_cached(
            "INSERT INTO items (target, seq, kind, item_id, sender, wire, wire_hash, bytes, \
                 accepted_at_ms, expires_at_ms, account) \
             SELECT target, seq, kind, item_id, sender, wire, wire_hash, bytes, $9, expires, \
                 account \
             FROM unnest($1::bytea[], $2::bigint[], $3::smallint[], $4::text[], $5::bytea[], \
                 $6::bytea[], $7::bytea[], $8::bigint[], $10::bigint[], $11::text[]) \
                 AS v(target, seq, kind, item_id, sender, wire, wire_hash, bytes, expires, account)",
        )
        .await?;
    t.execute(
        &st,
        &[
            &target,
            &seq,
            &kind,
            &item_id,
            &sender,
            &wire,
            &hash,
            &bytes,
            &i(now),
            &expires,
            &account,
        ],
    )
    .await?;
    let st = t
        .prepare_cached(
            "INSERT INTO dedup (target, sender, item_id, wire_hash, seq, accepted_at_ms) \
             SELECT target, sender, item_id, wire_hash, seq, $6 \
             FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::bytea[], $5::bigint[]) \
                 AS v(target, sender, item_id, wire_hash, seq)",
        )
        .await?;
    t.execute(&st, &[&target, &sender, &item_id, &hash, &seq, &i(now)])
        .await?;

    let (qt, qh, qi, qb) = unzip4(
        plan.queues
            .iter()
            .map(|(k, q)| (k.as_slice(), i(q.head), i(q.usage.items), i(q.usage.bytes))),
    );
    let st = t
        .prepare_cached(
            "UPDATE queues q SET head_seq = v.head, items = v.items, bytes = v.bytes \
             FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[]) \
                 AS v(target, head, items, bytes) WHERE q.target = v.target",
        )
        .await?;
    t.execute(&st, &[&qt, &qh, &qi, &qb]).await?;

    let (ut, us, ui, ub) = unzip4(
        plan.senders
            .iter()
            .map(|((tk, sk), d)| (tk.as_slice(), sk.as_slice(), i(d.items), i(d.bytes))),
    );
    let st = t
        .prepare_cached(
            "INSERT INTO usage_sender (target, sender, items, bytes) \
             SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::bigint[], $4::bigint[]) \
             ON CONFLICT (target, sender) DO UPDATE \
             SET items = usage_sender.items + EXCLUDED.items, \
                 bytes = usage_sender.bytes + EXCLUDED.bytes",
        )
        .await?;
    t.execute(&st, &[&ut, &us, &ui, &ub]).await?;

    if !plan.accounts.is_empty() {
        let (an, (ai, ab)): (Vec<&str>, (Vec<i64>, Vec<i64>)) = plan
            .accounts
            .iter()
            .map(|(a, d)| (a.as_str(), (i(d.items), i(d.bytes))))
            .unzip();
        let st = t
            .prepare_cached(
                "INSERT INTO usage_account (account, items, bytes) \
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::bigint[]) \
                 ON CONFLICT (account) DO UPDATE \
                 SET items = usage_account.items + EXCLUDED.items, \
                     bytes = usage_account.bytes + EXCLUDED.bytes",
            )
            .await?;
        t.execute(&st, &[&an, &ai, &ab]).await?;
    }
    Ok(())
}

fn unzip4<A, B, C, D>(
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
