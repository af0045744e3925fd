//! The host end-to-end tests in one binary: a relay child process on a fixed loopback port and
//! hosts driven through the real `mbx-relay host` command (crashes at failpoints, daemons,
//! rotation, recovery). One module per former `tests/host_*.rs` file; the harness is
//! `relay-testkit`'s (`host`, `daemon`), shared with the relay test binary and the benches.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

/// The relay and host child-process harness, plus what only these tests need.
mod host_util {
    pub(crate) use relay_testkit::host::*;

    /// The binary under test (relay and host commands), as a constant for `Command::new`.
    pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_mbx-relay");

    /// The host's signing key, read from its key file (to forge items as that host in tests).
    pub(crate) fn host_key(h: &HostCli) -> relay_wire::keys::SigningKey {
        let text = std::fs::read_to_string(h.dir.join("host.key")).unwrap();
        relay_wire::keys::SigningKey::from_key_file(&text).unwrap()
    }

    /// A client for `relay` over plain http (loopback), signing as `name` with `key`.
    pub(crate) fn relay_client<'a>(
        relay: &RelayProc,
        name: &str,
        key: &'a relay_wire::keys::SigningKey,
    ) -> mbx_host::client::RelayClient<'a> {
        let to = mbx_host::client::Endpoint {
            url: relay.url(),
            ca: None,
        };
        mbx_host::client::RelayClient::new(&to, name, key, std::time::Duration::from_secs(5))
            .unwrap()
    }
}

/// A `host run` child process, a bounded wait, a proxy without long-poll.
mod daemon_util {
    pub(crate) use relay_testkit::daemon::*;
}

mod host_crash_windows;
mod host_daemon;
mod host_daemon_latency;
mod host_deadline;
mod host_enc_ads;
mod host_readable;
mod host_recovery;
mod host_rotation;
mod host_rules;
mod host_soak;
