//! `GET /status` on the private listener: the relay's state as one JSON document, like NATS
//! server's `/varz` (docs/operating.md lists its fields). Everything comes from memory (atomics,
//! the connection figures, the store cache), and the store figures wait at most
//! [`STORE_WAIT`] for a fresh reading, so a slow store never holds the answer: it then carries
//! the last reading and its age (`null` before the first one).

use std::time::Duration;

use serde_json::{json, Map, Value};

use super::conn::GuardConfig;
use super::metrics::process::ProcessFacts;
use super::metrics::{COMMIT, VERSION};
use super::status_facts::StatusFacts;
use super::tls_cert::now_unix;
use super::App;
use relay_core::Limits;

/// Longest `/status` waits for fresh store figures.
const STORE_WAIT: Duration = Duration::from_millis(500);

/// The document.
pub(crate) async fn document(app: &App) -> Value {
    let m = &app.http_metrics;
    let relay = &app.relay;
    let facts: &StatusFacts = &app.status;
    let store = m.store.get(STORE_WAIT).await;
    let refused: Map<String, Value> = m
        .conn
        .refused_counts()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Value::from(v)))
        .collect();
    let uptime = m.started.elapsed().as_secs();
    let now = now_unix();
    let figures = store.map(|(f, _)| f);
    let pick =
        |get: fn(&super::metrics::store_cache::StoreFigures) -> u64| figures.as_ref().map(get);
    let tls = facts.tls.as_ref().and_then(|t| t.cert_info()).map(|c| {
        json!({
            "subject": c.subject,
            "not_after": c.not_after_text(),
            "expires_in_secs": c.seconds_left(now),
        })
    });
    let p = ProcessFacts::read();
    json!({
        "server": "mbx-relay",
        "version": VERSION,
        "commit": COMMIT,
        "now": relay_wire::time::iso_ms(u64::try_from(now).unwrap_or(0) * 1000),
        "uptime_secs": uptime,
        "epoch": relay.epoch(),
        "connections": {
            "open": m.conn.open_now(),
            "max": facts.guard.max_connections,
            "max_per_address": facts.guard.max_connections_per_address,
            "refused": refused,
        },
        "waiters": relay.wake().waiters(),
        "processes": relay.processes(),
        "body_bytes_in_use": app.memory.in_use(),
        "body_budget_bytes": app.memory.budget(),
        "store": {
            "backend": facts.backend,
            "location": facts.location,
            "size_on_disk_bytes": pick(|f| f.disk_bytes),
            "queued_items": pick(|f| f.queued_items),
            "queued_bytes": pick(|f| f.queued_bytes),
            "enrolments": {
                "live": pick(|f| f.live_enrolments),
                "revoked": pick(|f| f.revoked_enrolments),
                "max": relay.max_enrolments(),
            },
            "oldest_queued_ms": figures.and_then(|f| f.oldest_queued_ms),
            "figures_age_secs": store.map(|(_, age)| age.as_secs()),
        },
        "limits": limits(relay.limits(), &facts.guard),
        "tls": tls,
        "process": {
            "resident_memory_bytes": p.resident_bytes,
            "cpu_seconds": p.cpu_seconds,
            "open_fds": p.open_fds,
            "max_fds": p.max_fds,
        },
    })
}

/// Every limit in force (durations in seconds).
fn limits(l: &Limits, g: &GuardConfig) -> Value {
    let secs = |d: Duration| d.as_secs();
    json!({
        "max_item_bytes": l.max_item_bytes,
        "max_batch": l.max_batch,
        "max_targets": l.max_targets,
        "pushes_per_minute": l.pushes_per_minute,
        "max_pull": l.max_pull,
        "max_pull_bytes": l.max_pull_bytes,
        "retention_secs": secs(l.retention),
        "max_queue_items": l.max_queue_items,
        "max_queue_bytes": l.max_queue_bytes,
        "max_sender_items": l.max_sender_items,
        "max_sender_bytes": l.max_sender_bytes,
        "max_account_items": l.max_account_items,
        "max_account_bytes": l.max_account_bytes,
        "max_enrolments": l.max_enrolments,
        "max_challenges": l.max_challenges,
        "enrol_per_minute": l.enrol_per_minute,
        "enrol_per_minute_v4_24": l.enrol_per_minute_v4_24,
        "enrol_per_minute_v6_48": l.enrol_per_minute_v6_48,
        "max_per_name": l.max_per_name,
        "sweep_interval_secs": secs(l.sweep_interval),
        "heartbeat_stale_secs": secs(l.heartbeat_stale),
        "enrolment_idle_secs": secs(l.enrolment_idle),
        "max_stream_lifetime_secs": secs(l.max_stream_lifetime),
        "max_connections": g.max_connections,
        "max_connections_per_address": g.max_connections_per_address,
        "header_timeout_secs": g.header_timeout.as_secs_f64(),
        "body_timeout_secs": g.body_timeout.as_secs_f64(),
        "idle_timeout_secs": g.idle_timeout.as_secs_f64(),
        "public_per_minute": g.public_per_minute,
        "body_first_byte_timeout_secs": g.body.first_byte_timeout.as_secs_f64(),
        "body_min_rate": g.body.min_rate,
        "max_body_bytes_per_address": g.body.bytes_per_address,
        "max_body_bytes_per_key": g.body.bytes_per_key,
        "body_budget_wait_secs": g.body.budget_wait.as_secs_f64(),
        "auth_failures_per_minute": g.body.auth_failures_per_minute,
    })
}
