//! The error every store operation can give, and the `Result` alias.

use std::path::PathBuf;

/// Every error a store operation can give. Messages name the cause and never contain key material
/// or wire bytes.
#[derive(Debug)]
pub enum StoreError {
    /// Another process holds the store's lock file.
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's process id, when the lock file names one.
        pid: Option<u32>,
    },
    /// The store directory does not exist (and `create` was false).
    Missing(PathBuf),
    /// The store was written by a newer binary.
    SchemaTooNew {
        /// The store's schema.
        found: u32,
        /// The newest schema this build reads.
        supported: u32,
    },
    /// The store is pinned to another relay public key (fingerprints only, never keys).
    RelayKeyMismatch {
        /// Fingerprint of the key the store is pinned to.
        stored_fp: String,
        /// Fingerprint of the key this start was given.
        given_fp: String,
    },
    /// A file or record that is not ours or is damaged.
    Corrupt(String),
    /// An I/O failure, with what we were doing.
    Io {
        /// What the store was doing.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The engine failed (includes failed fsync: the operation is NOT durable).
    Engine(String),
    /// The store was closed or its writer stopped.
    Closed,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Locked { path, pid: Some(pid) } => {
                write!(f, "store {} is in use by pid {pid}", path.display())
            }
            StoreError::Locked { path, pid: None } => {
                write!(f, "store {} is in use by another process", path.display())
            }
            StoreError::Missing(p) => write!(f, "store directory {} does not exist", p.display()),
            StoreError::SchemaTooNew { found, supported } => write!(
                f,
                "store schema version {found} is newer than this binary supports ({supported}); upgrade mbx-relay"
            ),
            StoreError::RelayKeyMismatch { stored_fp, given_fp } => write!(
                f,
                "store belongs to relay key {stored_fp}, refusing to open it with key {given_fp}"
            ),
            StoreError::Corrupt(why) => write!(f, "store is damaged: {why}"),
            StoreError::Io { context, source } => write!(f, "{context}: {source}"),
            StoreError::Engine(why) => write!(f, "storage engine error: {why}"),
            StoreError::Closed => write!(f, "store is closed"),
        }
    }
}

impl std::error::Error for StoreError {}

/// Result alias.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
