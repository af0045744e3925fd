//! `/metrics` in Prometheus text format: requests by route and status (counted here), the relay's
//! item and store-write counters, and queued items and bytes from the store (cached briefly, since
//! computing them reads the usage table).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::relay::metrics::escape_label;
use crate::relay::Relay;

/// How long a queue-usage reading is reused.
const QUEUE_CACHE: Duration = Duration::from_secs(10);

/// Requests counted by (route label, status); bounded by routes × statuses.
#[derive(Default)]
pub struct HttpMetrics {
    requests: Mutex<BTreeMap<(&'static str, u16), u64>>,
    queued: Mutex<Option<(Instant, u64, u64)>>,
}

impl HttpMetrics {
    /// Count one answered request.
    pub fn count(&self, route: &'static str, status: u16) {
        let mut m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry((route, status)).or_insert(0) += 1;
    }

    /// Render every metric.
    pub async fn render(&self, relay: &Relay) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP mbx_relay_requests_total HTTP requests by route and status.\n# TYPE mbx_relay_requests_total counter"
        );
        {
            let m = self.requests.lock().unwrap_or_else(|p| p.into_inner());
            for ((route, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "mbx_relay_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                    escape_label(route)
                );
            }
        }
        relay.metrics.render(&mut out);
        crate::relay::metrics::render_commit_stats(&mut out, &relay.store().commit_stats());
        if let Some((items, bytes)) = self.queued(relay).await {
            let _ = writeln!(
                out,
                "# HELP mbx_relay_queued_items Items queued for all targets.\n# TYPE mbx_relay_queued_items gauge\nmbx_relay_queued_items {items}"
            );
            let _ = writeln!(
                out,
                "# HELP mbx_relay_queued_bytes Wire bytes queued for all targets.\n# TYPE mbx_relay_queued_bytes gauge\nmbx_relay_queued_bytes {bytes}"
            );
        }
        out
    }

    async fn queued(&self, relay: &Relay) -> Option<(u64, u64)> {
        if let Some((at, i, b)) = *self.queued.lock().unwrap_or_else(|p| p.into_inner()) {
            if at.elapsed() < QUEUE_CACHE {
                return Some((i, b));
            }
        }
        let store = relay.store().clone();
        let stats = tokio::task::spawn_blocking(move || store.stats())
            .await
            .ok()?
            .ok()?;
        let v = (stats.queued.items, stats.queued.bytes);
        *self.queued.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), v.0, v.1));
        Some(v)
    }
}
