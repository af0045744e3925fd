//! The relay's admin socket: an owner-only Unix socket at `<store-dir>/admin.sock` through which
//! `relay-tool` takes consistent online backups and reads stats, the relay log and dumps while the
//! relay holds the store's lock. The relay serves it ([`spawn`]); `relay-tool` talks to it
//! ([`client`]); both share one wire format ([`proto`]) and one JSON shape for figures ([`report`]).

pub mod client;
pub mod deny;
pub mod hosts;
pub mod invite;
mod line;
pub mod proto;
pub mod report;
pub mod revoke;
mod server;

pub use server::spawn;
pub(crate) use server::spawn_with;
