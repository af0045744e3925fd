//! `relay-tool`: what admins run against an mbx-relay store — online and offline backups,
//! verified restores, dumps, stats, the relay log, epoch rotation, relay key generation, and
//! revoking keys and purging queues.
//! While a relay runs, read-only commands and backups go through its owner-only admin socket
//! (`<store-dir>/admin.sock`); commands that change a directory store refuse to run beside it.
//! A PostgreSQL store (`--store postgres://...`) is also opened directly beside its relays
//! (`access`).

mod access;
mod backup;
mod deny;
mod epoch;
mod fail;
mod files;
mod hosts;
mod inspect;
mod invite;
mod progress;
mod restore;
mod revoke;
mod show;
mod stream_sum;
mod swap;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use fail::Failure;

/// What each exit code means for relay-tool's commands, after the scheme both binaries share.
const TOOL_CODES: &str = "\
  relay-tool, in detail:
  1  the store directory does not exist; permission denied (run relay-tool as the relay's user);
     the store's schema is newer than this tool; the store is damaged; the running relay
     answered with an error
  2  also: an unknown partition name, a bad --name, a reason over 200 characters, a backup FILE
     that exists (give --force)
  3  damaged backup at byte offset X (a record or the trailer fails its checksum); truncated
     backup; not an mbx-relay backup (wrong magic); backup format newer than this tool; trailer
     counts disagree with the records; backup made by another relay key (restore without
     --accept-other-key); a relay log (`log --verify`, or inside a backup with `verify`) whose
     hash chain does not verify: the message names the first entry that does not match
  4  store in use by pid N: restore and rotate-epoch need the relay stopped; backup, dump, stats,
     log, hosts, verify, revoke and purge go through its admin socket instead

STORE: --store-dir DIR (MBX_RELAY_STORE_DIR), or --store DIR|postgres://user@host:port/db
(MBX_RELAY_STORE), as `mbx-relay serve` takes them; with a PostgreSQL --store, --store-dir is
the relay's directory holding its admin socket (optional). A url's password is never printed.

Every error is printed on stderr as one line starting with \"relay-tool: \" and naming its cause.
With --json, a command's result is JSON on stdout (one object, or JSON lines for listings).";

/// The `--help` epilogue of every command: the shared exit codes, then relay-tool's detail.
fn exit_codes() -> String {
    format!("{}\n{TOOL_CODES}", mbx_relay::exit::HELP)
}

#[derive(Parser)]
#[command(name = "relay-tool", version = mbx_relay::cli::VERSION, about = "Admin tool for mbx-relay stores", after_help = exit_codes())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write one consistent backup of the store to FILE (safe while the relay runs).
    #[command(
        long_about = "Write one consistent snapshot of the store to FILE. While a relay runs, it is asked \
over its admin socket to stream the snapshot (it keeps serving); otherwise the store is opened here \
(a PostgreSQL store: one REPEATABLE READ snapshot beside its running relays). The file is the logical \
format 5 every backend restores, so a backup moves a relay between fjall and PostgreSQL. \
The data goes to FILE.tmp, is fsync'd and verified, and only then renamed to FILE. Prints the records \
per partition and the checksum, and records the backup in the relay log.",
        after_help = exit_codes()
    )]
    Backup {
        #[command(flatten)]
        store: access::StoreArgs,
        /// The backup file to write (by convention `*.mbxbak`); `-` streams it to stdout (the
        /// summary then goes to stderr).
        file: PathBuf,
        /// Replace FILE if it exists (without it, an existing FILE is refused, exit 2).
        #[arg(long)]
        force: bool,
        /// One JSON object: the file, how it was made, counts and checksum.
        #[arg(long)]
        json: bool,
    },
    /// Replace the store with the contents of a backup file (the relay must be stopped).
    #[command(
        long_about = "Restore a backup into --store-dir. Refuses while a relay holds the store. Verifies the \
whole file before touching anything, builds the new store beside the old one (DIR.restore-tmp-*) with a \
new epoch and a relay-log entry, copies relay.key into it, then swaps the directories atomically. The old \
store is kept as DIR.pre-restore-<UTC timestamp> unless --discard-old. A backup made by another relay \
key is refused unless --accept-other-key. With --store postgres://URL the target is a new, empty \
database: the whole restore is one transaction there, and a database that already holds a relay is \
refused (format 5 backups only). After a restore, start the relay: hosts see the new epoch, \
re-push what was not yet delivered and re-pull, so nothing accepted after the backup is lost.",
        after_help = exit_codes()
    )]
    Restore {
        /// Where to restore: a store directory (may not exist yet; `--store-dir` or `--store
        /// DIR`), or `--store postgres://...` naming a new, empty database.
        #[command(flatten)]
        store: access::StoreArgs,
        /// The backup file to restore.
        file: PathBuf,
        /// Remove the old store instead of keeping it as DIR.pre-restore-<timestamp>.
        #[arg(long)]
        discard_old: bool,
        /// Restore a backup made by another relay key than this store's.
        #[arg(long)]
        accept_other_key: bool,
        /// One JSON object: the backup's counts, the new epoch, the old store kept.
        #[arg(long)]
        json: bool,
    },
    /// Check a backup file offline (magic, format, every checksum and count); without FILE,
    /// check the store (`--store`/`--store-dir`): its schema, relay key and relay-log chain.
    #[command(after_help = exit_codes())]
    Verify {
        /// The backup file.
        file: Option<PathBuf>,
        #[command(flatten)]
        store: access::StoreArgs,
        /// One JSON object (the backup's or the store's figures and the relay-log verdict).
        #[arg(long)]
        json: bool,
    },
    /// Print the store's records (read-only; through the relay while it runs).
    #[command(after_help = exit_codes())]
    Dump {
        #[command(flatten)]
        store: access::StoreArgs,
        /// Only this partition (meta, enrolments, enc_ads, sender_lists, items, dedup, seqs,
        /// acked, usage, expiry, ops).
        #[arg(long)]
        partition: Option<String>,
        /// Include queued items' wire bytes (base64).
        #[arg(long)]
        with_wire: bool,
        /// JSON lines, one object per record (for scripts).
        #[arg(long)]
        json: bool,
    },
    /// The relay processes serving the store (a PostgreSQL store: every process on the
    /// database, with its address, version, start and last heartbeat; `stale` once it missed
    /// three heartbeats). A directory store keeps no rows: it has one process.
    #[command(after_help = exit_codes())]
    Status {
        #[command(flatten)]
        store: access::StoreArgs,
        /// JSON lines, one per process.
        #[arg(long)]
        json: bool,
    },
    /// Whole-store figures: epoch, keys, enrolments, queues, dedup rows, enc ads, disk size.
    #[command(after_help = exit_codes())]
    Stats {
        #[command(flatten)]
        store: access::StoreArgs,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Give the store a new epoch (a directory store's relay must be stopped; a PostgreSQL
    /// store is rotated beside its running relays, which take the new epoch); recorded in the
    /// relay log.
    #[command(after_help = exit_codes())]
    RotateEpoch {
        #[command(flatten)]
        store: access::StoreArgs,
        /// One JSON object: the old and the new epoch.
        #[arg(long)]
        json: bool,
    },
    /// The relay log (enrolments, rotations, backups, restores, epoch rotations, migrations),
    /// newest first; `--verify` recomputes its hash chain.
    #[command(
        long_about = "The relay log, newest first: every change to the store that is not mail, each entry \
hash-chained to the one before (SHA-256 over the previous hash and the entry's canonical bytes). \
Entries older than the relay's --log-retention (400d), and the oldest beyond 200,000, are dropped; \
the chain then starts from a checkpoint (the last dropped entry's seq and hash). With --verify, \
recompute the chain from the checkpoint and name the first entry that does not match (exit 3), \
else print how many entries verified.",
        after_help = exit_codes()
    )]
    Log {
        #[command(flatten)]
        store: access::StoreArgs,
        /// At most this many entries (1 to 1,000).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// JSON lines.
        #[arg(long)]
        json: bool,
        /// Recompute the hash chain instead of listing entries.
        #[arg(long)]
        verify: bool,
    },
    /// Generate a relay key (same output as `mbx-relay keygen`).
    #[command(after_help = exit_codes())]
    Keygen(mbx_relay::cli::KeygenArgs),
    /// One line per enrolment: fingerprint, name, account, enrolled, last seen (day), queue,
    /// enc ad and its age, revoked at (read-only; through the relay while it runs).
    #[command(after_help = exit_codes())]
    Hosts {
        #[command(flatten)]
        store: access::StoreArgs,
        /// Only hosts of this name (case-insensitive).
        #[arg(long)]
        name: Option<String>,
        /// Only revoked keys.
        #[arg(long)]
        revoked: bool,
        /// Only hosts last seen this long ago or longer (`30d`, `12h`; day resolution).
        #[arg(long, value_name = "DURATION", value_parser = relay_core::parse_duration)]
        idle_for: Option<std::time::Duration>,
        /// JSON lines, one object per enrolment.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a host key as a rotation revokes it; with --purge also drop its queue.
    #[command(
        long_about = "Revoke a host key: its hops answer 401, enrolling it again 403 REVOKED, its enc ads \
(v1 and v2) and its own sender allowlist go, other targets' allowlists drop it, pushes to it answer \
`target not enrolled`. With --purge its queued items are deleted too, and each envelope's sender is \
queued the relay-signed expiry notice (docs/protocol.md §4), in the same atomic batch; dedup tombstones stay. \
KEY is the base64 host key or a fingerprint (prefix of at least 4 hex digits) that exactly one \
enrolment has. Through the running relay's admin socket, else on the stopped store (the notices are \
signed with MBX_RELAY_KEY or <store-dir>/relay.key). Recorded in the relay log with your uid, the \
reason and the counts. A purge deletes at most 100,000 items (one batch).",
        after_help = exit_codes()
    )]
    Revoke {
        #[command(flatten)]
        store: access::StoreArgs,
        /// The host key (base64) or its fingerprint (prefix).
        key: String,
        /// Also delete its queued items (each envelope's sender gets an expiry notice).
        #[arg(long)]
        purge: bool,
        /// Why, for the relay log (at most 200 characters).
        #[arg(long, default_value = "")]
        reason: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Issue a single-use enrolment invite (for a relay run with `--enrol-authority invite`).
    #[command(
        long_about = "Issue a single-use enrolment invite and print its code once. A relay run with \
`--enrol-authority invite` enrols a new host key only when its enrol body's proof carries an unused, \
unexpired code ({\"invite\": \"CODE\"}); `mbx-relay host relay set URL --invite CODE` makes our host \
send it. The enrolment that uses the code redeems it in its own commit; a host already enrolled \
re-enrols without one. The store keeps only the code's SHA-256 (its first 8 bytes name the invite in \
the relay log). Through the running relay's admin socket, else on the store opened here. At most \
10,000 unexpired invites are stored; expired ones are deleted when the next is issued.",
        after_help = exit_codes()
    )]
    Invite {
        #[command(flatten)]
        store: access::StoreArgs,
        /// How long the code stays valid (`7d`, `12h`; at most 90d).
        #[arg(long, value_name = "DURATION", default_value = "7d", value_parser = relay_core::parse_duration)]
        expires: std::time::Duration,
        /// Whom it is for, for the relay log (at most 200 characters).
        #[arg(long, default_value = "")]
        note: String,
        /// One JSON object: the code, the invite's id and its expiry.
        #[arg(long)]
        json: bool,
    },
    /// Deny a host key or an accounts-service client (spec §8 revocation).
    #[command(
        long_about = "Add a deny-list entry, kept until --expires (at least 15 minutes, the longest \
account-token lifetime). --host KEY (base64 or fingerprint): the key may not enrol, and its enrolment \
is revoked at once (its hops are refused, its event streams and waiting pulls end, on every relay \
process sharing the store within a second). --client ID: account tokens naming this client_id are \
refused. Through the running relay's admin socket (the accounts service's authenticated way in), \
else on the store opened here.",
        after_help = exit_codes()
    )]
    Deny {
        #[command(flatten)]
        store: access::StoreArgs,
        /// The host key (base64) or its fingerprint (prefix).
        #[arg(long, value_name = "KEY")]
        host: Option<String>,
        /// The accounts service's client_id.
        #[arg(long, value_name = "ID")]
        client: Option<String>,
        /// How long the entry lasts (`24h`, `30d`; at least 15 minutes are kept).
        #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = relay_core::parse_duration)]
        expires: std::time::Duration,
        /// Why, for the relay log (at most 200 characters).
        #[arg(long, default_value = "")]
        note: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Drop a host's queue without revoking it (each envelope's sender gets an expiry notice).
    #[command(after_help = exit_codes())]
    Purge {
        #[command(flatten)]
        store: access::StoreArgs,
        /// The host key (base64) or its fingerprint (prefix).
        key: String,
        /// Why, for the relay log (at most 200 characters).
        #[arg(long, default_value = "")]
        reason: String,
        /// One JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(mbx_relay::cli_docs::ShellArg),
    /// Print the man page (roff), or write one page per command into --dir.
    Man(mbx_relay::cli_docs::DocsArgs),
}

impl Command {
    /// `--json` was given: a failure is printed as JSON on stdout too.
    fn json(&self) -> bool {
        match self {
            Command::Backup { json, .. }
            | Command::Restore { json, .. }
            | Command::Verify { json, .. }
            | Command::Dump { json, .. }
            | Command::Stats { json, .. }
            | Command::Status { json, .. }
            | Command::RotateEpoch { json, .. }
            | Command::Log { json, .. }
            | Command::Hosts { json, .. }
            | Command::Revoke { json, .. }
            | Command::Invite { json, .. }
            | Command::Deny { json, .. }
            | Command::Purge { json, .. } => *json,
            Command::Keygen(args) => args.json,
            Command::Completions(_) | Command::Man(_) => false,
        }
    }

    /// True for commands that may create store files or backups (every command that opens a
    /// store may make the engine write).
    fn writes_files(&self) -> bool {
        !matches!(
            self,
            Command::Verify { .. }
                | Command::Keygen { .. }
                | Command::Completions(_)
                | Command::Man(_)
        )
    }
}

fn main() -> ExitCode {
    use clap::CommandFactory as _;
    // A closed stdout (`relay-tool stats | jq` with a jq that failed) ends the command quietly.
    mbx_relay::exit::quiet_broken_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return mbx_relay::cli_docs::usage_error(&Cli::command(), &e),
    };
    match cli.command {
        Command::Completions(shell) => {
            return mbx_relay::cli_docs::completions(Cli::command(), shell.shell, "relay-tool")
        }
        Command::Man(args) => return mbx_relay::cli_docs::man(Cli::command(), &args),
        _ => {}
    }
    let json = cli.command.json();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if json {
                println!("{}", mbx_relay::exit::json_error(&f.msg, f.code as u8));
            }
            eprintln!("relay-tool: {}", f.msg);
            f.exit_code()
        }
    }
}

fn run(command: Command) -> Result<(), Failure> {
    if command.writes_files() {
        // Store files (the engine creates its own) and backups are owner-only, whatever the umask.
        relay_os::private::restrict_umask();
    }
    match command {
        Command::Backup {
            store,
            file,
            force,
            json,
        } => backup::run(&store.target()?, &file, force, json),
        Command::Restore {
            store,
            file,
            discard_old,
            accept_other_key,
            json,
        } => restore::run(&restore::Args {
            target: &store.target()?,
            file: &file,
            discard_old,
            accept_other_key,
            json,
        }),
        Command::Verify {
            file: Some(file),
            json,
            ..
        } => inspect::verify(&file, json),
        Command::Verify {
            file: None,
            store,
            json,
        } => inspect::verify_store(&store.target()?, json),
        Command::Dump {
            store,
            partition,
            with_wire,
            json,
        } => inspect::dump(&store.target()?, partition.as_deref(), with_wire, json),
        Command::Status { store, json } => inspect::status(&store.target()?, json),
        Command::Stats { store, json } => inspect::stats(&store.target()?, json),
        Command::RotateEpoch { store, json } => epoch::rotate(&store.target()?, json),
        Command::Log {
            store,
            verify: true,
            json,
            ..
        } => inspect::log_verify(&store.target()?, json),
        Command::Log {
            store,
            limit,
            json,
            verify: false,
        } => inspect::log(&store.target()?, limit, json),
        Command::Keygen(args) => {
            print!("{}", mbx_relay::cli::keygen_output(&args));
            Ok(())
        }
        Command::Completions(_) | Command::Man(_) => Ok(()),
        Command::Hosts {
            store,
            name,
            revoked,
            idle_for,
            json,
        } => hosts::run(&store.target()?, name.as_deref(), revoked, idle_for, json),
        Command::Revoke {
            store,
            key,
            purge,
            reason,
            json,
        } => revoke::run(
            &store.target()?,
            &mbx_relay::admin::revoke::Action {
                target: key,
                revoke: true,
                purge,
                reason,
            },
            json,
        ),
        Command::Invite {
            store,
            expires,
            note,
            json,
        } => invite::run(&store.target()?, expires, &note, json),
        Command::Deny {
            store,
            host,
            client,
            expires,
            note,
            json,
        } => deny::run(&store.target()?, host, client, expires, &note, json),
        Command::Purge {
            store,
            key,
            reason,
            json,
        } => revoke::run(
            &store.target()?,
            &mbx_relay::admin::revoke::Action {
                target: key,
                revoke: false,
                purge: true,
                reason,
            },
            json,
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    /// Help on every flag and command of the tree (clap's tree walked, not `--help` parsed).
    #[test]
    fn every_flag_and_command_has_help() {
        let missing = mbx_relay::cli_docs::undocumented(&super::Cli::command());
        assert!(
            missing.is_empty(),
            "without help, or a field name for a placeholder: {missing:?}"
        );
    }
}
