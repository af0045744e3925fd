//! The generator's error: a message naming the cause and the exit code it maps to.

use std::path::Path;
use std::process::ExitCode;

/// The exit codes `--help` lists: the scheme `mbx-relay` and `relay-tool` share
/// (`mbx_relay::exit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// Bad command line.
    Usage = mbx_relay::exit::USAGE as isize,
    /// The relay could not be reached or answered an error, a request of the run failed, or a
    /// file could not be written.
    Store = mbx_relay::exit::FAILURE as isize,
}

/// A failed run.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) code: Code,
    pub(crate) msg: String,
    /// The report was printed before this failure (requests of the run failed): with `--json`
    /// stdout already holds the one JSON document, so no error object follows it.
    pub(crate) reported: bool,
}

impl Failure {
    pub(crate) fn new(code: Code, msg: impl Into<String>) -> Self {
        Failure {
            code,
            msg: msg.into(),
            reported: false,
        }
    }

    /// An I/O failure while doing `what` to `path`.
    pub(crate) fn io(what: &str, path: &Path, e: &std::io::Error) -> Self {
        Failure::new(Code::Store, format!("{what} {}: {e}", path.display()))
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code as u8)
    }
}
