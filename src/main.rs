//! The `mbx-relay` command: `serve` runs the relay, `keygen` prints a new relay key, `health`
//! probes a running relay, `host ...` runs the host side.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mbx_relay::http::args::ServeArgs;

/// mimalloc, tuned in `mbx_relay::memory` (why: see there).
#[global_allocator]
static GLOBAL: mbx_relay::memory::RelayAlloc = mbx_relay::memory::RelayAlloc;

/// Durable, untrusted store-and-forward relay for end-to-end-encrypted host-to-host mail.
#[derive(Debug, Parser)]
#[command(name = "mbx-relay", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the relay (HTTP) over its store directory.
    Serve(Box<ServeArgs>),
    /// Print a new relay key (base64 seed, for MBX_RELAY_KEY or relay.key) and its fingerprint.
    Keygen,
    /// Exit 0 when the relay's `GET /health` answers 200 (container health checks).
    Health(mbx_relay::http::health_probe::HealthArgs),
    /// Host-side commands (sender outbox, receiver checkpoint, quarantine).
    Host(mbx_host::cli::HostArgs),
}

fn main() -> ExitCode {
    mbx_relay::memory::tune_allocator();
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(*args),
        Command::Host(args) => mbx_host::cli::run(args),
        Command::Health(args) => match mbx_relay::http::health_probe::probe(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mbx-relay: unhealthy: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Keygen => {
            let key = relay_wire::keys::SigningKey::generate();
            print!("{}", relay_core::key::keygen_text(&key));
            ExitCode::SUCCESS
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    init_logging();
    let config = args.into_config();
    if let Err(e) = config.validate() {
        // A usage error, before anything is opened: clap's exit code for bad flags.
        eprintln!("mbx-relay: {e}");
        return ExitCode::from(2);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(mbx_relay::memory::collect_idle_thread)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mbx-relay: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    mbx_relay::memory::spawn_trimmer(mbx_relay::memory::TRIM_INTERVAL);
    match rt.block_on(mbx_relay::serve::run_serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("mbx-relay: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr; `RUST_LOG` filters (default `info`, with the storage engine's own chatter
/// at `warn`). Colours only on a terminal.
fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fjall=warn,lsm_tree=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
