//! The relay's allocator (mimalloc), and keeping its resident memory close to what it holds.
//!
//! Why mimalloc: under batched pushes glibc malloc took about 14 % of the relay's CPU
//! (`_int_malloc`, `_int_free`, `malloc_consolidate`; some 100 allocations per pushed item), and
//! replacing it raised batched pushes by about 30 % at the same CPU (docs/performance.md).
//!
//! What keeps memory low: mimalloc keeps a thread's free pages in that thread until the thread
//! allocates or collects again, so an idle worker would hold what it used at its peak. Every
//! long-lived thread of the relay collects: tokio workers when they park, the store writer while
//! it waits for work ([`relay_store::OpenOptions::on_writer_idle`]), and a trimmer thread
//! purges the process-wide arenas. Arena memory is committed on demand and purged 100 ms after
//! it is freed, and transparent huge pages are off (crate feature `no_thp`): with 2 MiB pages a
//! few live blocks kept whole huge pages resident. Measured at 150,000 queued: 107 → 49 MiB
//! resident at rest.

use std::cell::Cell;
use std::time::{Duration, Instant};

/// How often the trimmer thread purges freed arena memory.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(2);

/// Least time between two collections on one thread.
const COLLECT_EVERY: Duration = Duration::from_secs(1);

/// mimalloc option ids (`mimalloc.h`, v3).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Commit arena memory on demand; purge freed memory after this many milliseconds (default 1 s).
const PURGE_DELAY_MS: std::os::raw::c_long = 100;

/// Tune the allocator. Call first thing in `main`.
pub fn tune_allocator() {
    // SAFETY: mi_option_set only stores an option value.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}

/// Give this thread's free allocator pages back, at most once per [`COLLECT_EVERY`]. Cheap
/// enough for a tokio park hook: between collections it reads the clock and returns.
pub fn collect_idle_thread() {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    let due = LAST.with(|last| match last.get() {
        Some(t) if now.duration_since(t) < COLLECT_EVERY => false,
        _ => {
            last.set(Some(now));
            true
        }
    });
    if due {
        collect();
    }
}

/// Free this thread's empty allocator pages and purge freed arena memory process-wide.
fn collect() {
    // SAFETY: mi_collect only releases free memory; it is thread-safe.
    unsafe {
        libmimalloc_sys::mi_collect(true);
    }
}

/// Start a background thread that purges freed arena memory every `interval` for the life of
/// the process.
pub fn spawn_trimmer(interval: Duration) {
    let spawned = std::thread::Builder::new()
        .name("heap-trim".into())
        .spawn(move || loop {
            std::thread::sleep(interval);
            collect();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the heap trimmer; memory is still bounded, only less of it is returned");
    }
}
