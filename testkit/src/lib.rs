//! `relay-testkit`: what more than one test or bench binary of the workspace needs, compiled once.
//! A dev-dependency only; nothing here is part of any crate's supported API.
//!
//! - [`cluster`]: a throwaway PostgreSQL cluster (initdb in a temp dir, a free loopback port).
//! - [`standby`]: a primary with a synchronous streaming-replication standby (failover tests).
//! - [`ha`]: a pg_auto_failover monitor with two synchronous data nodes (HA drills), on
//!   loopback or each in a network namespace of its own (partitions between them).
//! - [`bins`]: where the workspace's binaries of this build are (`target/<profile>/`).
//! - [`host`]: a relay child process on a fixed port (it comes back at the same URL after a
//!   crash) and hosts driven through the real `mbx-relay host` command.
//! - [`daemon`]: a `host run` child process and a proxy that hides long-poll.
//! - [`netns`]: a network namespace with a veth pair to the root's, or several on one
//!   bridge ([`netns::Lan`]), cut and restored by a test, or packets to or from one address
//!   dropped (partitions).
//! - [`files`]: the permission bits of everything under a directory.
//! - [`powercut`]: a `powercut` mount (a FUSE filesystem whose power a test can cut).
//! - [`procfs`]: another process's CPU, memory and disk writes, read from `/proc` (benches).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test harness: a panic fails the test that called it"
)]

pub mod bins;
pub mod cluster;
pub mod daemon;
pub mod files;
pub mod ha;
pub mod host;
pub mod netns;
pub mod powercut;
mod privilege;
pub mod procfs;
pub mod standby;
