//! `mbx-relay serve` flags: every limit of docs/protocol.md §7 with its `MBX_RELAY_*` variable
//! (the flag wins over the variable).

use std::path::PathBuf;
use std::time::Duration;

use super::TrustProxy;
use crate::serve::ServeConfig;
use crate::store_open::StoreSpec;
use relay_core::config::{defaults as d, parse_duration, Limits};

/// Flags of `mbx-relay serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    #[arg(long, env = "MBX_RELAY_LISTEN", default_value = "127.0.0.1:8787")]
    pub listen: String,
    /// Private address for `GET /metrics` (e.g. `127.0.0.1:9187`); unset: metrics are not served.
    #[arg(long, env = "MBX_RELAY_METRICS_LISTEN")]
    pub(crate) metrics_listen: Option<String>,
    /// Store directory (created on first start; holds relay.key unless MBX_RELAY_KEY is set).
    #[arg(long, env = "MBX_RELAY_STORE_DIR", default_value = "./relay-data")]
    pub store_dir: PathBuf,
    /// The store backend (default: the directory `--store-dir`). A directory here takes the
    /// place of `--store-dir` (it then holds relay.key and the admin socket too).
    #[arg(long, env = "MBX_RELAY_STORE", value_parser = StoreSpec::parse)]
    pub store: Option<StoreSpec>,
    /// Take the client address from a proxy header: off, xff or cloudflare.
    #[arg(long, env = "MBX_RELAY_TRUST_PROXY", default_value = "off")]
    pub(crate) trust_proxy: TrustProxy,
    #[arg(long, env = "MBX_RELAY_MAX_ITEM_BYTES", default_value_t = d::MAX_ITEM_BYTES)]
    pub max_item_bytes: u64,
    #[arg(long, env = "MBX_RELAY_MAX_BATCH", default_value_t = d::MAX_BATCH)]
    pub max_batch: usize,
    #[arg(long, env = "MBX_RELAY_MAX_TARGETS", default_value_t = d::MAX_TARGETS)]
    pub max_targets: usize,
    #[arg(long, env = "MBX_RELAY_PUSHES_PER_MINUTE", default_value_t = d::PUSHES_PER_MINUTE)]
    pub pushes_per_minute: u32,
    #[arg(long, env = "MBX_RELAY_MAX_PULL", default_value_t = d::MAX_PULL)]
    pub max_pull: usize,
    #[arg(long, env = "MBX_RELAY_MAX_PULL_BYTES", default_value_t = d::MAX_PULL_BYTES)]
    pub max_pull_bytes: u64,
    /// Item retention (`14d`, `2h`, `90s`).
    #[arg(long, env = "MBX_RELAY_RETENTION", default_value = d::RETENTION, value_parser = parse_duration)]
    pub retention: Duration,
    #[arg(long, env = "MBX_RELAY_MAX_QUEUE_ITEMS", default_value_t = d::MAX_QUEUE_ITEMS)]
    pub max_queue_items: u64,
    #[arg(long, env = "MBX_RELAY_MAX_QUEUE_BYTES", default_value_t = d::MAX_QUEUE_BYTES)]
    pub max_queue_bytes: u64,
    #[arg(long, env = "MBX_RELAY_MAX_SENDER_ITEMS", default_value_t = d::MAX_SENDER_ITEMS)]
    pub max_sender_items: u64,
    #[arg(long, env = "MBX_RELAY_MAX_SENDER_BYTES", default_value_t = d::MAX_SENDER_BYTES)]
    pub max_sender_bytes: u64,
    #[arg(long, env = "MBX_RELAY_MAX_ACCOUNT_ITEMS", default_value_t = d::MAX_ACCOUNT_ITEMS)]
    pub max_account_items: u64,
    #[arg(long, env = "MBX_RELAY_MAX_ACCOUNT_BYTES", default_value_t = d::MAX_ACCOUNT_BYTES)]
    pub max_account_bytes: u64,
    #[arg(long, env = "MBX_RELAY_MAX_ENROLMENTS", default_value_t = d::MAX_ENROLMENTS)]
    pub max_enrolments: u64,
    #[arg(long, env = "MBX_RELAY_MAX_CHALLENGES", default_value_t = d::MAX_CHALLENGES)]
    pub max_challenges: usize,
    /// Challenge, enrol and rotate calls per client address (IPv6: per /64) per minute.
    #[arg(long, env = "MBX_RELAY_ENROL_PER_MINUTE", default_value_t = d::ENROL_PER_MINUTE)]
    pub enrol_per_minute: u32,
    /// Challenge, enrol and rotate calls per IPv4 /24 per minute (all its addresses together).
    #[arg(long, env = "MBX_RELAY_ENROL_PER_MINUTE_V4_24", default_value_t = d::ENROL_PER_MINUTE_V4_24)]
    pub enrol_per_minute_v4_24: u32,
    /// Challenge, enrol and rotate calls per IPv6 /48 per minute (all its /64s together).
    #[arg(long, env = "MBX_RELAY_ENROL_PER_MINUTE_V6_48", default_value_t = d::ENROL_PER_MINUTE_V6_48)]
    pub enrol_per_minute_v6_48: u32,
    #[arg(long, env = "MBX_RELAY_MAX_PER_NAME", default_value_t = d::MAX_PER_NAME)]
    pub max_per_name: usize,
    /// How often the retention sweep runs (`10m`).
    #[arg(long, env = "MBX_RELAY_SWEEP_INTERVAL", default_value = d::SWEEP_INTERVAL, value_parser = parse_duration)]
    pub sweep_interval: Duration,
    /// A stored heartbeat further than this from the clock rotates the epoch at startup (`10m`).
    #[arg(long, env = "MBX_RELAY_HEARTBEAT_STALE", default_value = d::HEARTBEAT_STALE, value_parser = parse_duration)]
    pub heartbeat_stale: Duration,
    /// Delete a live enrolment not seen (no hop by it, no push to it) for this long whose queue
    /// is empty (`90d`; `0` = never; at least `1d`).
    #[arg(long, env = "MBX_RELAY_ENROLMENT_IDLE", default_value = d::ENROLMENT_IDLE, value_parser = parse_duration)]
    pub enrolment_idle: Duration,
    /// An event stream (`GET /v2/relay/events`) ends cleanly this long after it began and the
    /// client reconnects (`1h`; more than 0).
    #[arg(long, env = "MBX_RELAY_MAX_STREAM_LIFETIME", default_value = d::MAX_STREAM_LIFETIME, value_parser = parse_duration)]
    pub max_stream_lifetime: Duration,
    /// Relay-log entries older than this are dropped, the chain kept from a checkpoint
    /// (`400d`; `0`: no age bound). The newest 200,000 entries are the hard cap regardless.
    #[arg(long, env = "MBX_RELAY_LOG_RETENTION", default_value = LOG_RETENTION_DEFAULT, value_parser = parse_duration)]
    pub log_retention: Duration,
    #[command(flatten)]
    pub guard: super::guard::GuardArgs,
    #[command(flatten)]
    pub tls: super::tls::TlsArgs,
}

/// `--log-retention`'s default: the keyspace's [`relay_store::DEFAULT_LOG_RETENTION_MS`]
/// (a test holds the two together).
const LOG_RETENTION_DEFAULT: &str = "400d";

impl ServeArgs {
    /// The serve configuration; the key comes from `MBX_RELAY_KEY` (read here, never logged).
    pub fn into_config(self) -> ServeConfig {
        let limits = Limits {
            max_item_bytes: self.max_item_bytes,
            max_batch: self.max_batch,
            max_targets: self.max_targets,
            pushes_per_minute: self.pushes_per_minute,
            max_pull: self.max_pull,
            max_pull_bytes: self.max_pull_bytes,
            retention: self.retention,
            max_queue_items: self.max_queue_items,
            max_queue_bytes: self.max_queue_bytes,
            max_sender_items: self.max_sender_items,
            max_sender_bytes: self.max_sender_bytes,
            max_account_items: self.max_account_items,
            max_account_bytes: self.max_account_bytes,
            max_enrolments: self.max_enrolments,
            max_challenges: self.max_challenges,
            enrol_per_minute: self.enrol_per_minute,
            enrol_per_minute_v4_24: self.enrol_per_minute_v4_24,
            enrol_per_minute_v6_48: self.enrol_per_minute_v6_48,
            max_per_name: self.max_per_name,
            sweep_interval: self.sweep_interval,
            heartbeat_stale: self.heartbeat_stale,
            enrolment_idle: self.enrolment_idle,
            max_stream_lifetime: self.max_stream_lifetime,
        };
        ServeConfig {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            store_dir: match &self.store {
                Some(StoreSpec::Dir(dir)) => dir.clone(),
                Some(StoreSpec::Postgres(_)) | None => self.store_dir.clone(),
            },
            store: self.store.unwrap_or(StoreSpec::Dir(self.store_dir)),
            trust_proxy: self.trust_proxy,
            limits,
            key_env: std::env::var(relay_core::key::KEY_ENV).ok(),
            guard: self.guard.config(),
            tls: self.tls,
            log_retention: relay_store::LogRetention {
                max_age_ms: u64::try_from(self.log_retention.as_millis()).unwrap_or(u64::MAX),
                ..relay_store::LogRetention::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags parsed from nothing, the environment ignored (it would supply values).
    fn defaults() -> ServeConfig {
        use clap::{Args as _, FromArgMatches as _};
        let cmd = ServeArgs::augment_args(clap::Command::new("t")).mut_args(|a| a.env(None));
        let m = cmd.try_get_matches_from(["t"]).unwrap();
        ServeArgs::from_arg_matches(&m).unwrap().into_config()
    }

    /// Every limit flag defaults to [`Limits::default`], every guard flag to the guard's
    /// default: one source of truth for both.
    #[test]
    fn every_flag_defaults_to_the_default_config() {
        let c = defaults();
        assert_eq!(c.limits, Limits::default());
        assert_eq!(c.guard, super::super::guard::GuardConfig::default());
        assert!(c.validate().is_ok());
    }

    /// The flag's default is the keyspace's default (one source of truth for both).
    #[test]
    fn log_retention_default_is_the_keyspace_default() {
        let d = parse_duration(LOG_RETENTION_DEFAULT).unwrap();
        assert_eq!(
            d.as_millis(),
            u128::from(relay_store::DEFAULT_LOG_RETENTION_MS)
        );
        assert_eq!(defaults().log_retention, {
            relay_store::LogRetention {
                max_age_ms: relay_store::DEFAULT_LOG_RETENTION_MS,
                ..relay_store::LogRetention::default()
            }
        });
    }
}
