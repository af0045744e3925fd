//! The arguments of `mbx-relay host` (clap): the commands and their flags, read by `cli` (which
//! runs them), `local` (which hands them to a running daemon) and `daemon` (`host run`'s own).

use std::path::PathBuf;

use clap::{Args, Subcommand};

/// Arguments of `mbx-relay host`.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// The host's own store directory (keys, relay config, peers, outbox, inbox).
    #[arg(long, env = "MBX_HOST_DIR")]
    pub dir: PathBuf,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    /// What to do.
    pub command: HostCommand,
}

/// One host command.
#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Create the host: its Ed25519 host key and X25519 enc key (files 0600).
    Init {
        /// The host's name (what peers and the relay's listings show).
        #[arg(long)]
        name: String,
    },
    /// Relay configuration.
    #[command(subcommand)]
    Relay(RelayCommand),
    /// Pinned peers.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Queue a message for a pinned peer; the next `sync` seals and pushes it.
    Send {
        /// The pinned peer's name.
        #[arg(long)]
        to: String,
        /// The message's subject line.
        #[arg(long)]
        subject: String,
        /// Read the body from this file (or give --body).
        #[arg(long, conflicts_with = "body", required_unless_present = "body")]
        file: Option<PathBuf>,
        /// The body as text (or give --file).
        #[arg(long)]
        body: Option<String>,
    },
    /// Print this host's cloud key and its thumbprint (`{"cloud_pub","jkt"}`), making the key
    /// on first use: the accounts service binds the host's relay tokens to it.
    CloudKey,
    /// One pass: enrol if needed, publish enc ad and allowlist, push, pull, receive, ack, receipts.
    Sync,
    /// Received messages (`inbox show ID`: one message with its body).
    Inbox {
        /// `show ID`, or nothing for the list.
        #[command(subcommand)]
        show: Option<InboxCommand>,
    },
    /// Items the receiver refused, with their reasons.
    Quarantine,
    /// Outbox, relay-accepted rows and deadlines, received_through, epoch, alerts.
    Status,
    /// Rotate this host's key (or finish an interrupted rotation); the old key is kept as retired.
    Rotate,
    /// Check relay, keys, enrolment, enc ad, allowlist and clock; one line per check with a fix.
    Doctor,
    /// Run as a daemon: receive as mail arrives, push as `send` queues.
    Run(RunArgs),
}

/// `host inbox ...`.
#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// Print one received message with its body.
    Show {
        /// The message's id (as `inbox` lists it).
        id: String,
    },
}

/// `host relay ...`.
#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Use the relay at URL, pinning its key (trust on first use unless --key names its fingerprint).
    Set {
        /// The relay's base URL (`https://relay.example`).
        url: String,
        /// The relay key's fingerprint (`ab12-cd34-ef56-7890`), from the operator.
        #[arg(long)]
        key: Option<String>,
        /// Trust only this CA (PEM) for the https relay (kept for later syncs).
        #[arg(long, value_name = "FILE")]
        ca: Option<PathBuf>,
        /// Allow plain http to a non-loopback relay (pages and heads are unsigned: only on a
        /// trusted network path).
        #[arg(long)]
        insecure_http: bool,
        /// An invite code from the relay's operator (`relay-tool invite`), for a relay that
        /// admits invited hosts only: sent with the next enrolment, forgotten once it succeeds.
        #[arg(long, value_name = "CODE")]
        invite: Option<String>,
        /// A file holding the account token for a hosted relay (`--enrol-authority
        /// account-tokens`), bound to this host's cloud key (`mbx-relay host cloud-key`): read
        /// and sent, with the cloud-key certificate, at every enrolment.
        #[arg(long, value_name = "FILE", conflicts_with = "invite")]
        token_file: Option<PathBuf>,
    },
}

/// `host peer ...`.
#[derive(Debug, Subcommand)]
pub enum PeerCommand {
    /// Pin a peer host by name and Ed25519 public key (base64).
    Add {
        /// The name to know the peer by.
        name: String,
        /// The peer's Ed25519 host key (base64), as its `init` printed it.
        pubkey: String,
    },
    /// The peer rotated its key: pin NEWKEY (or the new key of a rotation record both keys
    /// signed), keep the old key as retired, move waiting rows, republish the allowlist.
    Rotate {
        /// The pinned peer's name.
        name: String,
        /// The peer's new host key (base64), or give --record.
        newkey: Option<String>,
        /// A rotation record file both keys signed (instead of NEWKEY).
        #[arg(long)]
        record: Option<PathBuf>,
    },
}

/// Arguments of `host run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// Seconds between pulls when the relay does not hold pulls (no `x-mbx-wait-max` header).
    #[arg(long, value_name = "SECONDS", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) poll_secs: u64,
}
