//! The `mbx-relay` command: `serve` runs the relay, `keygen` prints a new relay key, `health`
//! probes a running relay, `host ...` runs the host side, `completions` and `man` print the
//! shell completions and the man page.

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _};
use mbx_relay::cli::{Cli, Command};
use mbx_relay::exit;
use mbx_relay::serve::args::ServeArgs;

/// mimalloc, tuned in `mbx_relay::memory` (why: see there).
#[global_allocator]
static GLOBAL: mbx_relay::memory::RelayAlloc = mbx_relay::memory::RelayAlloc;

fn main() -> ExitCode {
    mbx_relay::memory::tune_allocator();
    let matches = match Cli::command().try_get_matches() {
        Ok(m) => m,
        Err(e) => return mbx_relay::cli_docs::usage_error(&Cli::command(), &e),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return mbx_relay::cli_docs::usage_error(&Cli::command(), &e),
    };
    // Commands that print and exit end quietly on a closed stdout; the relay and the host
    // daemon serve sockets and keep SIGPIPE ignored.
    let serves = match &cli.command {
        Command::Serve(_) => true,
        Command::Host(h) => matches!(h.command, mbx_host::cli::HostCommand::Run(_)),
        _ => false,
    };
    if !serves {
        exit::quiet_broken_pipe();
    }
    match cli.command {
        Command::Serve(args) => {
            let serve_matches = matches.subcommand_matches("serve");
            serve(*args, serve_matches)
        }
        Command::Host(args) => mbx_host::cli::run(args),
        Command::Health(args) => match mbx_relay::health_probe::probe(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("mbx-relay: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Keygen(args) => {
            print!("{}", mbx_relay::cli::keygen_output(&args));
            ExitCode::SUCCESS
        }
        Command::Completions(shell) => {
            mbx_relay::cli_docs::completions(Cli::command(), shell.shell, "mbx-relay")
        }
        Command::Man(args) => mbx_relay::cli_docs::man(Cli::command(), &args),
    }
}

fn serve(args: ServeArgs, matches: Option<&clap::ArgMatches>) -> ExitCode {
    init_logging();
    let check = args.check;
    let config = args.into_config();
    // Every error names its MBX_RELAY_* variable when the value came from the environment.
    let name_source = |e: &str| match matches {
        Some(m) => mbx_relay::serve::args::name_env_source(e, m),
        None => e.to_string(),
    };
    let checked = mbx_relay::serve::args::refuse_unknown_vars(std::env::vars_os().map(|(k, _)| k))
        .and_then(|()| config.validate());
    if let Err(e) = checked {
        // A configuration error, before anything is opened.
        eprintln!("mbx-relay: {}", name_source(&e));
        return ExitCode::from(exit::USAGE);
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .on_thread_park(mbx_relay::memory::collect_idle_thread)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("mbx-relay: cannot start the runtime: {e}");
            return ExitCode::from(exit::FAILURE);
        }
    };
    if check {
        return match rt.block_on(mbx_relay::serve::check(&config)) {
            Ok(lines) => {
                for l in lines {
                    println!("{l}");
                }
                println!("configuration ok");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("mbx-relay: {}", name_source(&e.to_string()));
                ExitCode::from(e.exit_code())
            }
        };
    }
    mbx_relay::memory::spawn_trimmer(mbx_relay::memory::TRIM_INTERVAL);
    match rt.block_on(mbx_relay::serve::run_serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, on stderr (journald keeps it); not also as a log line.
            eprintln!("mbx-relay: {}", name_source(&e.to_string()));
            ExitCode::from(e.exit_code())
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
