//! The binaries of the current build: a test or bench binary lives in `target/<profile>/deps/`,
//! the workspace's binaries one level up. `env!("CARGO_BIN_EXE_...")` only names the binaries of
//! the test's own package; this names any of them, for code shared across packages.

use std::path::PathBuf;

/// `target/<profile>/` of the running test or bench binary.
pub fn dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the running test binary");
    let deps = exe.parent().expect("test binary has a directory");
    match deps.file_name() {
        Some(n) if n == "deps" => deps.parent().expect("deps has a parent").to_path_buf(),
        _ => deps.to_path_buf(),
    }
}

/// The workspace binary `name` of this build (`mbx-relay`, `relay-tool`, `relay-bench`); panics
/// naming the build command when it was not built (cargo builds another package's binaries
/// only for that package's own tests).
pub fn path(name: &str) -> PathBuf {
    let p = dir().join(name);
    assert!(
        p.is_file(),
        "{} missing: build it first (`cargo build --workspace`, with `--release` for benches)",
        p.display()
    );
    p
}

/// The relay binary under test: `target/<profile>/mbx-relay`, or `MBX_BENCH_RELAY_BIN` when set
/// (a bench comparing two builds of the relay with one generator; tests never set it).
pub fn relay() -> PathBuf {
    std::env::var_os("MBX_BENCH_RELAY_BIN").map_or_else(|| path("mbx-relay"), PathBuf::from)
}
