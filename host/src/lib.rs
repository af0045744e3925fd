//! The host side of the relay protocol (spec §3, §4, §5, §9, §10): a durable sender outbox, a
//! receiver checkpoint with quarantine, delivery receipts, and the `mbx-relay host ...` commands.
//! The host keeps its own state in its own store directory on the same engine as the relay (fjall).
//!
//! Modules: [`identity`] (key files), [`store`] (durable state), [`client`] (signed HTTP to the
//! relay), [`message`] (envelopes and receipts this host builds), [`enc_ad`] (the v2 enc-key ad:
//! ours and the check of a peer's), [`enrol`] (enrolment and publication), [`sender`] (push and accept checks), [`receiver`] (pull, receive, checkpoint, ack),
//! [`sync`] (one pass), [`cli`] (commands; their flags in `args`, the answers a daemon shares in
//! `mailbox`), [`hostdir`] (the `--dir` directory: made by `init`,
//! required owner-only by the rest), [`rotate`] (own key rotation), [`retired`] (peers'
//! retired keys), [`explain`] (why a row waits), [`doctor`] (checks with fixes), [`daemon`]
//! (`host run`: passes as mail arrives), with [`watch`] (its long-poll), [`local`] (its socket
//! for `send`, the read commands and doctor) and [`daemon_log`] (its timestamped log lines); [`trace`] (opt-in stage timestamps for latency benches).
//!
//! Layering: `mbx-host` builds on `relay-wire` and `relay-os` only; it never links the server
//! (`mbx-relay`), the relay's rules (`relay-core`) or the relay's store crates (Cargo.toml).

pub(crate) mod args;
pub mod cli;
pub mod client;
pub(crate) mod cloud_key;
pub(crate) mod daemon;
pub(crate) mod daemon_log;
pub(crate) mod doctor;
pub(crate) mod enc_ad;
pub(crate) mod enrol;
pub(crate) mod explain;
pub(crate) mod hostdir;
pub(crate) mod identity;
pub mod local;
pub(crate) mod mailbox;
pub mod message;
pub(crate) mod receiver;
pub(crate) mod retired;
pub(crate) mod rotate;
pub mod sender;
pub(crate) mod store;
pub(crate) mod sync;
pub mod trace;
pub mod trust;
pub(crate) mod watch;

/// Every host failure, with a message a user can act on. Never contains key material or bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// Bad input from the user (exit code 2).
    Usage(String),
    /// The host's own store or key files.
    Store(String),
    /// The relay could not be reached or its answer was lost (retryable).
    Network(String),
    /// The relay answered something this host cannot use.
    Relay(String),
    /// The relay presents another key than the pinned one: relay use stops until confirmed.
    RelayKeyChanged {
        /// The relay's URL.
        url: String,
        /// Fingerprint of the key this host pinned.
        pinned_fp: String,
        /// Fingerprint of the key the relay presents now.
        offered_fp: String,
        /// The `relay set URL --key FP` command (with `--dir`) that confirms the new key.
        confirm: String,
    },
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::Usage(m) | HostError::Store(m) | HostError::Relay(m) => write!(f, "{m}"),
            HostError::Network(m) => write!(f, "relay unreachable: {m}"),
            HostError::RelayKeyChanged {
                url,
                pinned_fp,
                offered_fp,
                confirm,
            } => write!(
                f,
                "the relay at {url} now presents key {offered_fp}, but {pinned_fp} is pinned; relay use \
                 is stopped. If the operator confirms the new key, run: {confirm}"
            ),
        }
    }
}

impl std::error::Error for HostError {}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
