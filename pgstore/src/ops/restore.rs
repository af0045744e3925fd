//! Restoring a logical backup (format 5 or 6, `relay_store::backup`) into a new, empty PostgreSQL
//! database: the file is verified first (nothing is touched when it is bad), then the schema,
//! every record, the derived rows (quota counters, sender index, enrolment counts), a new epoch
//! and the relay-log entry "restore" are written in ONE transaction: a failure leaves the
//! database as empty as it was. A database that already holds a relay is refused.

use std::path::Path;

use deadpool_postgres::Transaction;
use relay_store::backup::{self, BackupReader, MetaRecord, Record};
use relay_store::{BackupError, BackupSummary, Key32, LogRetention, StoreError, SCHEMA_VERSION};
use tokio_postgres::types::ToSql;

use crate::db::{db_err, i, Db};
use crate::ops::{deny, kind, lists, oplog};

/// Records per multi-row statement.
const BATCH: usize = 2_000;

fn k(v: &Key32) -> Vec<u8> {
    v.to_vec()
}

fn engine(e: tokio_postgres::Error) -> BackupError {
    BackupError::Store(db_err(e))
}

/// Run one `INSERT ... SELECT * FROM unnest(...)` (or another statement over arrays).
async fn exec(
    t: &Transaction<'_>,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, BackupError> {
    t.execute(sql, params).await.map_err(engine)
}

/// Write a run of records of one kind (all of `recs` share the kind of the first).
async fn flush(t: &Transaction<'_>, recs: &mut Vec<Record>) -> Result<(), BackupError> {
    let Some(first) = recs.first() else {
        return Ok(());
    };
    let kind = first.kind();
    let batch = std::mem::take(recs);
    macro_rules! cols {
        ($pat:pat => $($v:ident : $e:expr),+) => {{
            $(let mut $v = Vec::with_capacity(batch.len());)+
            for r in batch {
                if let $pat = r {
                    $($v.push($e);)+
                }
            }
            ($($v),+)
        }};
    }
    match kind {
        relay_store::backup::RecordKind::Meta => {}
        relay_store::backup::RecordKind::Enrolment => {
            let (pk, name, folded, owner, account, by, rank, at, revoked, seen, org, client) = cols!(
                Record::Enrolment(e) =>
                pk: k(&e.enrolment.host_pubkey),
                name: e.enrolment.host_name.clone(),
                folded: e.enrolment.host_name.to_lowercase(),
                owner: e.enrolment.owner_fp.clone(),
                account: e.enrolment.account.clone(),
                by: e.enrolment.authorized_by.clone(),
                rank: i16::from(e.enrolment.authority_rank),
                at: i(e.enrolment.enrolled_at_ms),
                revoked: e.enrolment.revoked_at_ms.map(i),
                seen: e.last_seen_day.map(|d| i32::try_from(d).unwrap_or(i32::MAX)),
                org: e.enrolment.org.clone(),
                client: e.enrolment.client_id.clone()
            );
            exec(
                t,
                "INSERT INTO enrolments (host_pubkey, host_name, name_folded, owner_fp, account, \
                 authorized_by, authority_rank, enrolled_at_ms, revoked_at_ms, last_seen_day, org, \
                 client_id) \
                 SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::text[], $5::text[], \
                 $6::text[], $7::int2[], $8::int8[], $9::int8[], $10::int4[], $11::text[], \
                 $12::text[])",
                &[
                    &pk, &name, &folded, &owner, &account, &by, &rank, &at, &revoked, &seen, &org,
                    &client,
                ],
            )
            .await?;
        }
        relay_store::backup::RecordKind::EncAd => {
            let (pk, enc_pub, sig, at) = cols!(
                Record::EncAd(a) =>
                pk: k(&a.host_pubkey), enc_pub: a.enc_pub, sig: a.sig, at: i(a.at_ms)
            );
            exec(
                t,
                "INSERT INTO enc_ads (host_pubkey, enc_pub, sig, at_ms) \
                 SELECT * FROM unnest($1::bytea[], $2::text[], $3::text[], $4::int8[])",
                &[&pk, &enc_pub, &sig, &at],
            )
            .await?;
        }
        relay_store::backup::RecordKind::EncAdV2 => {
            let (pk, record, sig, at) = cols!(
                Record::EncAdV2(a) =>
                pk: k(&a.host_pubkey), record: a.record, sig: a.sig, at: i(a.at_ms)
            );
            exec(
                t,
                "INSERT INTO enc_ads_v2 (host_pubkey, record, sig, at_ms) \
                 SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::int8[])",
                &[&pk, &record, &sig, &at],
            )
            .await?;
        }
        relay_store::backup::RecordKind::SenderList => {
            let mut index: (Vec<Vec<u8>>, Vec<Vec<u8>>) = (Vec::new(), Vec::new());
            for r in &batch {
                if let Record::SenderList(l) = r {
                    for s in &l.senders {
                        index.0.push(k(s));
                        index.1.push(k(&l.target));
                    }
                }
            }
            let (target, senders, iat, record, sig) = cols!(
                Record::SenderList(l) =>
                target: k(&l.target), senders: lists::pack(&l.senders), iat: i(l.iat_ms),
                record: l.record, sig: l.sig
            );
            exec(
                t,
                "INSERT INTO sender_lists (target, senders, iat_ms, record, sig) \
                 SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::int8[], $4::bytea[], $5::text[])",
                &[&target, &senders, &iat, &record, &sig],
            )
            .await?;
            exec(
                t,
                "INSERT INTO sender_index (sender, target) \
                 SELECT * FROM unnest($1::bytea[], $2::bytea[]) ON CONFLICT DO NOTHING",
                &[&index.0, &index.1],
            )
            .await?;
        }
        relay_store::backup::RecordKind::Queue => {
            let (target, head, acked) = cols!(
                Record::Queue(q) =>
                target: k(&q.target), head: i(q.head_seq), acked: i(q.acked_through)
            );
            exec(
                t,
                "INSERT INTO queues (target, head_seq, acked_through) \
                 SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int8[])",
                &[&target, &head, &acked],
            )
            .await?;
        }
        relay_store::backup::RecordKind::Item => {
            let (
                target,
                seq,
                kind,
                item_id,
                sender,
                bytes,
                wire_hash,
                accepted,
                expires,
                account,
                wire,
            ) = cols!(
                Record::Item(it) =>
                target: k(&it.target), seq: i(it.seq), kind: kind::kind_code(it.kind),
                item_id: it.item_id.clone(), sender: k(&it.sender),
                bytes: i(it.wire.len() as u64), wire_hash: it.wire_hash.to_vec(),
                accepted: i(it.accepted_at_ms), expires: i(it.expires_at_ms),
                account: it.account.clone(), wire: it.wire
            );
            exec(
                t,
                "INSERT INTO items (target, seq, kind, item_id, sender, wire, wire_hash, bytes, \
                 accepted_at_ms, expires_at_ms, account) \
                 SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int2[], $4::text[], $5::bytea[], \
                 $6::bytea[], $7::bytea[], $8::int8[], $9::int8[], $10::int8[], $11::text[])",
                &[
                    &target, &seq, &kind, &item_id, &sender, &wire, &wire_hash, &bytes, &accepted,
                    &expires, &account,
                ],
            )
            .await?;
        }
        relay_store::backup::RecordKind::Dedup => {
            let (target, sender, item_id, hash, seq, accepted) = cols!(
                Record::Dedup(d) =>
                target: k(&d.target), sender: k(&d.sender), item_id: d.item_id,
                hash: d.row.wire_hash.to_vec(), seq: i(d.row.seq), accepted: i(d.row.accepted_at_ms)
            );
            exec(
                t,
                "INSERT INTO dedup (target, sender, item_id, wire_hash, seq, accepted_at_ms) \
                 SELECT * FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::bytea[], $5::int8[], \
                 $6::int8[])",
                &[&target, &sender, &item_id, &hash, &seq, &accepted],
            )
            .await?;
        }
        relay_store::backup::RecordKind::DedupGone => {
            let n = batch.len() as u64;
            let (target, sender, item_id, gone) = cols!(
                Record::DedupGone(g) =>
                target: k(&g.target), sender: k(&g.sender), item_id: g.item_id, gone: i(g.gone_at_ms)
            );
            let set = exec(
                t,
                "UPDATE dedup d SET gone_at_ms = u.g \
                 FROM unnest($1::bytea[], $2::bytea[], $3::text[], $4::int8[]) AS u(t, s, i, g) \
                 WHERE d.target = u.t AND d.sender = u.s AND d.item_id = u.i",
                &[&target, &sender, &item_id, &gone],
            )
            .await?;
            if set != n {
                return Err(StoreError::Corrupt(format!(
                    "{} dedup horizons name no dedup row of the backup",
                    n - set.min(n)
                ))
                .into());
            }
        }
        relay_store::backup::RecordKind::Op => {
            let (seq, at, kind, detail, hash) = cols!(
                Record::Op(e) =>
                seq: i(e.seq), at: i(e.at_ms), kind: e.kind, detail: e.detail, hash: e.hash.to_vec()
            );
            exec(
                t,
                "INSERT INTO ops (seq, at_ms, kind, detail, hash) \
                 SELECT * FROM unnest($1::int8[], $2::int8[], $3::text[], $4::text[], $5::bytea[])",
                &[&seq, &at, &kind, &detail, &hash],
            )
            .await?;
        }
        relay_store::backup::RecordKind::Invite => {
            let (hash, created, expires, note) = cols!(
                Record::Invite(v) =>
                hash: v.hash.to_vec(), created: i(v.created_ms), expires: i(v.expires_ms), note: v.note
            );
            exec(
                t,
                "INSERT INTO invites (hash, created_ms, expires_ms, note) \
                 SELECT * FROM unnest($1::bytea[], $2::int8[], $3::int8[], $4::text[])",
                &[&hash, &created, &expires, &note],
            )
            .await?;
        }
        relay_store::backup::RecordKind::Deny => {
            let (kind, subject, added, expires, note) = cols!(
                Record::Deny(d) =>
                kind: deny::columns(&d.subject).0, subject: deny::columns(&d.subject).1,
                added: i(d.added_ms), expires: i(d.expires_ms), note: d.note
            );
            exec(
                t,
                "INSERT INTO deny_list (kind, subject, added_ms, expires_ms, note) \
                 SELECT * FROM unnest($1::text[], $2::bytea[], $3::int8[], $4::int8[], $5::text[])",
                &[&kind, &subject, &added, &expires, &note],
            )
            .await?;
        }
    }
    Ok(())
}

async fn put_meta(t: &Transaction<'_>, m: &MetaRecord) -> Result<(), BackupError> {
    let (cp_seq, cp_hash) = match m.ops_checkpoint {
        Some((s, h)) => (Some(i(s)), Some(h.to_vec())),
        None => (None, None),
    };
    exec(
        t,
        "INSERT INTO meta (id, epoch, relay_pubkey, heartbeat_ms, created_ms, ops_next, ops_head, \
         ops_cp_seq, ops_cp_hash) VALUES (1, $1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &m.epoch,
            &m.relay_pubkey.map(|p| p.to_vec()),
            &m.heartbeat_ms.map(i),
            &i(m.created_ms),
            &i(m.ops_next),
            &m.ops_head.map(|h| h.to_vec()),
            &cp_seq,
            &cp_hash,
        ],
    )
    .await?;
    Ok(())
}

/// The counters a restore derives from the rows it wrote (one aggregate each, once).
const DERIVE: &str = "
UPDATE queues q SET items = s.n, bytes = s.b
    FROM (SELECT target, count(*) AS n, sum(bytes)::BIGINT AS b FROM items GROUP BY target) s
    WHERE q.target = s.target;
INSERT INTO usage_sender (target, sender, items, bytes)
    SELECT target, sender, count(*), sum(bytes)::BIGINT FROM items GROUP BY target, sender;
INSERT INTO usage_account (account, items, bytes)
    SELECT account, count(*), sum(bytes)::BIGINT FROM items WHERE account IS NOT NULL GROUP BY account;
UPDATE meta SET
    live_enrolments = (SELECT count(*) FROM enrolments WHERE revoked_at_ms IS NULL),
    revoked_enrolments = (SELECT count(*) FROM enrolments WHERE revoked_at_ms IS NOT NULL),
    ops_enrol_held = (SELECT count(*) FROM ops WHERE kind IN ('enrol', 're-enrol'))
    WHERE id = 1;
";

/// Whether the database holds relay tables already (any of them: even a half-made schema is
/// not ours to overwrite).
async fn holds_a_relay(t: &Transaction<'_>) -> Result<bool, BackupError> {
    let r = t
        .query_one(
            "SELECT to_regclass('schema_version') IS NOT NULL OR to_regclass('meta') IS NOT NULL",
            &[],
        )
        .await
        .map_err(engine)?;
    Ok(r.get(0))
}

/// Restore `file` into the empty database at `url`; answers the file's summary and the new
/// epoch. `label` names the database in messages (never the password).
pub(crate) async fn restore(
    url: &str,
    label: &str,
    file: &Path,
    now_ms: u64,
) -> Result<(BackupSummary, String), BackupError> {
    let summary = backup::verify(file)?;
    if summary.schema_version > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            found: summary.schema_version,
            supported: SCHEMA_VERSION,
        }
        .into());
    }
    let db = Db::connect(url).await?;
    let mut c = db.conn().await?;
    let t = c.transaction().await.map_err(engine)?;
    t.batch_execute(crate::db::UNBOUNDED_IDLE)
        .await
        .map_err(engine)?;
    if holds_a_relay(&t).await? {
        return Err(BackupError::Io {
            context: format!(
                "restore target postgres://{label} already holds a relay (its tables exist); \
                 restore into a new, empty database"
            ),
            source: std::io::Error::from(std::io::ErrorKind::AlreadyExists),
        });
    }
    crate::schema::create_in(&t, now_ms).await?;
    let mut r = BackupReader::open(file)?;
    let mut run: Vec<Record> = Vec::with_capacity(BATCH);
    while let Some(rec) = r.next_record()? {
        if let Record::Meta(m) = &rec {
            put_meta(&t, m).await?;
            continue;
        }
        if run.len() >= BATCH || run.first().is_some_and(|f| f.kind() != rec.kind()) {
            flush(&t, &mut run).await?;
        }
        run.push(rec);
    }
    flush(&t, &mut run).await?;
    t.batch_execute(DERIVE).await.map_err(engine)?;
    let epoch = uuid::Uuid::new_v4().to_string();
    t.execute("UPDATE meta SET epoch = $1 WHERE id = 1", &[&epoch])
        .await
        .map_err(engine)?;
    let detail = backup::restore_log_detail(&summary, &epoch);
    // relay-tool's offline writers bound the log as `mbx-relay serve` does by default.
    let env = crate::ctx::WriteEnv {
        now: now_ms,
        keep: LogRetention::default(),
    };
    oplog::append(&t, env, "restore", &detail)
        .await
        .map_err(|e| match e {
            crate::db::OpError::Db(e) => engine(e),
            crate::db::OpError::Store(e) => BackupError::Store(e),
        })?;
    t.commit().await.map_err(engine)?;
    db.close();
    Ok((summary, epoch))
}

impl crate::store::PgStore {
    /// Build a new relay in the empty database at `url` from the backup `file` (format 5),
    /// rotating the epoch and logging the restore; answers the file's summary and the new
    /// epoch. Runs on its own thread and runtime, so any caller may block on it.
    ///
    /// # Errors
    /// [`BackupError`]: a damaged file (nothing touched), a database that already holds a
    /// relay, a schema newer than this build, database errors (the transaction rolled back).
    pub fn restore_backup(url: &str, file: &Path) -> Result<(BackupSummary, String), BackupError> {
        let (url, file) = (url.to_string(), file.to_path_buf());
        let label = crate::store::label_of(&url);
        let now_ms = relay_store::Clock::now_ms(&relay_store::SystemClock);
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| BackupError::Io {
                    context: "starting the restore's runtime".into(),
                    source,
                })?;
            rt.block_on(restore(&url, &label, &file, now_ms))
        })
        .join()
        .unwrap_or_else(|_| Err(StoreError::Engine("the restore thread panicked".into()).into()))
    }
}
