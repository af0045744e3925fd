//! The host side of the relay protocol (spec §3, §4, §5, §9, §10): a durable sender outbox, a
//! receiver checkpoint with quarantine, and the `mbx-relay host ...` commands, with the host's own
//! state in its own store directory on the same keyspace engine (fjall).

pub mod cli;
