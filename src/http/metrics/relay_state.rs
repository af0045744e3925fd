//! The figures `/metrics` reads from the relay at each scrape (a prometheus-client collector):
//! live enrolments against the cap, waiters, request-body memory in use, whether store writes
//! are failing, queued items and bytes
//! and the newest backup the relay log records (from the store cache, [`super::store_cache`]),
//! the store's group-commit figures and the TLS certificate's expiry.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::gauge::ConstGauge;

use super::store_cache::StoreCache;
use crate::http::account::MemoryAccount;
use crate::http::tls::Tls;
use relay_core::Relay;

/// Everything the collector reads.
pub(crate) struct RelayState {
    pub relay: Arc<Relay>,
    pub bodies: Arc<MemoryAccount>,
    pub store: Arc<StoreCache>,
    pub tls: Option<Arc<Tls>>,
}

impl std::fmt::Debug for RelayState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RelayState")
    }
}

/// One gauge, written as `mbx_relay_<name>`.
fn gauge(e: &mut DescriptorEncoder, name: &str, help: &str, v: u64) -> std::fmt::Result {
    let g = ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX));
    g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)
}

impl Collector for RelayState {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let relay = &self.relay;
        if let Some(live) = relay.watch_enrolments() {
            gauge(
                &mut e,
                "enrolments_live",
                "Live (not revoked) enrolments",
                live,
            )?;
        }
        gauge(
            &mut e,
            "enrolments_max",
            "The live-enrolment cap (--max-enrolments); at it new hosts are refused",
            relay.max_enrolments(),
        )?;
        gauge(
            &mut e,
            "waiters",
            "Waiting pulls and event streams (docs/protocol.md section 8)",
            relay.wake().waiters() as u64,
        )?;
        gauge(
            &mut e,
            "body_bytes_in_use",
            "Request-body bytes held now in the shared body budget",
            self.bodies.in_use(),
        )?;
        gauge(
            &mut e,
            "body_budget_bytes",
            "The shared request-body budget",
            self.bodies.budget(),
        )?;
        let (_, write_failing) = relay.metrics.write_health();
        gauge(
            &mut e,
            "store_write_failing",
            "1 while the last store write failed and none succeeded since (the store is unavailable; /health answers 503), else 0",
            u64::from(write_failing),
        )?;
        if let Some((f, _age)) = self.store.cached() {
            gauge(
                &mut e,
                "queued_items",
                "Items queued for all targets",
                f.queued_items,
            )?;
            gauge(
                &mut e,
                "queued_bytes",
                "Wire bytes queued for all targets",
                f.queued_bytes,
            )?;
            gauge(
                &mut e,
                "store_disk_bytes",
                "Size of the store on disk (a database store: as its backend reports it)",
                f.disk_bytes,
            )?;
            // 0 when the log holds no backup: "no backup in 26 h" fires on a relay never
            // backed up, as it should.
            gauge(
                &mut e,
                "last_backup_timestamp_seconds",
                "When the newest backup the relay log records was taken (relay-tool backup: online, offline or beside a shared store), seconds since the Unix epoch; 0 for none",
                f.last_backup_ms.unwrap_or(0) / 1_000,
            )?;
        }
        relay_core::encode_commit_stats(&mut e, &relay.store().commit_stats())?;
        if let Some(cert) = self.tls.as_ref().and_then(|t| t.cert_info()) {
            let g = ConstGauge::new(cert.not_after_unix);
            g.encode(e.encode_descriptor(
                "tls_cert_not_after_seconds",
                "Expiry (notAfter) of the served TLS certificate, seconds since the Unix epoch",
                None,
                g.metric_type(),
            )?)?;
        }
        Ok(())
    }
}
