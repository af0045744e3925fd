//! `mbx-relay`: the server of the durable, untrusted store-and-forward relay for
//! end-to-end-encrypted host-to-host mail that speaks the agentmbx relay protocol.
//!
//! Data flows one way: [`http`] → `relay_core` (the rules) → a `relay_store::RelayStore` (the
//! backend is chosen and opened only by [`store_open`]); [`serve`] wires them up at start;
//! `relay_wire` (pure, no I/O) is shared by all of them and by the host side (`mbx_host`).
//! This is the one crate that links HTTP and the storage backends (see ARCHITECTURE.md).

pub mod admin;
pub mod cli;
pub mod cli_docs;
pub mod exit;
pub mod failpoint;
pub mod health_probe;
pub mod http;
pub mod memory;
mod notify;
pub mod serve;
pub mod store_open;
