//! Named crash points for crash-window tests, shared by the store (relay-keyspace), the relay's
//! rules (relay-core) and the host (mbx-host).
//!
//! With the `failpoints` feature, `hit("name")` aborts the process (as abruptly as `kill -9`) when
//! the environment variable `MBX_FAILPOINT` equals `name` (or lists it, comma-separated). Without
//! the feature it compiles to nothing, so release builds carry no crash switch.

/// Abort here if the `MBX_FAILPOINT` environment variable names this point (feature `failpoints`).
#[inline]
pub fn hit(name: &str) {
    #[cfg(feature = "failpoints")]
    {
        if let Ok(list) = std::env::var("MBX_FAILPOINT") {
            if list.split(',').any(|p| p.trim() == name) {
                eprintln!("failpoint {name}: aborting");
                std::process::abort();
            }
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
