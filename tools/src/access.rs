//! How a command reaches a store: which store (`--store DIR|postgres://URL` or `--store-dir`,
//! as `mbx-relay serve` takes them), then through the running relay's admin socket when one
//! answers, else by opening the store itself (never creating one).
//!
//! A directory store is one process's: opened here only while no relay holds its lock. A
//! PostgreSQL store is shared by any number of relay processes, so it has no such lock: every
//! command may open it beside running relays, since every store operation is one transaction
//! (docs/operating.md, "relay-tool on a PostgreSQL store").

use std::path::{Path, PathBuf};

use mbx_relay::admin::client::{self, Reply};
use mbx_relay::admin::proto::Request;
use mbx_relay::store_open::{open_store, StoreSpec};
use relay_store::{OpenOptions, SharedStore};

use crate::fail::{Code, Failure};
use crate::files::require_dir;

/// The store flags every store command takes.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct StoreArgs {
    /// The relay's store directory; with a PostgreSQL `--store`, the relay's own `--store-dir`
    /// (its admin socket and relay.key), optional.
    #[arg(long, value_name = "DIR", env = "MBX_RELAY_STORE_DIR")]
    pub store_dir: Option<PathBuf>,
    /// The store as `mbx-relay serve --store` names it: a directory, or
    /// `postgres://user[:password]@host:port/db` (the password is never printed).
    #[arg(long, value_name = "STORE", env = "MBX_RELAY_STORE", value_parser = StoreSpec::parse)]
    pub store: Option<StoreSpec>,
}

/// The store a command works on, and the directory of the relay serving it (admin socket,
/// relay.key), if known.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub spec: StoreSpec,
    pub relay_dir: Option<PathBuf>,
}

impl StoreArgs {
    /// Resolve the flags as `serve` does: a directory `--store` takes the place of
    /// `--store-dir`; with a PostgreSQL `--store`, `--store-dir` is where its relay's admin
    /// socket is.
    ///
    /// # Errors
    /// `Usage` when neither flag (nor its variable) is given.
    pub(crate) fn target(&self) -> Result<Target, Failure> {
        match (&self.store, &self.store_dir) {
            (Some(StoreSpec::Dir(d)), _) => Ok(Target::dir(d)),
            (Some(spec @ StoreSpec::Postgres(_)), dir) => Ok(Target {
                spec: spec.clone(),
                relay_dir: dir.clone(),
            }),
            (None, Some(d)) => Ok(Target::dir(d)),
            (None, None) => Err(Failure::new(
                Code::Usage,
                "no store given: --store-dir DIR (MBX_RELAY_STORE_DIR) or --store DIR|postgres://URL (MBX_RELAY_STORE)",
            )),
        }
    }
}

impl Target {
    /// A directory store (its relay's admin socket is inside it).
    pub(crate) fn dir(d: &Path) -> Target {
        Target {
            spec: StoreSpec::Dir(d.to_path_buf()),
            relay_dir: Some(d.to_path_buf()),
        }
    }

    /// True for a store several relay processes share (no lock keeps the tool out).
    pub(crate) fn shared(&self) -> bool {
        matches!(self.spec, StoreSpec::Postgres(_))
    }

    /// Ask the relay whose admin socket is in [`Target::relay_dir`], if one answers there.
    /// A directory store must exist; a PostgreSQL store's relay directory may be absent
    /// (no relay on this machine).
    ///
    /// # Errors
    /// Missing store directory, permission denied, the relay's refusal.
    pub(crate) fn ask_relay(&self, request: &Request) -> Result<Option<Reply>, Failure> {
        match (&self.spec, &self.relay_dir) {
            (StoreSpec::Dir(d), _) => {
                require_dir(d)?;
                Ok(client::request(d, request)?)
            }
            (StoreSpec::Postgres(_), Some(d)) if d.is_dir() => Ok(client::request(d, request)?),
            (StoreSpec::Postgres(_), _) => Ok(None),
        }
    }
}

/// Where the answer comes from.
pub(crate) enum Via {
    /// The running relay streams it.
    Relay(Reply),
    /// The store is open here: a directory store locked against a relay starting meanwhile,
    /// or a PostgreSQL store beside whatever relays serve it.
    Local(SharedStore),
}

/// Ask the running relay, or open the store when none answers.
///
/// # Errors
/// Missing directory, permission denied, the relay's refusal, or `InUse` when a process holds
/// a directory store but no admin socket answers.
pub(crate) fn relay_or_store(t: &Target, request: &Request) -> Result<Via, Failure> {
    if let Some(reply) = t.ask_relay(request)? {
        return Ok(Via::Relay(reply));
    }
    open_local(t).map(Via::Local).map_err(|f| {
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

/// Open the store here (`create: false`: a directory or database without a store is refused).
///
/// # Errors
/// Missing directory, `InUse` naming the pid holding a directory store's lock, an unreachable
/// database, schema newer than this tool, ...
pub(crate) fn open_local(t: &Target) -> Result<SharedStore, Failure> {
    if let StoreSpec::Dir(d) = &t.spec {
        require_dir(d)?;
    }
    let opts = OpenOptions {
        create: false,
        ..OpenOptions::default()
    };
    open_store(&t.spec, opts).map_err(|e| match t.spec {
        StoreSpec::Dir(_) => Failure::from(e),
        // The url's host, port and database (never its password), for what failed where.
        StoreSpec::Postgres(_) => Failure::from(e).context(&t.spec.to_string()),
    })
}

/// Open the store for a command that must not run beside a relay on a directory store
/// (restore, rotate-epoch, offline revoke). A PostgreSQL store is opened beside its relays:
/// each such command is one transaction there, and the relays read what it changed.
///
/// # Errors
/// As [`open_local`]; `InUse` says to stop the relay first.
pub(crate) fn open_exclusive(t: &Target, what: &str) -> Result<SharedStore, Failure> {
    open_local(t).map_err(|f| {
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
pub(crate) fn close(store: SharedStore) -> Result<(), Failure> {
    store
        .close()
        .map_err(|e| Failure::from(e).context("closing the store"))
}
