//! The store backend's counters about its link to the database (the PostgreSQL pool: waits,
//! connect errors, lost connections, reconnects after a failover, reruns, commit-unknown 503s,
//! timeouts), read at each scrape from [`crate::store_open::backend_counters`]; nothing on a
//! fjall store. `serve` hands this collector to the metrics layer, which knows no backend.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;

/// The collector (it holds nothing: the counters are the backend's, per process).
#[derive(Debug)]
pub(crate) struct StoreLink;

impl Collector for StoreLink {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        for (name, help, v) in crate::store_open::backend_counters() {
            let c = ConstCounter::new(v);
            c.encode(e.encode_descriptor(name, help, None, c.metric_type())?)?;
        }
        Ok(())
    }
}
