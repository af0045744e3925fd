//! The logical backup (format 5, `relay_store::backup`) of a PostgreSQL store: every table read
//! in one REPEATABLE READ read-only transaction (one snapshot, writers keep running), a page at
//! a time through cursors, as the typed records every backend restores.

use std::io::Write;

use relay_store::backup::{
    BackupWriter, DedupGone, DedupRecord, EnrolmentRecord, Header, ItemRow, MetaRecord,
    QueueRecord, Record,
};
use relay_store::{
    BackupError, BackupSummary, EncAd, EncAdV2, OpEntry, Result, SenderList, StoreError,
    SCHEMA_VERSION,
};
use tokio_postgres::Row;

use crate::ctx::Ctx;
use crate::db::{db_err, key32, u};
use crate::ops::{enrol, kind, lists};

/// Rows fetched per page (items carry their wire bytes: about 1 MB a page at 1 KiB each).
const PAGE: i64 = 1_000;

/// How one table becomes records.
type RowFn = fn(&Row) -> Result<Record>;

fn hash(v: &[u8], what: &str) -> Result<[u8; 32]> {
    key32(v, what)
}

fn enrolment(r: &Row) -> Result<Record> {
    Ok(Record::Enrolment(EnrolmentRecord {
        enrolment: enrol::from_row(r)?,
        last_seen_day: r
            .get::<_, Option<i32>>(enrol::N_COLS)
            .map(|d| u32::try_from(d).unwrap_or(0)),
    }))
}

fn enc_ad(r: &Row) -> Result<Record> {
    Ok(Record::EncAd(EncAd {
        host_pubkey: key32(r.get(0), "enc ad key")?,
        enc_pub: r.get(1),
        sig: r.get(2),
        at_ms: u(r.get(3)),
    }))
}

fn enc_ad_v2(r: &Row) -> Result<Record> {
    Ok(Record::EncAdV2(EncAdV2 {
        host_pubkey: key32(r.get(0), "enc ad key")?,
        record: r.get(1),
        sig: r.get(2),
        at_ms: u(r.get(3)),
    }))
}

fn sender_list(r: &Row) -> Result<Record> {
    Ok(Record::SenderList(SenderList {
        target: key32(r.get(0), "sender list target")?,
        senders: lists::unpack(r.get(1))?,
        iat_ms: u(r.get(2)),
        record: r.get(3),
        sig: r.get(4),
    }))
}

fn queue_row(r: &Row) -> Result<Record> {
    Ok(Record::Queue(QueueRecord {
        target: key32(r.get(0), "queue target")?,
        head_seq: u(r.get(1)),
        acked_through: u(r.get(2)),
    }))
}

fn item(r: &Row) -> Result<Record> {
    Ok(Record::Item(ItemRow {
        target: key32(r.get(0), "item target")?,
        seq: u(r.get(1)),
        kind: kind::kind_of(r.get(2))?,
        item_id: r.get(3),
        sender: key32(r.get(4), "item sender")?,
        wire: r.get(5),
        wire_hash: hash(r.get(6), "item wire hash")?,
        accepted_at_ms: u(r.get(7)),
        expires_at_ms: u(r.get(8)),
        account: r.get(9),
    }))
}

fn dedup(r: &Row) -> Result<Record> {
    Ok(Record::Dedup(DedupRecord {
        target: key32(r.get(0), "dedup target")?,
        sender: key32(r.get(1), "dedup sender")?,
        item_id: r.get(2),
        row: relay_store::DedupRow {
            wire_hash: hash(r.get(3), "dedup wire hash")?,
            seq: u(r.get(4)),
            accepted_at_ms: u(r.get(5)),
        },
    }))
}

fn dedup_gone(r: &Row) -> Result<Record> {
    Ok(Record::DedupGone(DedupGone {
        target: key32(r.get(0), "dedup target")?,
        sender: key32(r.get(1), "dedup sender")?,
        item_id: r.get(2),
        gone_at_ms: u(r.get(3)),
    }))
}

fn op(r: &Row) -> Result<Record> {
    Ok(Record::Op(OpEntry {
        seq: u(r.get(0)),
        at_ms: u(r.get(1)),
        kind: r.get(2),
        detail: r.get(3),
        hash: hash(r.get(4), "ops hash")?,
    }))
}

fn invite(r: &Row) -> Result<Record> {
    Ok(Record::Invite(relay_store::Invite {
        hash: hash(r.get(0), "invite hash")?,
        created_ms: u(r.get(1)),
        expires_ms: u(r.get(2)),
        note: r.get(3),
    }))
}

fn deny_entry(r: &Row) -> Result<Record> {
    Ok(Record::Deny(relay_store::DenyEntry {
        subject: super::deny::subject_of(r.get(0), r.get(1))?,
        added_ms: u(r.get(2)),
        expires_ms: u(r.get(3)),
        note: r.get(4),
    }))
}

/// The queries, in record order (kinds must come in `RecordKind` order).
fn queries() -> Vec<(String, RowFn)> {
    vec![
        (
            format!(
                "SELECT {}, last_seen_day FROM enrolments ORDER BY host_pubkey",
                enrol::COLS
            ),
            enrolment,
        ),
        (
            "SELECT host_pubkey, enc_pub, sig, at_ms FROM enc_ads ORDER BY host_pubkey".into(),
            enc_ad,
        ),
        (
            "SELECT host_pubkey, record, sig, at_ms FROM enc_ads_v2 ORDER BY host_pubkey".into(),
            enc_ad_v2,
        ),
        (
            "SELECT target, senders, iat_ms, record, sig FROM sender_lists ORDER BY target".into(),
            sender_list,
        ),
        (
            "SELECT target, head_seq, acked_through FROM queues ORDER BY target".into(),
            queue_row,
        ),
        (
            "SELECT target, seq, kind, item_id, sender, wire, wire_hash, accepted_at_ms, \
             expires_at_ms, account FROM items ORDER BY target, seq"
                .into(),
            item,
        ),
        (
            "SELECT target, sender, item_id, wire_hash, seq, accepted_at_ms FROM dedup \
             ORDER BY target, sender, item_id"
                .into(),
            dedup,
        ),
        (
            "SELECT target, sender, item_id, gone_at_ms FROM dedup WHERE gone_at_ms IS NOT NULL \
             ORDER BY gone_at_ms, target, sender, item_id"
                .into(),
            dedup_gone,
        ),
        (
            "SELECT seq, at_ms, kind, detail, hash FROM ops ORDER BY seq".into(),
            op,
        ),
        (
            "SELECT hash, created_ms, expires_ms, note FROM invites ORDER BY hash".into(),
            invite,
        ),
        (
            "SELECT kind, subject, added_ms, expires_ms, note FROM deny_list \
             ORDER BY kind, subject"
                .into(),
            deny_entry,
        ),
    ]
}

fn meta(r: &Row) -> Result<MetaRecord> {
    let cp = match (r.get::<_, Option<i64>>(6), r.get::<_, Option<Vec<u8>>>(7)) {
        (Some(seq), Some(h)) => Some((u(seq), hash(&h, "ops checkpoint")?)),
        _ => None,
    };
    Ok(MetaRecord {
        epoch: r.get(0),
        relay_pubkey: r
            .get::<_, Option<Vec<u8>>>(1)
            .map(|k| key32(&k, "meta relay_pubkey"))
            .transpose()?,
        heartbeat_ms: r.get::<_, Option<i64>>(2).map(u),
        created_ms: u(r.get(3)),
        ops_next: u(r.get(4)),
        ops_head: r
            .get::<_, Option<Vec<u8>>>(5)
            .map(|h| hash(&h, "meta ops_head"))
            .transpose()?,
        ops_checkpoint: cp,
    })
}

/// Stream one snapshot as a logical (format 6) backup to `out`. `progress` gets the bytes written.
/// Records nothing itself (callers log the backup).
///
/// # Errors
/// `Io` when `out` fails, `Store` for database errors.
pub(crate) fn backup_to(
    ctx: &Ctx,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> std::result::Result<BackupSummary, BackupError> {
    // Pages of records; `None` marks the end (a stream that stops without it is an error).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Option<Vec<Record>>>>(4);
    let s = ctx.clone();
    ctx.spawn_task(async move {
        let res: Result<()> = async {
            let mut c = s.db.conn().await?;
            let t = crate::db::stream_snapshot(&mut c).await?;
            let m = t
                .query_one(
                    "SELECT epoch, relay_pubkey, heartbeat_ms, created_ms, ops_next, ops_head, \
                     ops_cp_seq, ops_cp_hash FROM meta WHERE id = 1",
                    &[],
                )
                .await
                .map_err(db_err)?;
            if tx
                .send(Ok(Some(vec![Record::Meta(meta(&m)?)])))
                .await
                .is_err()
            {
                return Ok(());
            }
            for (sql, each) in queries() {
                t.batch_execute(&format!("DECLARE backup_rows NO SCROLL CURSOR FOR {sql}"))
                    .await
                    .map_err(db_err)?;
                loop {
                    let rows = t
                        .query(&format!("FETCH {PAGE} FROM backup_rows"), &[])
                        .await
                        .map_err(db_err)?;
                    if rows.is_empty() {
                        break;
                    }
                    let recs = rows.iter().map(each).collect::<Result<Vec<_>>>()?;
                    if tx.send(Ok(Some(recs))).await.is_err() {
                        return Ok(()); // the writer stopped
                    }
                }
                t.batch_execute("CLOSE backup_rows").await.map_err(db_err)?;
            }
            let _ = tx.send(Ok(None)).await;
            Ok(())
        }
        .await;
        if let Err(e) = res {
            let _ = tx.send(Err(e)).await;
        }
    });
    let mut next = || crate::ctx::block_on_wait(|| rx.blocking_recv());
    let first = next().ok_or(StoreError::Closed)??.unwrap_or_default();
    let Some(Record::Meta(m)) = first.first() else {
        return Err(StoreError::Corrupt("the backup did not start with meta".into()).into());
    };
    let mut w = BackupWriter::start(
        out,
        Header {
            schema_version: SCHEMA_VERSION,
            relay_pubkey: m.relay_pubkey,
            epoch: m.epoch.clone(),
            created_ms: ctx.now_ms(),
            backend: "postgres".into(),
        },
    )?;
    w.record(&first[0])?;
    // A stream that ends without its end mark (the task failed) is no backup.
    while let Some(chunk) = next().ok_or(StoreError::Closed)?? {
        for r in chunk {
            w.record(&r)?;
        }
        progress(w.bytes_written());
    }
    let summary = w.finish()?;
    progress(summary.file_bytes);
    Ok(summary)
}
