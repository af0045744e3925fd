//! The store's operations, one file per group, each run through [`crate::ctx::Ctx`]: writes
//! as one transaction each ([`crate::ctx::Ctx::write`], or [`crate::db::Db::run`] for push and
//! ack, which pipeline their statements: [`crate::pipeline`]); reads on a pooled connection
//! ([`crate::ctx::Ctx::read`]), as one read-only snapshot transaction where they read more than
//! one row.

pub(crate) mod ack;
pub(crate) mod admin;
pub(crate) mod admission;
pub(crate) mod backup;
pub(crate) mod deny;
pub(crate) mod dump;
pub(crate) mod enrol;
pub(crate) mod insert;
pub(crate) mod insert_flight;
pub(crate) mod insert_keys;
pub(crate) mod insert_plan;
pub(crate) mod invite;
pub(crate) mod kind;
pub(crate) mod lease;
pub(crate) mod leave;
pub(crate) mod lists;
pub(crate) mod meta;
pub(crate) mod oplog;
pub(crate) mod process;
pub(crate) mod pull;
pub(crate) mod queue;
pub(crate) mod rebind;
pub(crate) mod restore;
pub(crate) mod sweep;

/// A write's answer: resolves once its transaction committed (or failed).
pub(crate) type Answer<T> = relay_store::Pending<T>;
