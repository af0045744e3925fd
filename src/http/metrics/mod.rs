//! `/metrics` in the Prometheus text format (0.0.4), built with prometheus-client: requests by
//! method, path pattern and status with latency histograms, refusals by reason (every reason
//! listed from the start, at 0, so a `rate()` alert has a series to read), connections open and
//! refused ([`conn`]), the relay's item and store figures (relay-core's metrics and
//! [`relay_state`]), the store backend's own counters (a collector the caller hands in: the
//! PostgreSQL pool's), a directory store's filesystem ([`disk`]), `mbx_relay_build_info` and
//! the standard `process_*` metrics ([`process`]).
//! Every label set is closed: `method` and `path` are a [`super::route::Route`]'s, never the
//! request's (an unmatched request counts as `method="other",path="other"`).
//! Served only on the private `--metrics-listen` address ([`super::private`]).

pub(crate) mod conn;
pub(crate) mod disk;
pub(crate) mod process;
pub(crate) mod relay_state;
pub(crate) mod store_cache;

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

use super::account::MemoryAccount;
use super::tls::Tls;
use relay_core::Relay;

/// The version and commit this binary was built from (`build.rs`).
pub(crate) const VERSION: &str = env!("CARGO_PKG_VERSION");
pub(crate) const COMMIT: &str = env!("MBX_RELAY_COMMIT");

/// Longest a scrape waits for fresh store figures before answering with the last ones.
const STORE_WAIT: Duration = Duration::from_millis(500);

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: &'static str,
    path: &'static str,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: &'static str,
    path: &'static str,
}

impl RouteLabels {
    /// The labels of a route's `METHOD /path` text; anything else is `other`, `other`.
    fn of(route: &'static str) -> RouteLabels {
        let (method, path) = route.split_once(' ').unwrap_or(("other", "other"));
        RouteLabels { method, path }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: &'static str,
    commit: &'static str,
}

/// Why a request was refused (the `reason` label of `mbx_relay_refusals_total`): a closed set
/// of fixed texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestRefusal {
    /// 429: the address's one-minute window for unauthenticated routes (`--public-per-minute`).
    PublicWindow,
    /// 429: the address's enrolment window (`--enrol-per-minute` and its /24, /48 windows).
    EnrolWindow,
    /// 429: the address's failed-authentication window (`--auth-failures-per-minute`).
    AuthFailureWindow,
    /// 429: the address's request-body bytes (`--max-body-bytes-per-address`).
    BodyPerAddress,
    /// 429: the key's request-body bytes (`--max-body-bytes-per-key`).
    BodyPerKey,
    /// 503: no room in the shared body budget within `--body-budget-wait`.
    BodyBudget,
    /// 413: the request body is over its cap.
    BodyTooLarge,
    /// 413 from a relay rule (a v1 item over its quota or size).
    TooLarge,
    /// 401: the hop failed (unknown, revoked or stale key, bad signature).
    BadHop,
    /// 401: an enrolment or rotation without a valid challenge signature.
    BadEnrolment,
    /// 401: an enc-key advertisement or sender list with a bad signature.
    BadSignature,
    /// 429 from a relay rule other than the windows above.
    TooManyOther,
}

impl RequestRefusal {
    /// Every reason, for listing all of them at 0.
    const ALL: [RequestRefusal; 12] = [
        RequestRefusal::PublicWindow,
        RequestRefusal::EnrolWindow,
        RequestRefusal::AuthFailureWindow,
        RequestRefusal::BodyPerAddress,
        RequestRefusal::BodyPerKey,
        RequestRefusal::BodyBudget,
        RequestRefusal::BodyTooLarge,
        RequestRefusal::TooLarge,
        RequestRefusal::BadHop,
        RequestRefusal::BadEnrolment,
        RequestRefusal::BadSignature,
        RequestRefusal::TooManyOther,
    ];

    fn label(self) -> &'static str {
        match self {
            RequestRefusal::PublicWindow => "public_window",
            RequestRefusal::EnrolWindow => "enrol_window",
            RequestRefusal::AuthFailureWindow => "auth_failure_window",
            RequestRefusal::BodyPerAddress => "body_per_address",
            RequestRefusal::BodyPerKey => "body_per_key",
            RequestRefusal::BodyBudget => "body_budget",
            RequestRefusal::BodyTooLarge => "body_too_large",
            RequestRefusal::TooLarge => "too_large",
            RequestRefusal::BadHop => "bad_hop",
            RequestRefusal::BadEnrolment => "bad_enrolment",
            RequestRefusal::BadSignature => "bad_signature",
            RequestRefusal::TooManyOther => "too_many_other",
        }
    }
}

/// The HTTP layer's metrics and the registry `/metrics` encodes.
pub(crate) struct HttpMetrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RouteLabels, Histogram>,
    refusals: Family<ReasonLabel, Counter>,
    /// The public listener's connections (shared with its accept loop).
    pub(crate) conn: Arc<conn::ConnMetrics>,
    /// Whole-store figures, read at most every few seconds.
    pub(crate) store: Arc<store_cache::StoreCache>,
    /// When the relay started serving.
    pub(crate) started: Instant,
}

impl HttpMetrics {
    /// The metrics of a relay, its body budget, its TLS side (if any), the store backend's own
    /// counters (`backend`, registered under `mbx_relay_`: the HTTP layer knows no backend) and
    /// a directory store's filesystem (`store_dir`).
    pub(crate) fn new(
        relay: &Arc<Relay>,
        bodies: &Arc<MemoryAccount>,
        tls: Option<Arc<Tls>>,
        backend: Box<dyn prometheus_client::collector::Collector>,
        store_dir: Option<std::path::PathBuf>,
    ) -> Self {
        let mut registry = Registry::with_labels(relay.metric_labels().into_iter());
        registry.register_collector(Box::new(process::ProcessCollector));
        let requests = Family::<RequestLabels, Counter>::default();
        let request_seconds = Family::<RouteLabels, Histogram>::new_with_constructor(
            relay_core::latency_histogram as fn() -> Histogram,
        );
        let refusals = Family::<ReasonLabel, Counter>::default();
        for why in RequestRefusal::ALL {
            let _ = refusals.get_or_create(&ReasonLabel {
                reason: why.label(),
            });
        }
        let conn = Arc::new(conn::ConnMetrics::new());
        let store = store_cache::StoreCache::new(relay.store().clone());
        {
            let ours = registry.sub_registry_with_prefix("mbx_relay");
            ours.register(
                "build",
                "The version and commit of this build (value 1)",
                Info::new(BuildLabels {
                    version: VERSION,
                    commit: COMMIT,
                }),
            );
            ours.register(
                "requests",
                "HTTP requests answered, by method, path pattern and status",
                requests.clone(),
            );
            ours.register(
                "request_seconds",
                "Time from a request's head to its answer, by method and path pattern (a held pull counts its wait)",
                request_seconds.clone(),
            );
            ours.register(
                "refusals",
                "Requests refused by the relay's guards and checks, by reason",
                refusals.clone(),
            );
            conn.register(ours);
            relay.metrics.register(ours);
            ours.register_collector(backend);
            if let Some(dir) = store_dir {
                ours.register_collector(Box::new(disk::StoreDisk { dir }));
            }
            ours.register_collector(Box::new(relay_state::RelayState {
                relay: relay.clone(),
                bodies: bodies.clone(),
                store: store.clone(),
                tls,
            }));
        }
        HttpMetrics {
            registry,
            requests,
            request_seconds,
            refusals,
            conn,
            store,
            started: Instant::now(),
        }
    }

    /// Count one answered request of `route` (its `METHOD /path` text) that took `took`.
    pub(crate) fn count(&self, route: &'static str, status: u16, took: Duration) {
        let RouteLabels { method, path } = RouteLabels::of(route);
        self.requests
            .get_or_create(&RequestLabels {
                method,
                path,
                status,
            })
            .inc();
        self.request_seconds
            .get_or_create(&RouteLabels { method, path })
            .observe(took.as_secs_f64());
    }

    /// Count one refused request.
    pub(crate) fn refused(&self, why: RequestRefusal) {
        self.refusals
            .get_or_create(&ReasonLabel {
                reason: why.label(),
            })
            .inc();
    }

    /// Every metric as Prometheus text (store figures at most [`STORE_WAIT`] late).
    pub(crate) async fn render(&self) -> String {
        let _ = self.store.get(STORE_WAIT).await;
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::warn!(error = %e, "metrics could not be encoded");
        }
        out
    }
}

/// The content type of [`HttpMetrics::render`]'s text.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
