//! The root package's end-to-end tests in one binary (one link instead of one per file): real
//! `mbx-relay serve` processes on loopback, driven over raw HTTP/1.1 by test hosts; relay-tool
//! and TLS through the real binaries. One module per former `tests/*.rs` file.
//!
//! Shared harness, compiled once: `common` (relay process, HTTP client, test hosts, builders),
//! `live_util` (held pulls, event streams), `tls_util` (test CA, TLS client), `hardening_conn`
//! (a keep-alive connection), `host_util` (the host harness of `relay-testkit`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

mod common;
mod hardening_conn;
mod live_util;
mod tls_util;
mod token_issuer;

/// The host child-process harness, shared with the host test binary.
mod host_util {
    pub(crate) use relay_testkit::host::*;
}

/// A `host run` child process and a bounded wait, shared with the host test binary.
mod daemon_util {
    pub(crate) use relay_testkit::daemon::*;
}

mod attack_senders;
mod backup_move;
mod hardening_account;
mod hardening_body;
mod hardening_clients;
mod hardening_combined;
mod hardening_conn_per_address;
mod hardening_disk;
mod hardening_enrol_nets;
mod hardening_files;
mod hardening_fuzz_seeds;
mod hardening_logs;
mod hardening_memory;
mod hardening_rate;
mod live_events;
mod live_pull;
mod observe;
mod packaging;
mod pg_failover;
mod pg_ha;
mod pg_partition;
mod pg_relay;
mod pg_scale;
mod power_cut_epoch;
mod power_cut_faults;
mod power_cut_journal;
#[cfg(feature = "failpoints")]
mod power_cut_migrate;
mod protocol_config;
mod protocol_defaults;
mod protocol_encad_v2;
mod protocol_enrol_authority;
mod protocol_enrol_tokens;
mod protocol_expiry;
mod protocol_hop_http;
mod protocol_hostile;
mod protocol_info_enrol;
mod protocol_pull_ack;
mod protocol_push;
mod protocol_senders_rotate_encad;
mod protocol_texts;
mod protocol_v1;
mod serve_durability;
mod serve_limits;
mod serve_load;
mod serve_metrics;
mod serve_retry_after;
mod serve_startup;
mod serve_store_flag;
mod tls_hosts;
mod tls_serve;
mod tool_admin;
mod tool_audit_log;
mod tool_cli;
mod tool_hosts;
mod tool_pg;
mod tool_revoke;
mod wire_vectors;
