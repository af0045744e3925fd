//! The connection layer's limits: the `--max-connections`, timeout, body-pace and body-share
//! flags of `mbx-relay serve`, their defaults, and the check that refuses settings which would
//! disable a protection.

use std::time::Duration;

use relay_core::{default_duration, parse_duration};

/// Default of `--max-connections`.
const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of `--max-connections-per-address`: a sixteenth of the default connection cap.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = DEFAULT_MAX_CONNECTIONS / 16;
/// Default of `--public-per-minute`.
const DEFAULT_PUBLIC_PER_MINUTE: u32 = 600;
/// Default of `--header-timeout`, as the flag's text ([`secs`] gives its value).
const DEFAULT_HEADER_TIMEOUT: &str = "20s";
/// Default of `--body-timeout`.
const DEFAULT_BODY_TIMEOUT: &str = "60s";
/// Default of `--idle-timeout`.
const DEFAULT_IDLE_TIMEOUT: &str = "10s";
/// Default of `--body-first-byte-timeout`.
const DEFAULT_FIRST_BYTE_TIMEOUT: &str = "5s";
/// Default of `--auth-failures-per-minute`.
const DEFAULT_AUTH_FAILURES_PER_MINUTE: u32 = 30;
/// Default of `--body-min-rate` (bytes per second; the flag's default text is `4KiB`, a test
/// keeps the two equal): far under what `--body-timeout` already asks of a full body (8 MiB in
/// 60 s), so it cuts stalls, not slow honest links.
const DEFAULT_BODY_MIN_RATE: u64 = 4096;
/// Default of `--body-budget-wait`.
const DEFAULT_BODY_BUDGET_WAIT: &str = "5s";

/// The value of a default duration text `<n>s`, so the flag's default and
/// [`GuardConfig::default`] come from one literal (see [`default_duration`]).
const fn secs(text: &str) -> Duration {
    default_duration(text)
}
/// The guard's limits (flags of `mbx-relay serve`, see [`GuardArgs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfig {
    /// Most connections open at once (`--max-connections`).
    pub max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) public_per_minute: u32,
    pub(crate) max_connections_per_address: usize,
    /// Request bodies (see [`BodyGuardArgs`]).
    pub body: BodyGuardConfig,
}

/// The limits on request bodies and failed authentications, per client address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyGuardConfig {
    /// Time allowed for a body's first byte (`--body-first-byte-timeout`).
    pub first_byte_timeout: Duration,
    /// Bytes per second a body must average after its first byte (with the first-byte timeout
    /// as slack).
    pub min_rate: u64,
    /// Request-body bytes held at once for one client address (`--max-body-bytes-per-address`).
    pub bytes_per_address: u64,
    /// Request-body bytes held at once for one hop key (`--max-body-bytes-per-key`).
    pub bytes_per_key: u64,
    /// Longest wait for room in the shared body budget.
    pub budget_wait: Duration,
    /// Failed hop authentications per client address per minute (`--auth-failures-per-minute`).
    pub auth_failures_per_minute: u32,
}

impl Default for BodyGuardConfig {
    /// The flags' defaults.
    fn default() -> Self {
        BodyGuardConfig {
            first_byte_timeout: const { secs(DEFAULT_FIRST_BYTE_TIMEOUT) },
            min_rate: DEFAULT_BODY_MIN_RATE,
            bytes_per_address: crate::http::body::DEFAULT_BODY_BYTES_PER_ADDRESS,
            bytes_per_key: crate::http::body::DEFAULT_BODY_BYTES_PER_KEY,
            budget_wait: const { secs(DEFAULT_BODY_BUDGET_WAIT) },
            auth_failures_per_minute: DEFAULT_AUTH_FAILURES_PER_MINUTE,
        }
    }
}

impl Default for GuardConfig {
    /// The flags' defaults.
    fn default() -> Self {
        GuardConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: const { secs(DEFAULT_HEADER_TIMEOUT) },
            body_timeout: const { secs(DEFAULT_BODY_TIMEOUT) },
            idle_timeout: const { secs(DEFAULT_IDLE_TIMEOUT) },
            public_per_minute: DEFAULT_PUBLIC_PER_MINUTE,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            body: BodyGuardConfig::default(),
        }
    }
}

/// Flags for the guard (flattened into `mbx-relay serve`'s flags).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connections")]
pub struct GuardArgs {
    /// Most connections served at once; one more is answered 503 and closed.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Time allowed for a request head, from when the relay waits for it.
    #[arg(long, env = "MBX_RELAY_HEADER_TIMEOUT", default_value = DEFAULT_HEADER_TIMEOUT, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) header_timeout: Duration,
    /// Time allowed for a request body after its head, and for a client to read a response.
    #[arg(long, env = "MBX_RELAY_BODY_TIMEOUT", default_value = DEFAULT_BODY_TIMEOUT, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) body_timeout: Duration,
    /// A connection silent this long while the relay waits for its next request is closed.
    #[arg(long, env = "MBX_RELAY_IDLE_TIMEOUT", default_value = DEFAULT_IDLE_TIMEOUT, value_parser = parse_duration, value_name = "DURATION")]
    pub(crate) idle_timeout: Duration,
    /// Requests per client address (IPv6: per /64 prefix) per minute to info, health, metrics and
    /// unknown paths.
    #[arg(long, value_name = "N", env = "MBX_RELAY_PUBLIC_PER_MINUTE", default_value_t = DEFAULT_PUBLIC_PER_MINUTE)]
    pub(crate) public_per_minute: u32,
    /// Most connections open at once from one client address (IPv6: per /64); one more is
    /// answered 429 and closed. Counts the socket address: behind a reverse proxy, the proxy.
    #[arg(long, value_name = "N", env = "MBX_RELAY_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)]
    pub(crate) max_connections_per_address: usize,
    #[command(flatten)]
    /// Request-body flags.
    pub body: BodyGuardArgs,
}

/// Flags for request bodies and failed authentications (part of [`GuardArgs`]).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Request bodies")]
pub struct BodyGuardArgs {
    /// Time allowed for the first byte of a request body, from when the relay starts reading it.
    #[arg(long, env = "MBX_RELAY_BODY_FIRST_BYTE_TIMEOUT", default_value = DEFAULT_FIRST_BYTE_TIMEOUT, value_parser = parse_duration, value_name = "DURATION")]
    pub body_first_byte_timeout: Duration,
    /// Bytes per second a request body must keep up after its first byte, over every window as
    /// long as --body-first-byte-timeout (bytes sent early buy no time later); a slower body is
    /// cut off with 400.
    #[arg(long, env = "MBX_RELAY_BODY_MIN_RATE", default_value = "4KiB", value_parser = relay_core::parse_bytes, value_name = "BYTES")]
    pub body_min_rate: u64,
    /// Request-body bytes held at once for one client address (IPv6: per /64); a body that needs
    /// more is answered 429. At least 8MiB (one full-size body).
    #[arg(long, env = "MBX_RELAY_MAX_BODY_BYTES_PER_ADDRESS", default_value = "32MiB", value_parser = relay_core::parse_bytes, value_name = "BYTES")]
    pub max_body_bytes_per_address: u64,
    /// Request-body bytes held at once for one hop key (whatever the addresses); a body that
    /// needs more is answered 429. At least 8MiB (one full-size body).
    #[arg(long, env = "MBX_RELAY_MAX_BODY_BYTES_PER_KEY", default_value = "32MiB", value_parser = relay_core::parse_bytes, value_name = "BYTES")]
    pub max_body_bytes_per_key: u64,
    /// Longest a request body waits for room in the shared 256 MiB body budget; then 503.
    #[arg(long, env = "MBX_RELAY_BODY_BUDGET_WAIT", default_value = DEFAULT_BODY_BUDGET_WAIT, value_parser = parse_duration, value_name = "DURATION")]
    pub body_budget_wait: Duration,
    /// Failed hop authentications per client address (IPv6: per /64) per minute; past it, calls
    /// with a hop from that address are answered 429 without being checked.
    #[arg(long, value_name = "N", env = "MBX_RELAY_AUTH_FAILURES_PER_MINUTE", default_value_t = DEFAULT_AUTH_FAILURES_PER_MINUTE)]
    pub(crate) auth_failures_per_minute: u32,
}

impl GuardArgs {
    /// The guard configuration.
    pub fn config(&self) -> GuardConfig {
        GuardConfig {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            public_per_minute: self.public_per_minute,
            max_connections_per_address: self.max_connections_per_address,
            body: BodyGuardConfig {
                first_byte_timeout: self.body.body_first_byte_timeout,
                min_rate: self.body.body_min_rate,
                bytes_per_address: self.body.max_body_bytes_per_address,
                bytes_per_key: self.body.max_body_bytes_per_key,
                budget_wait: self.body.body_budget_wait,
                auth_failures_per_minute: self.body.auth_failures_per_minute,
            },
        }
    }
}

impl GuardConfig {
    /// Refuse settings that would disable a protection.
    ///
    /// # Errors
    /// A message naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections > u32::MAX as usize >> 3 {
            return Err("--max-connections must be between 1 and 536870911".into());
        }
        for (d, flag) in [
            (self.header_timeout, "--header-timeout"),
            (self.body_timeout, "--body-timeout"),
            (self.idle_timeout, "--idle-timeout"),
            (self.body.first_byte_timeout, "--body-first-byte-timeout"),
            (self.body.budget_wait, "--body-budget-wait"),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be more than 0"));
            }
        }
        if self.public_per_minute == 0 {
            return Err("--public-per-minute must be at least 1".into());
        }
        if self.max_connections_per_address == 0 {
            return Err("--max-connections-per-address must be at least 1".into());
        }
        for (bytes, flag) in [
            (self.body.bytes_per_address, "--max-body-bytes-per-address"),
            (self.body.bytes_per_key, "--max-body-bytes-per-key"),
        ] {
            if bytes < crate::http::body::MAX_BODY as u64 {
                return Err(format!(
                    "{flag} must be at least {} (one full-size body)",
                    crate::http::body::MAX_BODY
                ));
            }
        }
        if self.body.min_rate == 0 {
            return Err("--body-min-rate must be at least 1".into());
        }
        if self.body.auth_failures_per_minute == 0 {
            return Err("--auth-failures-per-minute must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_default_to_the_default_config() {
        use clap::{Args as _, FromArgMatches as _};
        // Without the environment, which would otherwise supply values.
        let cmd = GuardArgs::augment_args(clap::Command::new("t")).mut_args(|a| a.env(None));
        let m = cmd.try_get_matches_from(["t"]).unwrap();
        let args = GuardArgs::from_arg_matches(&m).unwrap();
        assert_eq!(args.config(), GuardConfig::default());
        assert_eq!(secs("20s"), Duration::from_secs(20));
    }

    #[test]
    fn settings_that_disable_a_protection_are_refused() {
        assert!(GuardConfig::default().validate().is_ok());
        let bad = [
            GuardConfig {
                max_connections: 0,
                ..GuardConfig::default()
            },
            GuardConfig {
                header_timeout: Duration::ZERO,
                ..GuardConfig::default()
            },
            GuardConfig {
                body_timeout: Duration::ZERO,
                ..GuardConfig::default()
            },
            GuardConfig {
                idle_timeout: Duration::ZERO,
                ..GuardConfig::default()
            },
            GuardConfig {
                public_per_minute: 0,
                ..GuardConfig::default()
            },
            GuardConfig {
                max_connections_per_address: 0,
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    first_byte_timeout: Duration::ZERO,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    bytes_per_address: 1024,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    auth_failures_per_minute: 0,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    min_rate: 0,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    bytes_per_key: 1024,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    budget_wait: Duration::ZERO,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
        ];
        for c in bad {
            let e = c.validate().unwrap_err();
            assert!(e.starts_with("--"), "names the flag: {e}");
        }
    }
}
