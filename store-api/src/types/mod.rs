//! Public types of the store surface: records, requests, outcomes and errors, shared by every
//! backend (the [`crate::RelayStore`] trait) and the crates above it, one file a topic.

mod admin;
mod deny;
mod enrolment;
mod error;
mod lists;
mod log;
mod mail;
mod open;
mod pending;

pub use admin::*;
pub use deny::*;
pub use enrolment::*;
pub use error::*;
pub use lists::*;
pub use log::*;
pub use mail::*;
pub use open::*;
pub use pending::*;

/// A raw 32-byte Ed25519 public key (hosts and the relay).
pub type Key32 = [u8; 32];
