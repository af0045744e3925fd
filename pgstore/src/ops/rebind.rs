//! Key rotation (relay-store's `rules::rotation`) and an admin's revoke/purge
//! (`rules::revoke`): the new key takes the old one's name, account, authority,
//! queue (re-sequenced after the new key's head; dedup rows follow; an item the new key already
//! holds is dropped), allowlist and place in other lists; the old key is revoked.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use deadpool_postgres::Transaction;
use relay_store::rules::{self, revoke::Revocation, rotation};
use relay_store::{
    log_text, Enrolment, Key32, NoticeFn, RebindOutcome, RevokeOutcome, RevokeRequest,
};

use crate::cached::Cached as _;
use crate::ctx::{Ctx, WriteEnv};
use crate::db::{i, key32, u, OpResult};
use crate::ops::leave::{due_from, leave_in_runs, select_due, Due, SharedNotice, Telling};
use crate::ops::lists::{get_list, write_list};
use crate::ops::queue::{add_queue_usage, add_usage, lock_queue};
use crate::ops::{enrol, oplog, Answer};

/// Take `old` out of every other target's list, putting `new` in its place (a rotation) or
/// nothing (a revocation), through `sender_index`. Answers how many lists changed.
async fn replace_sender(t: &Transaction<'_>, old: &Key32, new: Option<&Key32>) -> OpResult<u64> {
    let targets = t
        .query(
            "SELECT target FROM sender_index WHERE sender = $1 ORDER BY target",
            &[&old.as_slice()],
        )
        .await?;
    let mut changed = 0;
    for r in &targets {
        let target = key32(r.get::<_, &[u8]>(0), "sender index")?;
        if target == *old || Some(&target) == new {
            continue; // the caller's (and not read)
        }
        let Some(list) = get_list(t, &target).await? else {
            continue;
        };
        let Some(list) = rules::lists::replace_sender(&list, old, new) else {
            continue;
        };
        write_list(t, &target, Some(&list)).await?;
        changed += 1;
    }
    Ok(changed)
}

/// Revoke a live key: both enc ads go, the enrolment is marked revoked
/// (`rules::revoke::revoked`), counters move; the other relay processes are told at commit
/// (`crate::watch`), to end the key's waiters.
async fn revoke_enrolment(t: &Transaction<'_>, e: &Enrolment, now: u64) -> OpResult<()> {
    let pk = e.host_pubkey.as_slice();
    crate::watch::notify(t, crate::watch::keys_payloads([&e.host_pubkey])).await?;
    t.execute("DELETE FROM enc_ads WHERE host_pubkey = $1", &[&pk])
        .await?;
    t.execute("DELETE FROM enc_ads_v2 WHERE host_pubkey = $1", &[&pk])
        .await?;
    enrol::write(t, &rules::revoke::revoked(e, now)).await?;
    enrol::bump(t, -1, 1).await
}

async fn rebind_in(
    t: &Transaction<'_>,
    old: &Key32,
    new: &Key32,
    env: WriteEnv,
) -> OpResult<RebindOutcome> {
    let now = env.now;
    // The meta row first (the log and the counters), as enrolments take it.
    t.query_one("SELECT 1 FROM meta WHERE id = 1 FOR UPDATE", &[])
        .await?;
    let stored_old = enrol::get(t, old, true).await?;
    let n = enrol::get(t, new, true).await?;
    let o = match rotation::check(old, new, stored_old, n.as_ref()) {
        Ok(o) => o,
        Err(outcome) => return Ok(outcome),
    };
    enrol::write(t, &rotation::taken_over(&o, new, n.as_ref(), now)).await?;
    if n.is_none() {
        enrol::bump(t, 1, 0).await?;
    }
    let moved = move_queue(t, old, new, now).await?;
    replace_sender(t, old, Some(new)).await?;
    let from_old = get_list(t, old).await?;
    let at_new = get_list(t, new).await?;
    write_list(t, old, None).await?;
    if let Some(list) = rotation::moved_list(old, new, from_old, at_new) {
        write_list(t, new, Some(&list)).await?;
    }
    revoke_enrolment(t, &o, now).await?;
    // Last seen moves with the key: the rotation is a sighting of the new key.
    t.execute(
        "UPDATE enrolments SET last_seen_day = NULL WHERE host_pubkey = $1",
        &[&old.as_slice()],
    )
    .await?;
    t.execute(
        "UPDATE enrolments SET last_seen_day = $2 WHERE host_pubkey = $1",
        &[
            &new.as_slice(),
            &i32::try_from(relay_store::utc_day(now)).unwrap_or(i32::MAX),
        ],
    )
    .await?;
    let detail = log_text::rotated(old, new, moved);
    oplog::append(t, env, "rotate-key", &detail).await?;
    Ok(RebindOutcome::Moved { moved })
}

/// Move the old queue (in order, after the new key's head) and the old dedup rows.
async fn move_queue(t: &Transaction<'_>, old: &Key32, new: &Key32, now: u64) -> OpResult<u64> {
    let (first, second) = if old < new { (old, new) } else { (new, old) };
    lock_queue(t, first).await?;
    lock_queue(t, second).await?;
    let old_q = lock_queue(t, old).await?;
    let mut head = lock_queue(t, new).await?.head;
    // The (sender, item_id) pairs the new key holds already.
    let held_rows = t
        .query(
            "SELECT o.sender, o.item_id FROM dedup o JOIN dedup n \
             ON n.target = $2 AND n.sender = o.sender AND n.item_id = o.item_id \
             WHERE o.target = $1",
            &[&old.as_slice(), &new.as_slice()],
        )
        .await?;
    let held: HashSet<(Vec<u8>, String)> = held_rows
        .iter()
        .map(|r| (r.get::<_, Vec<u8>>(0), r.get::<_, String>(1)))
        .collect();
    let items = t
        .query(
            "DELETE FROM items WHERE target = $1 AND seq > $2 \
             RETURNING seq, kind, item_id, sender, wire, wire_hash, bytes, accepted_at_ms, \
                 expires_at_ms, account",
            &[&old.as_slice(), &i(old_q.acked)],
        )
        .await?;
    let mut items: Vec<&tokio_postgres::Row> = items.iter().collect();
    items.sort_by_key(|r| r.get::<_, i64>(0));
    let mut new_seq_of = HashMap::new();
    let mut moved = 0;
    for r in items {
        let seq: i64 = r.get(0);
        let sender_b: Vec<u8> = r.get(3);
        let sender = key32(&sender_b, "item sender")?;
        let item_id: String = r.get(2);
        let account: Option<String> = r.get(9);
        let bytes: i64 = r.get(6);
        add_queue_usage(t, old, -1, -bytes).await?;
        add_usage(t, old, &sender, account.as_deref(), -1, -bytes).await?;
        if held.contains(&(sender_b, item_id.clone())) {
            continue;
        }
        let s = rules::seq::next(head, now);
        head = s;
        new_seq_of.insert(seq, s);
        t.execute(
            "INSERT INTO items (target, seq, kind, item_id, sender, wire, wire_hash, bytes, \
                 accepted_at_ms, expires_at_ms, account) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &new.as_slice(),
                &i(s),
                &r.get::<_, i16>(1),
                &item_id,
                &sender.as_slice(),
                &r.get::<_, Vec<u8>>(4),
                &r.get::<_, Vec<u8>>(5),
                &bytes,
                &r.get::<_, i64>(7),
                &r.get::<_, i64>(8),
                &account,
            ],
        )
        .await?;
        t.execute(
            "UPDATE queues SET head_seq = $2, items = items + 1, bytes = bytes + $3 \
             WHERE target = $1",
            &[&new.as_slice(), &i(s), &bytes],
        )
        .await?;
        add_usage(t, new, &sender, account.as_deref(), 1, bytes).await?;
        moved += 1;
    }
    let dedup = t
        .query(
            "DELETE FROM dedup WHERE target = $1 \
             RETURNING sender, item_id, wire_hash, seq, accepted_at_ms, gone_at_ms",
            &[&old.as_slice()],
        )
        .await?;
    for r in &dedup {
        let sender: Vec<u8> = r.get(0);
        let item_id: String = r.get(1);
        if held.contains(&(sender.clone(), item_id.clone())) {
            continue;
        }
        let seq: i64 = r.get(3);
        // A moved item is queued again (no horizon); one that left the old queue before starts
        // its horizon again now, never ending earlier than it would have.
        let (seq, restart) = rotation::moved_dedup(u(seq), new_seq_of.get(&seq).copied());
        let (seq, gone_at) = (i(seq), restart.then_some(i(now)));
        t.execute(
            "INSERT INTO dedup (target, sender, item_id, wire_hash, seq, accepted_at_ms, gone_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &new.as_slice(),
                &sender,
                &item_id,
                &r.get::<_, Vec<u8>>(2),
                &seq,
                &r.get::<_, i64>(4),
                &gone_at,
            ],
        )
        .await?;
    }
    Ok(moved)
}

async fn revoke_key_in(
    t: &Transaction<'_>,
    (req, notice): &(RevokeRequest, SharedNotice),
    env: WriteEnv,
) -> OpResult<RevokeOutcome> {
    let now = env.now;
    t.query_one("SELECT 1 FROM meta WHERE id = 1 FOR UPDATE", &[])
        .await?;
    let mut rev = match Revocation::start(req, enrol::get(t, &req.key, true).await?) {
        Ok(rev) => rev,
        Err(outcome) => return Ok(outcome),
    };
    let q = lock_queue(t, &req.key).await?;
    if let Err(outcome) = rev.check_queue(q.usage.items) {
        return Ok(outcome);
    }
    if let Some(e) = rev.to_revoke().cloned() {
        let changed = replace_sender(t, &req.key, None).await?;
        write_list(t, &req.key, None).await?;
        revoke_enrolment(t, &e, now).await?;
        rev.revoked(changed);
    }
    if let Some((after, through)) = rev.purge_range(q.acked, q.head) {
        // `seq > after AND seq <= through`: the range as the rule means it, pinned by
        // `rules::revoke` `a_purge_takes_the_queue_after_the_acked_cursor_through_the_head`.
        let due = t
            .query_cached(
                select_due!(
                    "WHERE it.target = $1 AND it.seq > $2 AND it.seq <= $3 ORDER BY it.seq"
                ),
                &[&req.key.as_slice(), &i(after), &i(through)],
            )
            .await?;
        let due: Vec<Due> = due
            .iter()
            .map(due_from)
            .collect::<relay_store::Result<_>>()?;
        let tell = Telling {
            notice,
            quotas: req.quotas,
            retention_ms: req.retention_ms,
            now,
        };
        let (left, _) = leave_in_runs(t, &due, None, usize::MAX, &tell).await?;
        for (l, told) in left {
            rev.purged(u(l.bytes), told);
        }
    }
    let (entry, outcome) = rev.finish();
    oplog::append(t, env, entry.kind, &entry.detail).await?;
    Ok(outcome)
}

/// Key rotation (see the module doc).
pub(crate) fn rebind(ctx: &Ctx, old: Key32, new: Key32) -> Answer<RebindOutcome> {
    ctx.write((old, new), |t, (old, new), env| {
        Box::pin(rebind_in(t, old, new, env))
    })
}

/// An admin's revocation and/or purge of one key, in one transaction.
pub(crate) fn revoke_key(ctx: &Ctx, req: RevokeRequest, notice: NoticeFn) -> Answer<RevokeOutcome> {
    let notice: SharedNotice = Arc::new(Mutex::new(notice));
    ctx.write((req, notice), |t, args, env| {
        Box::pin(revoke_key_in(t, args, env))
    })
}
