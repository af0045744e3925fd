//! `mbx-relay serve` flags: every limit of docs/protocol.md §7 with its `MBX_RELAY_*` variable
//! (the flag wins over the variable).

use std::path::PathBuf;
use std::time::Duration;

use super::ServeConfig;
use crate::http::TrustProxy;
use crate::store_open::StoreSpec;
use relay_core::{defaults as d, parse_bytes, parse_duration, Limits};

/// The `--help` groups of `serve`'s flags (the guard's and TLS's are theirs).
const HEAD_WHERE: &str = "Listeners and store";
const HEAD_ITEMS: &str = "Items and pulls";
const HEAD_QUOTAS: &str = "Quotas and caps";
const HEAD_RATES: &str = "Rate limits";
const HEAD_TIMES: &str = "Periods";

/// Flags of `mbx-relay serve`. Byte counts take `50MiB`, `50M`, `8MB` or a plain integer;
/// durations `2w`, `14d`, `90s`, `250ms` or a plain integer of seconds.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Check the whole configuration (flags, variables, files, TLS pair, relay key, store
    /// reachable) and exit 0, or 2 naming the first problem; nothing is created or served.
    #[arg(long)]
    pub check: bool,
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    #[arg(long, value_name = "ADDR", env = "MBX_RELAY_LISTEN", default_value = "127.0.0.1:8787", help_heading = HEAD_WHERE)]
    pub listen: String,
    /// Private address for `GET /metrics` (e.g. `127.0.0.1:9187`); unset: metrics are not served.
    #[arg(long, value_name = "ADDR", env = "MBX_RELAY_METRICS_LISTEN", help_heading = HEAD_WHERE)]
    pub(crate) metrics_listen: Option<String>,
    /// Store directory (created on first start; holds relay.key unless MBX_RELAY_KEY is set).
    #[arg(long, value_name = "DIR", env = "MBX_RELAY_STORE_DIR", default_value = "./relay-data", help_heading = HEAD_WHERE)]
    pub store_dir: PathBuf,
    /// The store: a directory, or `postgres://user@host:port/db` (default: the directory
    /// --store-dir). A directory here takes the place of --store-dir (it then holds relay.key
    /// and the admin socket too).
    #[arg(long, value_name = "URL", env = "MBX_RELAY_STORE", value_parser = StoreSpec::parse, help_heading = HEAD_WHERE)]
    pub store: Option<StoreSpec>,
    /// Take the client address from a proxy header: off, xff or cloudflare.
    #[arg(long, value_name = "MODE", env = "MBX_RELAY_TRUST_PROXY", default_value = "off", help_heading = HEAD_WHERE)]
    pub(crate) trust_proxy: TrustProxy,
    /// Largest item (sealed body) accepted, in bytes.
    #[arg(long, env = "MBX_RELAY_MAX_ITEM_BYTES", default_value = "512KiB", value_parser = parse_bytes, value_name = "BYTES", help_heading = HEAD_ITEMS)]
    pub max_item_bytes: u64,
    /// Most items in one push.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_BATCH", default_value_t = d::MAX_BATCH, help_heading = HEAD_ITEMS)]
    pub max_batch: usize,
    /// Most target hosts of one item.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_TARGETS", default_value_t = d::MAX_TARGETS, help_heading = HEAD_ITEMS)]
    pub max_targets: usize,
    /// Most items one pull returns.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_PULL", default_value_t = d::MAX_PULL, help_heading = HEAD_ITEMS)]
    pub max_pull: usize,
    /// Most item bytes one pull returns.
    #[arg(long, env = "MBX_RELAY_MAX_PULL_BYTES", default_value = "8MiB", value_parser = parse_bytes, value_name = "BYTES", help_heading = HEAD_ITEMS)]
    pub max_pull_bytes: u64,
    /// Item retention: a queued item older than this expires and its sender is told.
    #[arg(long, env = "MBX_RELAY_RETENTION", default_value = d::RETENTION, value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD_ITEMS)]
    pub retention: Duration,
    /// Pushes per sender host key per minute.
    #[arg(long, value_name = "N", env = "MBX_RELAY_PUSHES_PER_MINUTE", default_value_t = d::PUSHES_PER_MINUTE, help_heading = HEAD_RATES)]
    pub pushes_per_minute: u32,
    /// Most items queued for one host.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_QUEUE_ITEMS", default_value_t = d::MAX_QUEUE_ITEMS, help_heading = HEAD_QUOTAS)]
    pub max_queue_items: u64,
    /// Most bytes queued for one host.
    #[arg(long, env = "MBX_RELAY_MAX_QUEUE_BYTES", default_value = "50MiB", value_parser = parse_bytes, value_name = "BYTES", help_heading = HEAD_QUOTAS)]
    pub max_queue_bytes: u64,
    /// Most items one sender has queued at the relay (all its targets together).
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_SENDER_ITEMS", default_value_t = d::MAX_SENDER_ITEMS, help_heading = HEAD_QUOTAS)]
    pub max_sender_items: u64,
    /// Most bytes one sender has queued at the relay (all its targets together).
    #[arg(long, env = "MBX_RELAY_MAX_SENDER_BYTES", default_value = "20MiB", value_parser = parse_bytes, value_name = "BYTES", help_heading = HEAD_QUOTAS)]
    pub max_sender_bytes: u64,
    /// Most items queued for one account (all its hosts together).
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_ACCOUNT_ITEMS", default_value_t = d::MAX_ACCOUNT_ITEMS, help_heading = HEAD_QUOTAS)]
    pub max_account_items: u64,
    /// Most bytes queued for one account (all its hosts together).
    #[arg(long, env = "MBX_RELAY_MAX_ACCOUNT_BYTES", default_value = "50MiB", value_parser = parse_bytes, value_name = "BYTES", help_heading = HEAD_QUOTAS)]
    pub max_account_bytes: u64,
    /// Most live enrolments; past it, enrolling answers 503 (a warning is logged at 90 %).
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_ENROLMENTS", default_value_t = d::MAX_ENROLMENTS, help_heading = HEAD_QUOTAS)]
    pub max_enrolments: u64,
    /// Most enrolment challenges outstanding at once.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_CHALLENGES", default_value_t = d::MAX_CHALLENGES, help_heading = HEAD_QUOTAS)]
    pub max_challenges: usize,
    /// Challenge, enrol and rotate calls per client address (IPv6: per /64) per minute.
    #[arg(long, value_name = "N", env = "MBX_RELAY_ENROL_PER_MINUTE", default_value_t = d::ENROL_PER_MINUTE, help_heading = HEAD_RATES)]
    pub enrol_per_minute: u32,
    /// Challenge, enrol and rotate calls per IPv4 /24 per minute (all its addresses together).
    #[arg(long, value_name = "N", env = "MBX_RELAY_ENROL_PER_MINUTE_V4_24", default_value_t = d::ENROL_PER_MINUTE_V4_24, help_heading = HEAD_RATES)]
    pub enrol_per_minute_v4_24: u32,
    /// Challenge, enrol and rotate calls per IPv6 /48 per minute (all its /64s together).
    #[arg(long, value_name = "N", env = "MBX_RELAY_ENROL_PER_MINUTE_V6_48", default_value_t = d::ENROL_PER_MINUTE_V6_48, help_heading = HEAD_RATES)]
    pub enrol_per_minute_v6_48: u32,
    /// Most live enrolments sharing one host name.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_PER_NAME", default_value_t = d::MAX_PER_NAME, help_heading = HEAD_QUOTAS)]
    pub max_per_name: usize,
    /// How often the retention sweep runs.
    #[arg(long, env = "MBX_RELAY_SWEEP_INTERVAL", default_value = d::SWEEP_INTERVAL, value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD_TIMES)]
    pub sweep_interval: Duration,
    /// A stored heartbeat further than this from the clock rotates the epoch at startup.
    #[arg(long, env = "MBX_RELAY_HEARTBEAT_STALE", default_value = d::HEARTBEAT_STALE, value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD_TIMES)]
    pub heartbeat_stale: Duration,
    /// Delete a live enrolment not seen (no hop by it, no push to it) for this long whose queue
    /// is empty (`0` = never; at least `1d`).
    #[arg(long, env = "MBX_RELAY_ENROLMENT_IDLE", default_value = d::ENROLMENT_IDLE, value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD_TIMES)]
    pub enrolment_idle: Duration,
    /// An event stream (`GET /v2/relay/events`) ends cleanly this long after it began and the
    /// client reconnects (more than 0).
    #[arg(long, env = "MBX_RELAY_MAX_STREAM_LIFETIME", default_value = d::MAX_STREAM_LIFETIME, value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD_TIMES)]
    pub max_stream_lifetime: Duration,
    /// Relay-log entries older than this are dropped, the chain kept from a checkpoint
    /// (`0`: no age bound). The newest 200,000 entries are the hard cap regardless.
    #[arg(long, env = "MBX_RELAY_LOG_RETENTION", default_value = LOG_RETENTION_DEFAULT, value_parser = parse_duration, value_name = "DURATION", help_heading = HEAD_TIMES)]
    pub log_retention: Duration,
    /// Who may enrol: `challenge` (anyone who answers the host-key challenge), `allowlist`
    /// (only the keys in --enrol-allowlist), `invite` (only hosts presenting an unused
    /// `relay-tool invite` code in the enrol body's `proof`) or `account-tokens` (only hosts
    /// presenting a host-bound token of --token-issuer).
    #[arg(long, value_name = "KIND", env = "MBX_RELAY_ENROL_AUTHORITY", default_value = "challenge", value_parser = clap::value_parser!(relay_core::AuthorityKind), help_heading = HEAD_WHERE)]
    pub enrol_authority: relay_core::AuthorityKind,
    /// The allow-list of `--enrol-authority allowlist`: one host key (base64) per line, `#`
    /// comments; reloaded when it changes and on SIGHUP.
    #[arg(long, env = "MBX_RELAY_ENROL_ALLOWLIST", value_name = "FILE", help_heading = HEAD_WHERE)]
    pub enrol_allowlist: Option<PathBuf>,
    #[command(flatten)]
    /// Account-token flags.
    pub tokens: super::token_args::TokenArgs,
    #[command(flatten)]
    /// Connection and body guard flags.
    pub guard: crate::http::conn::GuardArgs,
    #[command(flatten)]
    /// TLS flags.
    pub tls: crate::http::tls::TlsArgs,
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
            key_env: std::env::var(relay_core::KEY_ENV).ok(),
            guard: self.guard.config(),
            tls: self.tls,
            enrol_authority: self.enrol_authority,
            enrol_allowlist: self.enrol_allowlist,
            tokens: self.tokens,
            log_retention: relay_store::LogRetention {
                max_age_ms: u64::try_from(self.log_retention.as_millis()).unwrap_or(u64::MAX),
                ..relay_store::LogRetention::default()
            },
        }
    }
}

/// The `MBX_RELAY_*` variables that are not `serve` flags and are still ours: the relay key, the
/// build's commit (`build.rs`) and the binary path `packaging/install-cli-docs` takes.
const OTHER_VARS: &[&str] = &[relay_core::KEY_ENV, "MBX_RELAY_COMMIT", "MBX_RELAY_BIN"];
/// Test hooks (`MBX_RELAY_TEST_*`) read by test builds and the test harness.
const TEST_VARS: &str = "MBX_RELAY_TEST_";

/// Refuse an `MBX_RELAY_*` variable among `names` that names no setting (a misspelling in the
/// environment file would otherwise be ignored silently), with the nearest known name.
///
/// # Errors
/// One line naming every unknown variable, each with its did-you-mean when one is close.
pub fn refuse_unknown_vars(
    names: impl IntoIterator<Item = std::ffi::OsString>,
) -> Result<(), String> {
    use clap::Args as _;
    let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
    let known: Vec<String> = cmd
        .get_arguments()
        .filter_map(|a| a.get_env().map(|v| v.to_string_lossy().into_owned()))
        .chain(OTHER_VARS.iter().map(|v| (*v).to_string()))
        .collect();
    let mut unknown: Vec<String> = names
        .into_iter()
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.starts_with("MBX_RELAY_") && !n.starts_with(TEST_VARS))
        .filter(|n| !known.contains(n))
        .map(|n| match nearest(&n, &known) {
            Some(k) => format!("{n} (did you mean {k}?)"),
            None => n,
        })
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    unknown.sort();
    Err(format!(
        "unknown variable{} {}: no setting has this name; correct or remove it (`mbx-relay serve \
         --help` lists every MBX_RELAY_* variable)",
        if unknown.len() == 1 { "" } else { "s" },
        unknown.join(", ")
    ))
}

/// The known name closest to `name` by edit distance, if it is close (a typo, not another word).
fn nearest<'a>(name: &str, known: &'a [String]) -> Option<&'a str> {
    let most = (name.len() / 4).max(2);
    known
        .iter()
        .map(|k| (edit_distance(name, k), k))
        .filter(|(d, _)| *d <= most)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.as_str())
}

/// Levenshtein distance over bytes (variable names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let b = b.as_bytes();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.bytes().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let up = row[j + 1];
            row[j + 1] = (diag + usize::from(ca != *cb)).min(up + 1).min(row[j] + 1);
            diag = up;
        }
    }
    row[b.len()]
}

/// `msg` (an error naming flags) with, after each flag whose value came from its variable,
/// ` (from MBX_RELAY_X)` (unless the message names that variable already): the operator then
/// looks in the environment file, not the command line.
pub fn name_env_source(msg: &str, matches: &clap::ArgMatches) -> String {
    use clap::Args as _;
    let cmd = ServeArgs::augment_args(clap::Command::new("serve"));
    let mut out = msg.to_string();
    for arg in cmd.get_arguments() {
        let (Some(long), Some(var)) = (arg.get_long(), arg.get_env()) else {
            continue;
        };
        let from_env = matches!(
            matches.value_source(arg.get_id().as_str()),
            Some(clap::parser::ValueSource::EnvVariable)
        );
        if from_env && !out.contains(&*var.to_string_lossy()) {
            out = mark_flag(&out, &format!("--{long}"), &var.to_string_lossy());
        }
    }
    out
}

/// Put ` (from VAR)` after the first whole-word `flag` in `msg` (not after a longer flag it
/// begins, e.g. `--enrol-per-minute` in `--enrol-per-minute-v4-24`).
fn mark_flag(msg: &str, flag: &str, var: &str) -> String {
    let mut from = 0;
    while let Some(i) = msg[from..].find(flag).map(|i| i + from) {
        let end = i + flag.len();
        let whole = msg[end..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '-'));
        if whole {
            return format!("{} (from {var}){}", &msg[..end], &msg[end..]);
        }
        from = end;
    }
    msg.to_string()
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
        assert_eq!(c.guard, crate::http::conn::GuardConfig::default());
        assert!(c.validate().is_ok());
    }

    #[test]
    fn an_error_names_the_variable_after_the_whole_flag_only() {
        let m = mark_flag(
            "--enrol-per-minute-v4-24 must be at least --enrol-per-minute",
            "--enrol-per-minute",
            "MBX_RELAY_ENROL_PER_MINUTE",
        );
        assert_eq!(
            m,
            "--enrol-per-minute-v4-24 must be at least --enrol-per-minute (from MBX_RELAY_ENROL_PER_MINUTE)"
        );
    }

    #[test]
    fn an_unknown_variable_is_refused_with_the_nearest_name_and_known_ones_pass() {
        let vars = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let e = refuse_unknown_vars(vars(&[
            "MBX_RELAY_LISTN",
            "MBX_RELAY_MAX_QUEUE_ITEM",
            "PATH",
        ]))
        .unwrap_err();
        assert!(
            e.contains("MBX_RELAY_LISTN (did you mean MBX_RELAY_LISTEN?)"),
            "{e}"
        );
        assert!(
            e.contains("MBX_RELAY_MAX_QUEUE_ITEM (did you mean MBX_RELAY_MAX_QUEUE_ITEMS?)"),
            "{e}"
        );
        let far = refuse_unknown_vars(vars(&["MBX_RELAY_SOMETHING_ELSE_ENTIRELY"])).unwrap_err();
        assert!(!far.contains("did you mean"), "{far}");
        refuse_unknown_vars(vars(&[
            "MBX_RELAY_LISTEN",
            "MBX_RELAY_KEY",
            "MBX_RELAY_TLS_CERT",
            "MBX_RELAY_MAX_CONNECTIONS",
            "MBX_RELAY_TEST_HEARTBEAT_MS",
            "MBX_RELAYED",
        ]))
        .unwrap();
    }

    /// Every variable the shipped environment file names is one `serve` takes (so uncommenting
    /// a line there is never refused as unknown).
    #[test]
    fn every_variable_of_the_shipped_environment_file_is_known() {
        let text = include_str!("../../packaging/mbx-relay.env");
        let names: Vec<std::ffi::OsString> = text
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("MBX_RELAY_"))
            .map(std::ffi::OsString::from)
            .collect();
        assert!(names.len() > 10, "{names:?}");
        refuse_unknown_vars(names).unwrap();
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
