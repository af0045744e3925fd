//! `relay-bench`: a load generator for any relay that speaks docs/protocol.md (module `load`):
//! push and drain throughput, latency percentiles, live-delivery latency. Its own crate, so
//! relay-tool (the admin commands) does not compile it; the benches of `benches/` drive it.

mod fail;
mod load;

use std::process::ExitCode;

use clap::Parser;

use fail::Code;

/// mimalloc, as in the relay: the generator runs one thread per sender (64 in the single-push
/// sweep), and glibc malloc's arenas and consolidation took a fifth of its CPU there, on the
/// cores the relay under test needs.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The exit codes, as `mbx-relay` and `relay-tool` number them (`mbx_relay::exit`).
const EXIT_CODES: &str = "\
EXIT CODES (as mbx-relay and relay-tool):
  0  success: every request of the run succeeded
  1  the relay could not be reached or answered an error, a request of the run failed (the
     report is printed first, with the errors by kind), or a file could not be written
  2  usage error: unknown option, missing argument, a value out of range";

#[derive(Parser)]
#[command(
    name = "relay-bench",
    version,
    about = "Measure a running relay's push and drain throughput (speaks only the wire protocol)",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(flatten)]
    args: load::BenchArgs,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { Code::Usage as u8 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match load::run(&cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            // The JSON error shape of mbx-relay and relay-tool, unless the report is out.
            if cli.args.json && !f.reported {
                println!("{}", mbx_relay::exit::json_error(&f.msg, f.code as u8));
            }
            eprintln!("relay-bench: {}", f.msg);
            f.exit_code()
        }
    }
}
