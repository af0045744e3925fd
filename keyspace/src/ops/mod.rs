//! Write operations. Each runs on the writer thread as one logical, atomic operation and
//! resolves once its group is durable.

pub(crate) mod ack;
pub(crate) mod deny;
pub(crate) mod enc_ad_v2;
pub(crate) mod enrol;
pub(crate) mod idle;
pub(crate) mod insert;
pub(crate) mod invite;
pub(crate) mod lists;
pub(crate) mod meta;
pub(crate) mod oplog;
pub(crate) mod queue;
pub(crate) mod rebind;
pub(crate) mod revoke;
pub(crate) mod seen;
pub(crate) mod sweep;
