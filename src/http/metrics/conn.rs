//! Connection figures of the public listener for `/metrics` and `/status`: connections open,
//! and connections refused or cut off by reason (a closed set, [`ConnRefusal`]). A refusal at
//! `--max-connections` is also logged, at most once per [`WARN_EVERY`] with the count since.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Least time between two warnings about refusals at the connection cap.
pub(crate) const WARN_EVERY: Duration = Duration::from_secs(10);

/// Why a connection was refused or cut off before it was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnRefusal {
    /// Every `--max-connections` slot was taken: 503.
    MaxConnections,
    /// The address held its `--max-connections-per-address`: 429.
    MaxConnectionsPerAddress,
    /// The request head did not arrive within `--header-timeout`.
    HeaderTimeout,
    /// The TLS handshake failed (bad ClientHello, unknown CA at the client, protocol error).
    TlsHandshakeFailed,
    /// The TLS handshake did not finish within `--header-timeout`.
    TlsHandshakeTimeout,
    /// The address was past `--tls-handshakes-per-minute`.
    TlsHandshakeWindow,
}

impl ConnRefusal {
    /// Every reason, for listing all of them at 0.
    pub(crate) const ALL: [ConnRefusal; 6] = [
        ConnRefusal::MaxConnections,
        ConnRefusal::MaxConnectionsPerAddress,
        ConnRefusal::HeaderTimeout,
        ConnRefusal::TlsHandshakeFailed,
        ConnRefusal::TlsHandshakeTimeout,
        ConnRefusal::TlsHandshakeWindow,
    ];

    /// The `reason` label.
    pub(crate) fn label(self) -> &'static str {
        match self {
            ConnRefusal::MaxConnections => "max_connections",
            ConnRefusal::MaxConnectionsPerAddress => "max_connections_per_address",
            ConnRefusal::HeaderTimeout => "header_timeout",
            ConnRefusal::TlsHandshakeFailed => "tls_handshake_failed",
            ConnRefusal::TlsHandshakeTimeout => "tls_handshake_timeout",
            ConnRefusal::TlsHandshakeWindow => "tls_handshake_window",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

/// The public listener's connection figures (shared by the accept loop and `/metrics`).
#[derive(Debug, Default)]
pub(crate) struct ConnMetrics {
    open: Gauge,
    refused: Family<ReasonLabel, Counter>,
    /// When the last cap warning was logged (ms since the epoch).
    last_warn_ms: AtomicU64,
    /// Refusals at the cap since that warning.
    unwarned: AtomicU64,
}

/// Counts one open connection until dropped.
pub(crate) struct OpenConnection<'a>(&'a ConnMetrics);

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.open.dec();
    }
}

impl ConnMetrics {
    /// Figures with every reason at 0.
    pub(crate) fn new() -> Self {
        let m = ConnMetrics::default();
        for r in ConnRefusal::ALL {
            let _ = m.refused.get_or_create(&ReasonLabel { reason: r.label() });
        }
        m
    }

    /// Count a connection open until the returned handle drops.
    pub(crate) fn opened(&self) -> OpenConnection<'_> {
        self.open.inc();
        OpenConnection(self)
    }

    /// Connections open now.
    pub(crate) fn open_now(&self) -> i64 {
        self.open.get()
    }

    /// Count a refusal; one at the connection cap is logged at most every [`WARN_EVERY`].
    pub(crate) fn refused(&self, why: ConnRefusal) {
        self.refused
            .get_or_create(&ReasonLabel {
                reason: why.label(),
            })
            .inc();
        if why == ConnRefusal::MaxConnections {
            self.warn_at_cap(relay_core::now_ms());
        }
    }

    /// Refusals so far, by reason label.
    pub(crate) fn refused_counts(&self) -> Vec<(&'static str, u64)> {
        ConnRefusal::ALL
            .iter()
            .map(|r| {
                let n = self
                    .refused
                    .get_or_create(&ReasonLabel { reason: r.label() })
                    .get();
                (r.label(), n)
            })
            .collect()
    }

    fn warn_at_cap(&self, now_ms: u64) {
        self.unwarned.fetch_add(1, Ordering::Relaxed);
        let last = self.last_warn_ms.load(Ordering::Relaxed);
        let due = last == 0 || now_ms.saturating_sub(last) >= WARN_EVERY.as_millis() as u64;
        // One thread wins the slot; the others' refusals are counted in the next warning.
        if due
            && self
                .last_warn_ms
                .compare_exchange(last, now_ms.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let refused = self.unwarned.swap(0, Ordering::Relaxed);
            tracing::warn!(
                refused,
                open = self.open.get(),
                "connections refused at --max-connections (503): raise it or add capacity \
                 (at most one such line per 10 s)"
            );
        }
    }

    /// Register the gauge and the counter family (names without the `mbx_relay_` prefix).
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "connections_open",
            "Connections open on the public listener",
            self.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections of the public listener refused or cut off before being served, by reason",
            self.refused.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_warnings_are_rate_limited_and_the_gauge_follows_open_connections() {
        let m = ConnMetrics::new();
        let a = m.opened();
        let b = m.opened();
        assert_eq!(m.open_now(), 2);
        drop(a);
        assert_eq!(m.open_now(), 1);
        drop(b);
        m.warn_at_cap(1_000);
        assert_eq!(m.last_warn_ms.load(Ordering::Relaxed), 1_000);
        m.warn_at_cap(2_000);
        assert_eq!(m.last_warn_ms.load(Ordering::Relaxed), 1_000, "within 10 s");
        assert_eq!(m.unwarned.load(Ordering::Relaxed), 1);
        m.warn_at_cap(11_000);
        assert_eq!(m.last_warn_ms.load(Ordering::Relaxed), 11_000);
        assert_eq!(m.unwarned.load(Ordering::Relaxed), 0);
    }
}
