//! The exit codes of `mbx-relay` and `relay-tool`: one scheme for both binaries, listed in
//! both `--help`s.

/// Success.
pub const SUCCESS: u8 = 0;
/// A failure while working: a port in use, the store or a file unreadable or damaged, I/O,
/// a relay that answered with an error or is unhealthy.
pub const FAILURE: u8 = 1;
/// A usage or configuration error: a bad flag, variable, file or key; nothing was changed.
pub const USAGE: u8 = 2;
/// A data check failed: a damaged, truncated or refused backup, a relay log whose hash chain
/// does not verify.
pub const DATA: u8 = 3;
/// The store is in use by a running relay (relay-tool commands that need it stopped).
pub const IN_USE: u8 = 4;

/// The one shape of a failure under `--json` (mbx-relay, relay-tool and `mbx-relay host` alike):
/// `{"error":"<the stderr line's message>","exit_code":N}` as one line on stdout, beside the
/// usual line on stderr, so a script reading stdout always gets JSON.
pub fn json_error(msg: &str, code: u8) -> String {
    serde_json::json!({ "error": msg, "exit_code": code }).to_string()
}

/// Let a closed stdout end the command quietly, as it ends `cat` or `grep`: killed by SIGPIPE
/// (the shell reports 141), no panic, no backtrace, no exit 101 (`relay-tool stats | jq` with
/// a `jq` that failed). Rust ignores SIGPIPE, so without this a write to the closed pipe panics
/// in `println!`. Only for commands that print and exit: the relay (`serve`) and the host
/// daemon keep ignoring it, so a peer that hangs up on one of their sockets is an error there,
/// never a kill; the admin-socket client sends with `MSG_NOSIGNAL` for the same reason.
pub fn quiet_broken_pipe() {
    // SAFETY: sets SIGPIPE's disposition to its default; called at the start of `main`, before
    // any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The `EXIT CODES` section of both binaries' `--help` (after_help).
pub const HELP: &str = "\
EXIT CODES (mbx-relay and relay-tool):
  0  success
  1  failure while working: a port in use, the store or a file cannot be read or written or is
     damaged, a disk or I/O failure, the running relay answered with an error (`health`:
     unhealthy)
  2  usage or configuration error: unknown command or flag, a bad value (flag or MBX_RELAY_*
     variable), a TLS pair or relay key refused, a file that exists (backup without --force);
     nothing was created or changed
  3  a data check failed: a damaged, truncated or refused backup, a relay log whose hash chain
     does not verify
  4  the store is in use by a running relay (relay-tool restore and rotate-epoch)";
