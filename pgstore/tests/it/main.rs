//! relay-pgstore's integration tests in one binary (each starts throwaway PostgreSQL clusters
//! from `relay-testkit`): one module per former `tests/*.rs` file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

mod challenge_cap;
mod conformance;
mod pg_account_race;
mod pg_deadline;
mod pg_fence;
mod pg_flight;
mod pg_store;
mod pg_tls;
