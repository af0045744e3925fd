//! A JSON-lines dump of the tables from one snapshot (REPEATABLE READ): one object per row,
//! `{"partition": <table>, "key": {primary key columns}, "value": {other columns}}`. Binary
//! columns are PostgreSQL's hex (`\x...`); wire bytes are left out unless asked for. Rows are
//! read through a cursor a page at a time, so a dump's memory does not grow with the store.
//! Open challenges are not dumped (live enrolment nonces).

use std::io::Write;

use relay_store::{DumpOptions, Result, StoreError};
use serde_json::{Map, Value};

use crate::ctx::Ctx;
use crate::db::db_err;

/// Dumped tables with their primary key columns, in dump order.
const TABLES: &[(&str, &[&str])] = &[
    ("schema_version", &["version"]),
    ("meta", &["id"]),
    ("enrolments", &["host_pubkey"]),
    ("enc_ads", &["host_pubkey"]),
    ("enc_ads_v2", &["host_pubkey"]),
    ("sender_lists", &["target"]),
    ("sender_index", &["sender", "target"]),
    ("queues", &["target"]),
    ("items", &["target", "seq"]),
    ("dedup", &["target", "sender", "item_id"]),
    ("usage_sender", &["target", "sender"]),
    ("usage_account", &["account"]),
    ("ops", &["seq"]),
    ("leases", &["name"]),
];

/// Rows fetched per page.
const PAGE: i64 = 500;

enum Chunk {
    Lines(String),
    Done(&'static str, u64),
}

fn line(table: &str, pk: &[&str], row: Value) -> String {
    let mut key = Map::new();
    let mut value = Map::new();
    if let Value::Object(cols) = row {
        for (c, v) in cols {
            if pk.contains(&c.as_str()) {
                key.insert(c, v);
            } else {
                value.insert(c, v);
            }
        }
    }
    let mut obj = Map::new();
    obj.insert("partition".into(), Value::String(table.into()));
    obj.insert("key".into(), Value::Object(key));
    obj.insert("value".into(), Value::Object(value));
    let mut s = Value::Object(obj).to_string();
    s.push('\n');
    s
}

/// Write the tables (or the one `opts.partition` names) as JSON lines from one snapshot;
/// answers the rows written per table.
///
/// # Errors
/// `Corrupt` for an unknown table name, `Engine`, `Io` when `out` fails.
pub(crate) fn dump(
    ctx: &Ctx,
    out: &mut dyn Write,
    opts: &DumpOptions,
) -> Result<Vec<(String, u64)>> {
    let tables: Vec<(&'static str, &'static [&'static str])> = match &opts.partition {
        Some(name) => vec![*TABLES
            .iter()
            .find(|(t, _)| t == name)
            .ok_or_else(|| StoreError::Corrupt(format!("no table named {name:?}")))?],
        None => TABLES.to_vec(),
    };
    let with_wire = opts.with_wire;
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Chunk>>(4);
    let s = ctx.clone();
    ctx.spawn_task(async move {
        let res: Result<()> = async {
            let mut c = s.db.conn().await?;
            let t = crate::db::stream_snapshot(&mut c).await?;
            for (table, pk) in tables {
                let json = if table == "items" && !with_wire {
                    "to_jsonb(t) - 'wire'"
                } else {
                    "to_jsonb(t)"
                };
                t.batch_execute(&format!(
                    "DECLARE dump_rows NO SCROLL CURSOR FOR SELECT {json} FROM {table} t \
                     ORDER BY {}",
                    pk.join(", ")
                ))
                .await
                .map_err(db_err)?;
                let mut n = 0u64;
                loop {
                    let rows = t
                        .query(&format!("FETCH {PAGE} FROM dump_rows"), &[])
                        .await
                        .map_err(db_err)?;
                    if rows.is_empty() {
                        break;
                    }
                    let mut lines = String::new();
                    for r in &rows {
                        lines.push_str(&line(table, pk, r.get(0)));
                    }
                    n += rows.len() as u64;
                    if tx.send(Ok(Chunk::Lines(lines))).await.is_err() {
                        return Ok(()); // the reader stopped
                    }
                }
                t.batch_execute("CLOSE dump_rows").await.map_err(db_err)?;
                if tx.send(Ok(Chunk::Done(table, n))).await.is_err() {
                    return Ok(());
                }
            }
            Ok(())
        }
        .await;
        if let Err(e) = res {
            let _ = tx.send(Err(e)).await;
        }
    });
    let mut counts = Vec::new();
    let mut next = || crate::ctx::block_on_wait(|| rx.blocking_recv());
    while let Some(chunk) = next() {
        match chunk? {
            Chunk::Lines(l) => out
                .write_all(l.as_bytes())
                .map_err(|source| StoreError::Io {
                    context: "writing the dump".into(),
                    source,
                })?,
            Chunk::Done(table, n) => counts.push((table.to_string(), n)),
        }
    }
    Ok(counts)
}
