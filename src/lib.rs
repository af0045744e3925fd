//! `mbx-relay`: a durable, untrusted store-and-forward relay for end-to-end-encrypted
//! host-to-host mail that speaks the agentmbx relay protocol.
//!
//! Data flows one way: [`http`] → [`relay`] → a `relay_store::RelayStore` (the fjall backend is
//! `relay_keyspace`, opened only by [`store_open`]), and [`wire`] (pure, no I/O) is shared by all
//! of them and by the host side ([`host`]).

pub mod admin;
pub mod failpoint;
pub mod host;
pub mod http;
pub mod memory;
pub mod private;
pub mod relay;
pub mod store_open;
pub mod wire;
