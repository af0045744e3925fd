//! The `mbx-relay` command line (its clap tree lives in the library so that tests walk it:
//! help on every flag, and `completions` / `man` are generated from it).

use clap::{Parser, Subcommand};

use crate::cli_docs::DocsArgs;
use crate::exit;
use crate::serve::args::ServeArgs;

/// `--version` of mbx-relay and relay-tool: the package version and the commit built from
/// (`build.rs`: git, else `MBX_RELAY_COMMIT`, else `unknown`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("MBX_RELAY_COMMIT"),
    ")"
);

/// Durable, untrusted store-and-forward relay for end-to-end-encrypted host-to-host mail.
#[derive(Debug, Parser)]
#[command(name = "mbx-relay", version = VERSION, about, after_help = exit::HELP)]
pub struct Cli {
    #[command(subcommand)]
    /// What to do.
    pub command: Command,
}

/// The commands of `mbx-relay`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the relay (HTTP) over its store.
    ///
    /// Byte counts take `50MiB`, `50M` (powers of 1024), `8MB` (of 1000) or a plain number of
    /// bytes; durations `2w`, `14d`, `90s`, `250ms`, `1h 30m` or a plain number of seconds.
    /// Every flag has an MBX_RELAY_* variable (the flag wins); an MBX_RELAY_* variable that
    /// names no flag is refused. `--check` validates the whole configuration without serving.
    /// Logs go to stderr, filtered by RUST_LOG (default `info`); `GET /metrics` and `GET /status`
    /// (the running settings, JSON) are served on --metrics-listen.
    #[command(after_help = exit::HELP)]
    Serve(Box<ServeArgs>),
    /// Print a new relay key (base64 seed, for MBX_RELAY_KEY or relay.key) and its fingerprint.
    #[command(after_help = exit::HELP)]
    Keygen(KeygenArgs),
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

/// Flags of `keygen` (`mbx-relay keygen` and `relay-tool keygen` alike).
#[derive(Debug, Clone, clap::Args)]
pub struct KeygenArgs {
    /// One JSON object: seed, public key, fingerprint.
    #[arg(long)]
    pub json: bool,
}

/// A new relay key as `keygen` prints it: `seed:`, `fingerprint:`, `public:` lines, or one JSON
/// object with those fields (both binaries print this).
pub fn keygen_output(args: &KeygenArgs) -> String {
    let key = relay_wire::keys::SigningKey::generate();
    if args.json {
        let v = serde_json::json!({
            "seed": key.seed_b64(),
            "public": key.public_b64(),
            "fingerprint": relay_wire::keys::fingerprint(&key.public()),
        });
        format!("{v}\n")
    } else {
        relay_core::keygen_text(&key)
    }
}
