//! The host daemon's log lines on stderr: each starts with its UTC time to the millisecond, so a
//! log kept in a plain file (not the journal, which stamps its own) still says when the relay
//! went away and came back. Never keys, bodies or wire bytes: callers pass plain messages.

use relay_wire::time::iso_ms;

/// `<time> host daemon: <message>` for `message` at `now_ms`.
pub(crate) fn line(now_ms: u64, message: std::fmt::Arguments<'_>) -> String {
    format!("{} host daemon: {message}", iso_ms(now_ms))
}

/// Write one log line now.
pub(crate) fn log(message: std::fmt::Arguments<'_>) {
    eprintln!("{}", line(super::now_ms(), message));
}

/// `daemon_log!("...", args)`: one timestamped line ([`log`]).
macro_rules! daemon_log {
    ($($arg:tt)*) => {
        $crate::daemon_log::log(format_args!($($arg)*))
    };
}
pub(crate) use daemon_log;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_starts_with_its_utc_time_to_the_millisecond() {
        assert_eq!(
            line(1_795_960_800_123, format_args!("the relay answers again")),
            "2026-11-29T14:00:00.123Z host daemon: the relay answers again"
        );
    }
}
