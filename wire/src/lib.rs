//! The pure wire layer: everything about the agentmbx relay protocol's bytes that needs no I/O —
//! canonical JSON, keys and signatures, signed hops, time formats, name rules, and the shape
//! checks the relay applies to records and wire items. Shared by the relay, HTTP and host sides.
//!
//! Layering: pure functions over bytes; no async runtime, HTTP, storage or file I/O dependency
//! (Cargo.toml), so every other crate can build on it.

pub mod accept;
pub(crate) mod batch_sign;
pub mod canonical;
pub mod cloud_key;
pub mod enc_ad;
pub mod envelope;
pub mod hop;
pub mod js_value;
pub mod json_node;
pub mod keys;
pub mod names;
pub mod receipt;
pub mod records;
pub mod seal;
pub mod strict_stream;
/// Shared test inputs (unit tests, and other crates' tests through the `test-util` feature).
#[cfg(any(test, feature = "test-util"))]
pub mod test_util;
pub mod time;

#[cfg(test)]
mod robustness_tests;
