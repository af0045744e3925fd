//! The `mbx-relay` command line (its clap tree lives in the library so that tests walk it:
//! help on every flag, and `completions` / `man` are generated from it).

use clap::{Parser, Subcommand};

use crate::cli_docs::DocsArgs;
use crate::exit;
use crate::serve::args::ServeArgs;

/// Durable, untrusted store-and-forward relay for end-to-end-encrypted host-to-host mail.
#[derive(Debug, Parser)]
#[command(name = "mbx-relay", version, about, after_help = exit::HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The commands of `mbx-relay`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay (HTTP) over its store.
    ///
    /// Byte counts take `50MiB`, `50M` (powers of 1024), `8MB` (of 1000) or a plain number of
    /// bytes; durations `2w`, `14d`, `90s`, `250ms`, `1h 30m` or a plain number of seconds.
    /// Every flag has an MBX_RELAY_* variable (the flag wins). `--check` validates the whole
    /// configuration without serving.
    #[command(after_help = exit::HELP)]
    Serve(Box<ServeArgs>),
    /// Print a new relay key (base64 seed, for MBX_RELAY_KEY or relay.key) and its fingerprint.
    #[command(after_help = exit::HELP)]
    Keygen,
    /// Exit 0 when the relay's `GET /health` answers 200 (container health checks).
    #[command(after_help = exit::HELP)]
    Health(crate::health_probe::HealthArgs),
    /// Host-side commands (sender outbox, receiver checkpoint, quarantine).
    Host(mbx_host::cli::HostArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(crate::cli_docs::ShellArg),
    /// Print the man page (roff), or write one page per command into --dir.
    Man(DocsArgs),
}
