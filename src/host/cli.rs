//! `mbx-relay host ...`: the host commands (init, relay set, peer add, send, sync, inbox,
//! quarantine, status). Argument parsing only; the work is done by the host library.

use std::path::PathBuf;
use std::process::ExitCode;

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
    pub command: HostCommand,
}

/// One host command.
#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Create the host: its Ed25519 host key and X25519 enc key (files 0600).
    Init {
        #[arg(long)]
        name: String,
    },
    /// Relay configuration.
    #[command(subcommand)]
    Relay(RelayCommand),
    /// Pinned peers.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Queue a sealed message for a pinned peer (pushed by the next `sync`).
    Send {
        #[arg(long)]
        to: String,
        #[arg(long)]
        subject: String,
        #[arg(long, conflicts_with = "body", required_unless_present = "body")]
        file: Option<PathBuf>,
        #[arg(long)]
        body: Option<String>,
    },
    /// One pass: enrol if needed, publish enc ad and allowlist, push, pull, receive, ack.
    Sync,
    /// Received messages.
    Inbox,
    /// Items the receiver refused, with their reasons.
    Quarantine,
    /// Outbox, relay-accepted rows and deadlines, received_through, epoch, alerts.
    Status,
}

/// `host relay ...`.
#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Use the relay at URL, pinning its key (trust on first use unless --key names its fingerprint).
    Set {
        url: String,
        #[arg(long)]
        key: Option<String>,
    },
}

/// `host peer ...`.
#[derive(Debug, Subcommand)]
pub enum PeerCommand {
    /// Pin a peer host by name and Ed25519 public key (base64).
    Add { name: String, pubkey: String },
}

/// Run one host command; the exit code is 0 on success, 1 on a failure, 2 on bad usage.
pub fn run(args: HostArgs) -> ExitCode {
    let _ = args;
    eprintln!("mbx-relay host: not yet implemented");
    ExitCode::from(2)
}
