//! The server's fault switch for end-to-end tests: the fjall store's persist-failure watcher
//! (feature `failpoints`). The named crash points themselves are `relay_os::failpoint::hit`.

/// Names a file: while it exists, every store fsync is reported failed (feature `failpoints`):
/// a disk fault end-to-end tests switch on and off without root.
pub const PERSIST_FAIL_FILE_ENV: &str = "MBX_FAIL_PERSIST_WHILE";

/// With the `failpoints` feature and [`PERSIST_FAIL_FILE_ENV`] set, watch that file (every
/// 20 ms) and make the store's fsyncs fail while it exists, through the store's injection hook
/// (which takes the same reopen path as a real write error). Without the feature: nothing.
pub(crate) fn watch_persist_failures(store: &relay_keyspace::Store) {
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
