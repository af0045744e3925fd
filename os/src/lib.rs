//! `relay-os`: the small OS-facing pieces the relay, its store and the host share:
//! [`private`] (owner-only files and directories, the umask, private Unix sockets),
//! [`durable_dir`] (directories and names a power cut cannot take back) and
//! [`failpoint`] (named crash points for crash tests, feature `failpoints`).
//!
//! Layering: std and libc only; no protocol, runtime, HTTP or storage crate.

pub mod durable_dir;
pub mod failpoint;
pub mod private;
