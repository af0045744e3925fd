//! JSON forms of store figures, shared by the admin socket and `relay-tool` so that a running
//! relay and an offline store answer in exactly the same shape. Keys appear as public keys and
//! fingerprints only; no wire bytes.

use relay_store::{BackupSummary, LogVerdict, OpEntry, Stats};
use serde_json::{json, Value};

use relay_wire::keys::{b64, fingerprint};

/// Whole-store figures as one JSON object; `max_enrolments` is the serving relay's cap (`null`
/// for a stopped store, which has none); `now_ms` dates the oldest queued item's age.
pub fn stats_json(s: &Stats, max_enrolments: Option<u64>, now_ms: u64) -> Value {
    let top: Vec<Value> = s
        .top_targets
        .iter()
        .map(|(key, usage)| {
            json!({
                "host_pubkey": b64(key),
                "fingerprint": fingerprint(key),
                "items": usage.items,
                "bytes": usage.bytes,
            })
        })
        .collect();
    json!({
        "epoch": s.meta.epoch,
        "relay_pubkey": s.meta.relay_pubkey.as_ref().map(|k| b64(k)),
        "relay_key_fingerprint": s.meta.relay_pubkey.as_ref().map(fingerprint),
        "schema_version": s.meta.schema_version,
        "created_ms": s.meta.created_ms,
        "heartbeat_ms": s.meta.heartbeat_ms,
        "live_enrolments": s.live_enrolments,
        "max_enrolments": max_enrolments,
        "revoked_enrolments": s.revoked_enrolments,
        "queued_items": s.queued.items,
        "queued_bytes": s.queued.bytes,
        "top_targets": top,
        "dedup_rows": s.dedup_rows,
        "enc_ads_v1": s.enc_ads_v1,
        "enc_ads_v2": s.enc_ads_v2,
        "oldest_queued_ms": s.oldest_queued_ms,
        "oldest_queued_age_ms": s.oldest_queued_ms.map(|t| now_ms.saturating_sub(t)),
        "disk_bytes": s.disk_bytes,
    })
}

/// One relay-log entry as a JSON object (its chain hash in hex).
pub fn op_json(op: &OpEntry) -> Value {
    json!({ "seq": op.seq, "at_ms": op.at_ms, "kind": op.kind, "detail": op.detail,
            "hash": hex(&op.hash) })
}

/// The result of recomputing the relay log's chain, as a JSON object: `{"intact": true,
/// "entries": N, "checkpoint": {"seq", "hash"} | null}`, `{"intact": false, "seq": N, "why"}`,
/// or `{"intact": null}` for a log from before the chain (schema < 4).
pub fn log_verdict_json(v: &LogVerdict) -> Value {
    match v {
        LogVerdict::Intact {
            entries,
            checkpoint,
        } => json!({
            "intact": true,
            "entries": entries,
            "checkpoint": checkpoint.map(|c| json!({ "seq": c.seq, "hash": hex(&c.hash) })),
        }),
        LogVerdict::Broken { seq, why } => json!({ "intact": false, "seq": seq, "why": why }),
        LogVerdict::Unchained => json!({ "intact": null }),
    }
}

/// The verdict back from its JSON form (what the admin socket carries).
pub fn log_verdict_from_json(v: &Value) -> Option<LogVerdict> {
    match v["intact"].as_bool() {
        Some(true) => Some(LogVerdict::Intact {
            entries: v["entries"].as_u64()?,
            checkpoint: match &v["checkpoint"] {
                Value::Null => None,
                c => Some(relay_store::LogCheckpoint {
                    seq: c["seq"].as_u64()?,
                    hash: unhex32(c["hash"].as_str()?)?,
                }),
            },
        }),
        Some(false) => Some(LogVerdict::Broken {
            seq: v["seq"].as_u64()?,
            why: v["why"].as_str()?.to_string(),
        }),
        None if v["intact"].is_null() => Some(LogVerdict::Unchained),
        None => None,
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn unhex32(s: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if s.len() != 64 {
        return None;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// A backup file's summary as a JSON object (counts in file order).
pub(crate) fn summary_json(s: &BackupSummary) -> Value {
    let counts: Vec<Value> = s.counts.iter().map(|(p, n)| json!([p, n])).collect();
    json!({
        "format_version": s.format_version,
        "schema_version": s.schema_version,
        "relay_pubkey": s.relay_pubkey.as_ref().map(|k| b64(k)),
        "relay_key_fingerprint": s.relay_pubkey.as_ref().map(fingerprint),
        "epoch": s.epoch,
        "created_ms": s.created_ms,
        "counts": counts,
        "checksum": s.checksum,
        "file_bytes": s.file_bytes,
        "log": log_verdict_json(&s.log),
    })
}

/// The relay-log detail of a backup: where it was taken, counts, size and checksum.
pub fn backup_log_detail(s: &BackupSummary, how: &str) -> String {
    let total: u64 = s.counts.iter().map(|(_, n)| n).sum();
    let parts: Vec<String> = s.counts.iter().map(|(p, n)| format!("{p} {n}")).collect();
    let key = s
        .relay_pubkey
        .as_ref()
        .map(fingerprint)
        .unwrap_or_else(|| "none".to_string());
    format!(
        "{how}: {total} records ({}), {} bytes, checksum {}, epoch {}, relay key {key}",
        parts.join(", "),
        s.file_bytes,
        s.checksum,
        s.epoch
    )
}

/// One relay process's row (`relay-tool status`, the admin socket's `processes`): the row, and
/// `stale` when it was not renewed within [`relay_store::PROCESS_STALE_MS`] of `now_ms`.
pub fn process_json(row: &relay_store::ProcessRow, now_ms: u64) -> Value {
    json!({
        "id": row.id,
        "address": row.address,
        "version": row.version,
        "started_ms": row.started_ms,
        "heartbeat_ms": row.heartbeat_ms,
        "stale": row.stale(now_ms),
    })
}
