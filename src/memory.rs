//! Keeps the relay's resident memory close to what it really holds.
//!
//! The live heap of a relay under push load is about 35 MiB (valgrind massif: memtables, request
//! bodies, the block cache), yet glibc's malloc left it at 90–140 MiB resident: every worker
//! thread gets its own arena, and memory freed after a memtable flush or a large request stays
//! mapped in them. Two arenas and a periodic `malloc_trim` return that memory to the system
//! (measured at 200,000 queued: 92 MiB → 47–55 MiB resident after the push). Other C libraries
//! (musl) get nothing here: their allocators already return memory eagerly.

use std::time::Duration;

/// How often freed heap memory is handed back to the system. Trimming walks the free lists of
/// the arenas (a millisecond or two at this heap size), so once a few seconds is plenty.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(2);

/// Most malloc arenas: one per worker thread multiplies idle free memory; two keep the tokio
/// workers and the store writer from serialising on one lock.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS: libc::c_int = 2;

/// Cap the allocator's arenas. Call once, before the runtime starts its threads.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator parameters; called before other threads exist.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, ARENAS);
    }
}

/// Start a background thread that trims the heap every `interval` for the life of the process.
pub fn spawn_trimmer(interval: Duration) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let spawned = std::thread::Builder::new()
            .name("heap-trim".into())
            .spawn(move || loop {
                std::thread::sleep(interval);
                // SAFETY: malloc_trim is thread-safe; it only releases free pages.
                unsafe {
                    libc::malloc_trim(0);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the heap trimmer; memory is still bounded, only less of it is returned");
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = interval;
}
