//! One error type for every command: a message naming the cause and the exit code it maps to.

use std::path::Path;
use std::process::ExitCode;

use mbx_relay::admin::client::ClientError;
use relay_store::{BackupError, StoreError};

/// The documented exit codes (`mbx_relay::exit`, the scheme `mbx-relay` shares; listed in
/// `--help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// Bad command line, or a file in the way (backup without --force).
    Usage = mbx_relay::exit::USAGE as isize,
    /// The store or a file could not be read or written (missing directory, permission denied,
    /// damaged store, schema newer than this tool, relay answered an error).
    Store = mbx_relay::exit::FAILURE as isize,
    /// A backup file is damaged, truncated, not a backup, of a newer format, or was refused
    /// (made by another relay key); a relay log that does not verify.
    Backup = mbx_relay::exit::DATA as isize,
    /// A running relay holds the store (restore and rotate-epoch refuse then).
    InUse = mbx_relay::exit::IN_USE as isize,
}

/// A failed command.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: Code,
    pub msg: String,
}

impl Failure {
    pub(crate) fn new(code: Code, msg: impl Into<String>) -> Self {
        Failure {
            code,
            msg: msg.into(),
        }
    }

    /// An I/O failure while doing `what` to `path`.
    pub(crate) fn io(what: &str, path: &Path, e: &std::io::Error) -> Self {
        Failure::new(
            Code::Store,
            format!("{what} {}: {}", path.display(), describe_io(e)),
        )
    }

    /// Prefix the message with what we were doing.
    pub(crate) fn context(mut self, what: &str) -> Self {
        self.msg = format!("{what}: {}", self.msg);
        self
    }

    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code as u8)
    }
}

/// I/O errors in words an admin acts on ("permission denied", "no such file or directory").
pub(crate) fn describe_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => {
            "permission denied (run relay-tool as the relay's user)".to_string()
        }
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        _ => e.to_string(),
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        let code = match e {
            StoreError::Locked { .. } => Code::InUse,
            _ => Code::Store,
        };
        let msg = match &e {
            StoreError::Io { context, source } => format!("{context}: {}", describe_io(source)),
            _ => e.to_string(),
        };
        Failure::new(code, msg)
    }
}

impl From<BackupError> for Failure {
    fn from(e: BackupError) -> Self {
        match e {
            BackupError::Store(s) => s.into(),
            BackupError::Io { context, source } => {
                Failure::new(Code::Store, format!("{context}: {}", describe_io(&source)))
            }
            other => Failure::new(Code::Backup, other.to_string()),
        }
    }
}

impl From<ClientError> for Failure {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Io { context, source } => {
                Failure::new(Code::Store, format!("{context}: {}", describe_io(&source)))
            }
            other => Failure::new(Code::Store, other.to_string()),
        }
    }
}
