//! What both binaries share about their command line: shell completions and man pages
//! generated from the clap tree (so they never drift from `--help`), and the one way a usage
//! error is printed (exit 2, naming the `MBX_RELAY_*` variable a bad value came from).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::exit;

/// `completions SHELL`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShellArg {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// `man [--dir DIR]`.
#[derive(Debug, Clone, clap::Args)]
pub struct DocsArgs {
    /// Write one page per command (`NAME.1`, `NAME-SUBCOMMAND.1`, ...) into this directory
    /// instead of printing the top page on stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Print the completion script of `cmd` for `shell` on stdout.
pub fn completions(mut cmd: clap::Command, shell: clap_complete::Shell, bin: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, bin, &mut out);
    match out.flush() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(bin, &format!("writing the completions: {e}")),
    }
}

/// Print the man page of `cmd`, or write every command's page into `args.dir`.
pub fn man(cmd: clap::Command, args: &DocsArgs) -> ExitCode {
    let bin = cmd.get_name().to_string();
    let written = match &args.dir {
        Some(dir) => std::fs::create_dir_all(dir).and_then(|()| clap_mangen::generate_to(cmd, dir)),
        None => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd)
                .render(&mut out)
                .and_then(|()| out.flush())
        }
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => failed(&bin, &format!("writing the man page: {e}")),
    }
}

fn failed(bin: &str, msg: &str) -> ExitCode {
    eprintln!("{bin}: {msg}");
    ExitCode::from(exit::FAILURE)
}

/// Print a clap error and answer its exit code: 0 for `--help`/`--version`, else
/// [`exit::USAGE`]. A bad value that came from an `MBX_RELAY_*` variable (the environment or
/// systemd's EnvironmentFile) says so: the operator looks for it there, not on a command line.
pub fn usage_error(cmd: &clap::Command, e: &clap::Error) -> ExitCode {
    if !e.use_stderr() {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let mut text = e.render().to_string();
    if let Some(clap::error::ContextValue::String(arg)) =
        e.get(clap::error::ContextKind::InvalidArg)
    {
        if let Some(var) = env_source_of(cmd, arg) {
            text = text.replacen(&format!("'{arg}'"), &format!("'{arg}' (from {var})"), 1);
        }
    }
    eprint!("{text}");
    ExitCode::from(exit::USAGE)
}

/// The variable that supplied `arg` (clap's `--flag <VALUE>` text) anywhere in `cmd`'s tree:
/// the flag has one, it is set, and the command line does not give the flag.
fn env_source_of(cmd: &clap::Command, arg: &str) -> Option<String> {
    let long = arg.strip_prefix("--")?.split([' ', '=']).next()?;
    let given =
        std::env::args().any(|a| a == format!("--{long}") || a.starts_with(&format!("--{long}=")));
    if given {
        return None;
    }
    find_env(cmd, long).filter(|var| std::env::var_os(var).is_some())
}

fn find_env(cmd: &clap::Command, long: &str) -> Option<String> {
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(long))
        .and_then(|a| a.get_env())
        .map(|v| v.to_string_lossy().into_owned())
        .or_else(|| cmd.get_subcommands().find_map(|s| find_env(s, long)))
}

/// Every argument in `cmd`'s tree that has no help text, as `command path --flag`, and every
/// flag whose value placeholder is its multi-word field name (clap's default: `<MAX_SENDER_ITEMS>`
/// where `<N>` or `<BYTES>` names the kind of value), as `command path --flag <PLACEHOLDER>` (a
/// test walks both binaries with it: help on every flag).
pub fn undocumented(cmd: &clap::Command) -> Vec<String> {
    let mut out = Vec::new();
    walk(cmd, cmd.get_name(), &mut out);
    out
}

fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        if a.get_help().is_none() && a.get_long_help().is_none() && id != "help" && id != "version"
        {
            let name = a
                .get_long()
                .map_or_else(|| id.to_string(), |l| format!("--{l}"));
            out.push(format!("{path} {name}"));
        }
        let placeholders = a
            .get_value_names()
            .filter(|_| a.get_action().takes_values());
        let field_named = placeholders
            .unwrap_or_default()
            .iter()
            .find(|v| v.contains('_'));
        if let (Some(long), Some(v)) = (a.get_long(), field_named) {
            out.push(format!("{path} --{long} <{v}>"));
        }
    }
    if cmd.get_about().is_none() && cmd.get_long_about().is_none() {
        out.push(format!("{path} (the command itself)"));
    }
    for sub in cmd.get_subcommands() {
        if sub.get_name() != "help" {
            walk(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
}
