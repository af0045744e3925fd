//! relay-keyspace's integration tests in one binary: one module per former `tests/*.rs` file,
//! the shared helpers (`common`) compiled once. Crash and fault tests re-run this binary as a
//! child process with `--exact <module>::<test>`, so the names they pass carry the module.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

mod common;

mod audit_log;
mod backup;
mod conformance;
mod crash;
mod dedup_horizon;
mod enc_ads;
mod faults;
mod hosts_idle;
mod idle_flush;
mod misc;
mod open;
mod pull_hints;
mod revoke;
mod sender_index;
mod sweep_resume;
mod usage_prop;
