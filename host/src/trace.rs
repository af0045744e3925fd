//! Opt-in stage timestamps for measuring delivery latency: with `MBX_HOST_TRACE=FILE`, every
//! stage a message passes (queued, pushed, woken, pulled, received...) appends one line
//! `<stage> <item id> <unix µs>` to FILE (0600). Only stage names and item ids, never keys,
//! bodies or wire bytes. Off (one cached check) when the variable is unset.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt as _;
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

/// The environment variable naming the trace file.
pub const TRACE_ENV: &str = "MBX_HOST_TRACE";

static SINK: OnceLock<Option<Mutex<File>>> = OnceLock::new();

fn sink() -> Option<&'static Mutex<File>> {
    SINK.get_or_init(|| {
        let path = std::env::var_os(TRACE_ENV)?;
        OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .ok()
            .map(Mutex::new)
    })
    .as_ref()
}

/// Microseconds since the Unix epoch (the bench compares marks of two processes on one machine).
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Record that `item` reached `stage` now (nothing when tracing is off).
pub fn mark(stage: &str, item: &str) {
    if let Some(file) = sink() {
        let line = format!("{stage} {item} {}\n", unix_us());
        if let Ok(mut f) = file.lock() {
            let _ = f.write_all(line.as_bytes());
        }
    }
}
