//! How a command reaches a store: through the running relay's admin socket when one answers,
//! else by opening the store itself (never creating one).

use std::path::Path;

use mbx_relay::admin::client::{self, Reply};
use mbx_relay::admin::proto::Request;
use mbx_relay::store_open::{open_store, StoreSpec};
use relay_store::{OpenOptions, SharedStore};

use crate::fail::{Code, Failure};
use crate::files::require_dir;

/// Where the answer comes from.
pub enum Via {
    /// The running relay streams it.
    Relay(Reply),
    /// No relay runs: the store is open here (and locked against a relay starting meanwhile).
    Local(SharedStore),
}

/// Ask the running relay, or open the store when none runs.
///
/// # Errors
/// Missing directory, permission denied, the relay's refusal, or `InUse` when a process holds
/// the store but no admin socket answers.
pub fn relay_or_store(dir: &Path, request: &Request) -> Result<Via, Failure> {
    require_dir(dir)?;
    if let Some(reply) = client::request(dir, request)? {
        return Ok(Via::Relay(reply));
    }
    open_local(dir).map(Via::Local).map_err(|f| {
        if f.code == Code::InUse {
            Failure::new(
                Code::InUse,
                format!("{} and its admin socket does not answer (a relay still starting, or an older one?)", f.msg),
            )
        } else {
            f
        }
    })
}

/// Open the store for exclusive offline use (`create: false`).
///
/// # Errors
/// Missing directory, `InUse` naming the pid holding the lock, schema newer than this tool, ...
pub fn open_local(dir: &Path) -> Result<SharedStore, Failure> {
    require_dir(dir)?;
    let opts = OpenOptions {
        create: false,
        ..OpenOptions::default()
    };
    Ok(open_store(&StoreSpec::Dir(dir.to_path_buf()), opts)?)
}

/// Open the store for a command that must not run beside a relay (restore, rotate-epoch).
///
/// # Errors
/// As [`open_local`]; `InUse` says to stop the relay first.
pub fn open_exclusive(dir: &Path, what: &str) -> Result<SharedStore, Failure> {
    open_local(dir).map_err(|f| {
        if f.code == Code::InUse {
            Failure::new(
                Code::InUse,
                format!("refusing to {what}: {}; stop the relay first", f.msg),
            )
        } else {
            f
        }
    })
}

/// Close a store opened here, reporting a failed final flush.
///
/// # Errors
/// The store's close error.
pub fn close(store: SharedStore) -> Result<(), Failure> {
    store
        .close()
        .map_err(|e| Failure::from(e).context("closing the store"))
}
