//! Named crash points for crash-window tests.
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

/// Names a file: while it exists, every store fsync is reported failed (feature `failpoints`):
/// a disk fault end-to-end tests switch on and off without root.
pub const PERSIST_FAIL_FILE_ENV: &str = "MBX_FAIL_PERSIST_WHILE";

/// With the `failpoints` feature and [`PERSIST_FAIL_FILE_ENV`] set, watch that file (every
/// 20 ms) and make the store's fsyncs fail while it exists, through the store's injection hook
/// (which takes the same reopen path as a real write error). Without the feature: nothing.
pub fn watch_persist_failures(store: &relay_keyspace::Store) {
    #[cfg(feature = "failpoints")]
    {
        let Some(path) = std::env::var_os(PERSIST_FAIL_FILE_ENV) else {
            return;
        };
        let store = store.clone();
        let spawned = std::thread::Builder::new()
            .name("failpoint-persist".into())
            .spawn(move || {
                let path = std::path::PathBuf::from(path);
                let mut failing = false;
                loop {
                    let now = path.exists();
                    if now != failing {
                        eprintln!("failpoint {PERSIST_FAIL_FILE_ENV}: store fsyncs fail: {now}");
                        store.inject_persist_failures_for_tests(if now { u32::MAX } else { 0 });
                        failing = now;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            });
        if let Err(e) = spawned {
            eprintln!("failpoint {PERSIST_FAIL_FILE_ENV}: cannot start the watcher: {e}");
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = store;
}
