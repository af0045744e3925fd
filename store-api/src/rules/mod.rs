//! The storage rules, written once as pure functions over plain values: both backends read what
//! a rule needs, call it, and write what it decided (docs/protocol.md §2-§7 and the CONTRACT in
//! lib.rs). A backend that states a rule in SQL instead (for atomicity) says so where it does and
//! names the function and test here that pin the same rule.

pub mod ack;
pub mod challenge_book;
pub mod dedup;
pub mod deny;
pub mod enc_ad;
pub mod enrol;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod idle;
pub mod insert;
pub mod invite;
pub mod lists;
pub mod log;
pub mod quota;
pub mod revoke;
pub mod rotation;
pub mod seen;
pub mod seq;
pub mod sweep;
