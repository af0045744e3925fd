//! relay-pgstore's integration tests in one binary (each starts throwaway PostgreSQL clusters
//! from `relay-testkit`): one module per former `tests/*.rs` file.

mod challenge_cap;
mod conformance;
mod pg_deadline;
mod pg_fence;
mod pg_store;
mod pg_tls;
