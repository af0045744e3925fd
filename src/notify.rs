//! systemd readiness (`Type=notify`): `READY=1` once the relay listens, `STATUS=` lines while it
//! starts, `WATCHDOG=1` while `WATCHDOG_USEC` is set. Hand-written (one datagram per message to
//! `$NOTIFY_SOCKET`, sd_notify(3)): a dozen lines of std, where the `sd-notify` crate would add
//! a dependency for the same call. Outside systemd (no `NOTIFY_SOCKET`) every call does nothing.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

/// The variable systemd sets to the socket's path (`@name`: an abstract socket).
const SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Send one notification (`READY=1`, `STATUS=...`, `WATCHDOG=1`, newline-separated lines).
/// Failures are logged once at debug level and otherwise ignored: a relay must not stop
/// serving because its supervisor's socket went away.
pub(crate) fn notify(state: &str) {
    let Some(path) = std::env::var_os(SOCKET_ENV) else {
        return;
    };
    if let Err(e) = send(&path, state) {
        tracing::debug!(error = %e, "sd_notify failed");
    }
}

fn send(path: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let sock = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt as _;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), path)?;
    }
    Ok(())
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC` (as sd_watchdog_enabled(3) advises),
/// when it is set for this process (`WATCHDOG_PID` absent or ours).
pub(crate) fn watchdog_interval() -> Option<Duration> {
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.trim() != std::process::id().to_string() {
            return None;
        }
    }
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec / 2))
}

/// Send `WATCHDOG=1` every [`watchdog_interval`] until `stop` turns true (a task on the
/// runtime: a stalled runtime misses its pings and systemd restarts the relay).
pub(crate) fn spawn_watchdog(
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let every = watchdog_interval()?;
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = tick.tick() => notify("WATCHDOG=1"),
                _ = stop.changed() => return,
            }
        }
    }))
}
