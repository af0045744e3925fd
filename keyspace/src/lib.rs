//! `relay-keyspace`: the durable state of an mbx-relay, on the fjall log-structured engine.
//!
//! It knows bytes, partitions, atomic batches, fsync, snapshots and the backup file format; it
//! knows nothing of HTTP or JSON envelopes. Every logical operation is one atomic batch, and no
//! write call resolves before its batch is fsync'd. Writes from many callers share one fsync
//! (group commit) through a single writer thread that also serialises read-check-write logic.
//! Reads are served from the last *durable* snapshot the writer published, never from state a
//! crash could still erase.
//!
//! CONTRACT NOTE (for the crates above): the public API below is what `mbx-relay` and
//! `relay-tool` program against. Extend it freely; change a signature only together with every
//! caller.


mod api;

pub use api::*;
