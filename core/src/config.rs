//! The relay's limits and timings (docs/protocol.md §7), with their defaults and the duration syntax
//! (`14d`, `90s`, `2h`, `10m`, `250ms`) the command line and environment use.

use std::time::Duration;

/// Every limit and timing of the relay. `Default` gives docs/protocol.md §7's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest wire item accepted in a push (bytes).
    pub max_item_bytes: u64,
    /// Most items in one push.
    pub max_batch: usize,
    /// Most targets of one item.
    pub max_targets: usize,
    /// Pushes one sender key may make per minute.
    pub pushes_per_minute: u32,
    /// Most items in one pull page.
    pub max_pull: usize,
    /// Most wire bytes in one pull page (at least one item is always served).
    pub max_pull_bytes: u64,
    /// How long an unacked item stays queued before the sweep expires it.
    pub retention: Duration,
    /// Most items queued for one target.
    pub max_queue_items: u64,
    /// Most bytes queued for one target.
    pub max_queue_bytes: u64,
    /// Most items one sender may hold in one target's queue (its share).
    pub max_sender_items: u64,
    /// Most bytes one sender may hold in one target's queue (its share).
    pub max_sender_bytes: u64,
    /// Most items queued for all hosts of one account together.
    pub max_account_items: u64,
    /// Most bytes queued for all hosts of one account together.
    pub max_account_bytes: u64,
    /// Most live enrolments the relay keeps (a bound on what anyone may enrol).
    pub max_enrolments: u64,
    /// Most enrolment challenges outstanding at once (a bound on memory).
    pub max_challenges: usize,
    /// Enrolment-class calls (challenge, enrol, rotate) per client address per minute.
    pub enrol_per_minute: u32,
    /// Enrolment-class calls per IPv4 /24 per minute (nested around `enrol_per_minute`).
    pub enrol_per_minute_v4_24: u32,
    /// Enrolment-class calls per IPv6 /48 per minute (nested around `enrol_per_minute`).
    pub enrol_per_minute_v6_48: u32,
    /// Most live enrolments a name may carry and still authenticate a v1 hop by name (more: crowded).
    pub max_per_name: usize,
    /// How often the sweep runs (expiry, notices, dedup pruning).
    pub sweep_interval: Duration,
    /// A process whose heartbeat is older than this is taken as stopped (start-up and `peers`).
    pub heartbeat_stale: Duration,
    /// A live enrolment not seen for this long whose queue is empty is deleted by the sweep
    /// (zero: never). See [`DEFAULT_ENROLMENT_IDLE`].
    pub enrolment_idle: Duration,
    /// An event stream ends cleanly this long after it began (the client reconnects), so no
    /// stream outlives what its hop proved by more than this.
    pub max_stream_lifetime: Duration,
}

/// The default of every limit (docs/protocol.md §7): the one source for [`Limits::default`] and
/// the `mbx-relay serve` flags (`default_value_t = defaults::X`; durations as the flag's text,
/// turned into a [`Duration`] by [`default_duration`] at compile time).
pub mod defaults {
    /// `--max-item-bytes`: the spec's 512 KiB.
    pub const MAX_ITEM_BYTES: u64 = 512 * 1024;
    /// `--max-batch`.
    pub const MAX_BATCH: usize = 200;
    /// `--max-targets`.
    pub const MAX_TARGETS: usize = 64;
    /// `--pushes-per-minute` per sender key.
    pub const PUSHES_PER_MINUTE: u32 = 120;
    /// `--max-pull` items per page.
    pub const MAX_PULL: usize = 500;
    /// `--max-pull-bytes` per page.
    pub const MAX_PULL_BYTES: u64 = 8 * 1024 * 1024;
    /// `--retention` of an unacked item.
    pub const RETENTION: &str = "14d";
    /// `--max-queue-items` per target.
    pub const MAX_QUEUE_ITEMS: u64 = 10_000;
    /// `--max-queue-bytes` per target.
    pub const MAX_QUEUE_BYTES: u64 = 50 * 1024 * 1024;
    /// `--max-sender-items` per sender in one queue.
    pub const MAX_SENDER_ITEMS: u64 = 2_000;
    /// `--max-sender-bytes` per sender in one queue.
    pub const MAX_SENDER_BYTES: u64 = 20 * 1024 * 1024;
    /// `--max-account-items` over an account's hosts.
    pub const MAX_ACCOUNT_ITEMS: u64 = 10_000;
    /// `--max-account-bytes` over an account's hosts.
    pub const MAX_ACCOUNT_BYTES: u64 = 50 * 1024 * 1024;
    /// `--max-enrolments` live at once.
    pub const MAX_ENROLMENTS: u64 = 100_000;
    /// `--max-challenges` outstanding at once.
    pub const MAX_CHALLENGES: usize = 10_000;
    /// `--enrol-per-minute` per client address.
    pub const ENROL_PER_MINUTE: u32 = 30;
    /// `--enrol-per-minute-v4-24` per IPv4 /24.
    pub const ENROL_PER_MINUTE_V4_24: u32 = 60;
    /// `--enrol-per-minute-v6-48` per IPv6 /48.
    pub const ENROL_PER_MINUTE_V6_48: u32 = 60;
    /// `--max-per-name`: the spec's 16.
    pub const MAX_PER_NAME: usize = 16;
    /// `--sweep-interval`.
    pub const SWEEP_INTERVAL: &str = "10m";
    /// `--heartbeat-stale`.
    pub const HEARTBEAT_STALE: &str = "10m";
    /// See [`super::DEFAULT_ENROLMENT_IDLE`].
    pub const ENROLMENT_IDLE: &str = "90d";
    /// `--max-stream-lifetime` of an event stream.
    pub const MAX_STREAM_LIFETIME: &str = "1h";
}

/// Idle enrolments expire after 90 days by default (issue 13): far beyond any host's ordinary
/// absence, and six times the default retention, so an idle host's queue has long expired
/// (and its senders were told) before its enrolment goes; yet a cap filled once by throwaway
/// keys frees itself within a quarter.
pub(crate) const DEFAULT_ENROLMENT_IDLE: Duration = default_duration(defaults::ENROLMENT_IDLE);
/// The shortest non-zero idle period: last seen has day resolution.
pub(crate) const MIN_ENROLMENT_IDLE: Duration = Duration::from_secs(24 * 3600);

/// The value of a default duration text (`<n>` followed by `s`, `m`, `h` or `d`), so a flag's
/// default and the matching `Default` come from one literal. Only used in constants: a malformed
/// text fails the build.
pub const fn default_duration(text: &str) -> Duration {
    let b = text.as_bytes();
    assert!(b.len() >= 2, "a default duration is `<n><s|m|h|d>`");
    let unit: u64 = match b[b.len() - 1] {
        b's' => 1,
        b'm' => 60,
        b'h' => 3_600,
        b'd' => 86_400,
        _ => panic!("a default duration is `<n><s|m|h|d>`"),
    };
    let mut n = 0u64;
    let mut i = 0;
    while i < b.len() - 1 {
        assert!(
            b[i].is_ascii_digit(),
            "a default duration is `<n><s|m|h|d>`"
        );
        n = n * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    Duration::from_secs(n * unit)
}

/// How long a challenge stays valid (docs/protocol.md §3).
pub(crate) const CHALLENGE_LIFETIME: Duration = Duration::from_secs(300);
/// How often the heartbeat is written (docs/protocol.md §6).
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_secs(30);
/// Tests only: a heartbeat period in milliseconds instead of [`HEARTBEAT_EVERY`] (undocumented
/// for operators; a test of the leader lease passing cannot wait three 30 s periods).
pub(crate) const HEARTBEAT_TEST_ENV: &str = "MBX_RELAY_TEST_HEARTBEAT_MS";

/// The heartbeat period in force: [`HEARTBEAT_EVERY`] unless [`HEARTBEAT_TEST_ENV`] says.
pub(crate) fn heartbeat_every() -> Duration {
    static HB: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *HB.get_or_init(|| {
        std::env::var(HEARTBEAT_TEST_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map_or(HEARTBEAT_EVERY, Duration::from_millis)
    })
}
/// Dedup rows outlive their items by this much beyond retention (docs/protocol.md §4).
pub(crate) const DEDUP_GRACE: Duration = Duration::from_secs(7 * 24 * 3600);

impl Default for Limits {
    fn default() -> Self {
        use defaults as d;
        Limits {
            max_item_bytes: d::MAX_ITEM_BYTES,
            max_batch: d::MAX_BATCH,
            max_targets: d::MAX_TARGETS,
            pushes_per_minute: d::PUSHES_PER_MINUTE,
            max_pull: d::MAX_PULL,
            max_pull_bytes: d::MAX_PULL_BYTES,
            retention: const { default_duration(d::RETENTION) },
            max_queue_items: d::MAX_QUEUE_ITEMS,
            max_queue_bytes: d::MAX_QUEUE_BYTES,
            max_sender_items: d::MAX_SENDER_ITEMS,
            max_sender_bytes: d::MAX_SENDER_BYTES,
            max_account_items: d::MAX_ACCOUNT_ITEMS,
            max_account_bytes: d::MAX_ACCOUNT_BYTES,
            max_enrolments: d::MAX_ENROLMENTS,
            max_challenges: d::MAX_CHALLENGES,
            enrol_per_minute: d::ENROL_PER_MINUTE,
            enrol_per_minute_v4_24: d::ENROL_PER_MINUTE_V4_24,
            enrol_per_minute_v6_48: d::ENROL_PER_MINUTE_V6_48,
            max_per_name: d::MAX_PER_NAME,
            sweep_interval: const { default_duration(d::SWEEP_INTERVAL) },
            heartbeat_stale: const { default_duration(d::HEARTBEAT_STALE) },
            enrolment_idle: DEFAULT_ENROLMENT_IDLE,
            max_stream_lifetime: const { default_duration(d::MAX_STREAM_LIFETIME) },
        }
    }
}

impl Limits {
    /// The quota set handed to the store's commit.
    pub fn quotas(&self) -> relay_store::Quotas {
        relay_store::Quotas {
            max_queue_items: self.max_queue_items,
            max_queue_bytes: self.max_queue_bytes,
            max_sender_items: self.max_sender_items,
            max_sender_bytes: self.max_sender_bytes,
            max_account_items: self.max_account_items,
            max_account_bytes: self.max_account_bytes,
        }
    }

    /// The nested per-address windows of challenge, enrol and rotate.
    pub(crate) fn enrol_windows(&self) -> crate::rate::NestedLimits {
        crate::rate::NestedLimits {
            address: self.enrol_per_minute,
            v4_24: self.enrol_per_minute_v4_24,
            v6_48: self.enrol_per_minute_v6_48,
        }
    }

    /// The idle period after which enrolments expire, in ms (`None`: never).
    pub(crate) fn enrolment_idle_ms(&self) -> Option<u64> {
        (!self.enrolment_idle.is_zero())
            .then(|| u64::try_from(self.enrolment_idle.as_millis()).unwrap_or(u64::MAX))
    }

    /// Retention in milliseconds.
    pub fn retention_ms(&self) -> u64 {
        u64::try_from(self.retention.as_millis()).unwrap_or(u64::MAX)
    }

    /// Retention in days as `info` reports it (fractional when it is not a whole number of days).
    pub fn retention_days(&self) -> f64 {
        self.retention.as_secs_f64() / 86_400.0
    }

    /// Refuse limits that would make the relay useless or unbounded.
    ///
    /// # Errors
    /// A message naming the first bad limit.
    pub fn validate(&self) -> Result<(), String> {
        let positive: [(&str, u64); 19] = [
            ("max-item-bytes", self.max_item_bytes),
            ("max-batch", self.max_batch as u64),
            ("max-targets", self.max_targets as u64),
            ("pushes-per-minute", u64::from(self.pushes_per_minute)),
            ("max-pull", self.max_pull as u64),
            ("max-pull-bytes", self.max_pull_bytes),
            ("retention", self.retention_ms()),
            ("max-queue-items", self.max_queue_items),
            ("max-queue-bytes", self.max_queue_bytes),
            ("max-sender-items", self.max_sender_items),
            ("max-sender-bytes", self.max_sender_bytes),
            ("max-account-items", self.max_account_items),
            ("max-account-bytes", self.max_account_bytes),
            ("max-enrolments", self.max_enrolments),
            ("max-challenges", self.max_challenges as u64),
            ("enrol-per-minute", u64::from(self.enrol_per_minute)),
            (
                "enrol-per-minute-v4-24",
                u64::from(self.enrol_per_minute_v4_24),
            ),
            (
                "enrol-per-minute-v6-48",
                u64::from(self.enrol_per_minute_v6_48),
            ),
            ("max-per-name", self.max_per_name as u64),
        ];
        for (name, v) in positive {
            if v == 0 {
                return Err(format!("--{name} must be greater than 0"));
            }
        }
        if self.sweep_interval.is_zero() {
            return Err("--sweep-interval must be greater than 0".into());
        }
        if self.heartbeat_stale.is_zero() {
            return Err("--heartbeat-stale must be greater than 0".into());
        }
        if self.max_stream_lifetime.is_zero() {
            return Err("--max-stream-lifetime must be greater than 0".into());
        }
        if !self.enrolment_idle.is_zero() && self.enrolment_idle < MIN_ENROLMENT_IDLE {
            return Err("--enrolment-idle must be 0 (never) or at least 1d".into());
        }
        Ok(())
    }
}

/// Parse a duration flag or variable: a plain integer is seconds (as it always was); with a
/// unit, humantime's syntax (`14d`, `2w`, `90s`, `10m`, `250ms`, `1h 30m`).
///
/// # Errors
/// A message quoting the value and giving examples.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let bad = || format!("bad duration {s:?}: expected e.g. 2w, 14d, 2h, 10m, 90s or 500ms");
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let n: u64 = t.parse().map_err(|_| bad())?;
        return n
            .checked_mul(1_000)
            .map(Duration::from_millis)
            .ok_or_else(bad);
    }
    let d = humantime::parse_duration(t).map_err(|_| bad())?;
    // Kept to what a u64 of milliseconds holds (the store's unit for every period).
    u64::try_from(d.as_millis()).map_err(|_| bad())?;
    Ok(d)
}

/// Parse a byte-count flag or variable: a plain integer, or one with a unit: `K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB` (powers of 1024), `KB`, `MB`, `GB` (powers of 1000), `B`.
///
/// # Errors
/// A message quoting the value and giving examples.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let bad = || format!("bad byte count {s:?}: expected e.g. 524288, 512KiB, 50MiB, 50M or 8MB");
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.len() > 20 {
        return Err(bad());
    }
    let n: u64 = num.parse().map_err(|_| bad())?;
    let per: u64 = match unit.trim() {
        "" | "B" => 1,
        "K" | "Ki" | "KiB" => 1 << 10,
        "M" | "Mi" | "MiB" => 1 << 20,
        "G" | "Gi" | "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return Err(bad()),
    };
    n.checked_mul(per).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(
            parse_duration("14d").unwrap(),
            Duration::from_secs(14 * 86_400)
        );
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("2h").unwrap(), Duration::from_secs(7_200));
        assert_eq!(parse_duration("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(
            parse_duration("2w").unwrap(),
            Duration::from_secs(14 * 86_400)
        );
        assert_eq!(
            parse_duration("1h 30m").unwrap(),
            Duration::from_secs(5_400)
        );
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5_400));
        for bad in ["", "d", "-1s", "99999999999999999999d", "5x", "1.5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn byte_counts_parse_with_binary_and_decimal_units() {
        assert_eq!(parse_bytes("524288").unwrap(), 524_288);
        assert_eq!(parse_bytes("50MiB").unwrap(), 50 << 20);
        assert_eq!(parse_bytes("50M").unwrap(), 50 << 20);
        assert_eq!(parse_bytes("8MB").unwrap(), 8_000_000);
        assert_eq!(parse_bytes("512KiB").unwrap(), 512 << 10);
        assert_eq!(parse_bytes("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_bytes(" 7 B ").unwrap(), 7);
        for bad in ["", "MiB", "-1", "1.5M", "5x", "99999999999GiB", "1TiB"] {
            assert!(parse_bytes(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_follow_protocol_and_validate() {
        let l = Limits::default();
        assert_eq!(l.retention_days(), 14.0);
        assert!(l.validate().is_ok());
        let half_day = Limits {
            retention: Duration::from_secs(43_200),
            ..Limits::default()
        };
        assert_eq!(half_day.retention_days(), 0.5);
        assert!(Limits {
            max_batch: 0,
            ..Limits::default()
        }
        .validate()
        .is_err());
        assert_eq!(l.enrolment_idle_ms(), Some(90 * 86_400_000));
        let never = Limits {
            enrolment_idle: Duration::ZERO,
            ..Limits::default()
        };
        assert!(never.validate().is_ok());
        assert_eq!(never.enrolment_idle_ms(), None);
        assert!(Limits {
            enrolment_idle: Duration::from_secs(3600),
            ..Limits::default()
        }
        .validate()
        .is_err());
    }
}
