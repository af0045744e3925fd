//! The relay's allocator (mimalloc), and keeping its resident memory close to what it holds.
//!
//! Why mimalloc: under batched pushes glibc malloc took about 14 % of the relay's CPU
//! (`_int_malloc`, `_int_free`, `malloc_consolidate`; some 100 allocations per pushed item), and
//! replacing it raised batched pushes by about 30 % at the same CPU (docs/performance-history.md).
//!
//! What keeps memory low: mimalloc keeps a thread's free pages in that thread until the thread
//! allocates or collects again, so an idle worker would hold what it used at its peak. Every
//! long-lived thread of the relay collects: tokio workers when they park, the store writer while
//! it waits for work ([`relay_keyspace::EngineOptions::on_writer_idle`]), and a trimmer thread
//! purges the process-wide arenas. Arena memory is committed on demand and purged 100 ms after
//! it is freed, and transparent huge pages are off (crate feature `no_thp`): with 2 MiB pages a
//! few live blocks kept whole huge pages resident. Measured at 150,000 queued: 107 → 49 MiB
//! resident at rest.
//!
//! Large blocks (request bodies, up to 8 MiB each) are given back to the kernel as they are
//! freed ([`RelayAlloc`]), not after the purge delay: under a flood of 8 MiB bodies the bodies
//! freed in the last 100 ms stayed resident beside the 256 MiB body budget, and the relay's
//! peak went from 271 to 345-353 MiB (tests/it/hardening_body.rs, the junk-signature flood).

use std::alloc::{GlobalAlloc, Layout};
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

/// Blocks of at least this size have their pages returned to the kernel when freed.
const RETURN_AT_FREE: usize = 1 << 20;

/// The relay's global allocator: mimalloc, with large blocks returned to the kernel at once.
pub struct RelayAlloc;

impl RelayAlloc {
    /// Drop the resident pages inside the block at `ptr` of `size` bytes (its whole pages; the
    /// partial pages at its ends may hold allocator data or neighbours and are left alone).
    fn release_pages(ptr: *mut u8, size: usize) {
        const PAGE: usize = 4096;
        let start = (ptr as usize).next_multiple_of(PAGE);
        let end = (ptr as usize + size) & !(PAGE - 1);
        if end > start {
            // SAFETY: [start, end) lies inside a live block this allocator handed out and that
            // its owner is freeing; MADV_DONTNEED on private anonymous memory only drops the
            // pages (they read as zeros when touched again), which the allocator allows for
            // memory it purges itself.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
}

// SAFETY: every call forwards to mimalloc with the same arguments, except that `dealloc` drops
// the pages of a large block being freed first and `realloc` of a large block is alloc + copy +
// dealloc (the default `GlobalAlloc::realloc`).
unsafe impl GlobalAlloc for RelayAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        unsafe { mimalloc::MiMalloc.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= RETURN_AT_FREE {
            Self::release_pages(ptr, layout.size());
        }
        // SAFETY: forwarded as is.
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if layout.size() < RETURN_AT_FREE {
            // SAFETY: forwarded as is.
            return unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        }
        // A large block is moved by hand so that its old pages go back through `dealloc` (a
        // body read without a declared length grows this way).
        // SAFETY: `layout.align()` is a valid alignment and the caller guarantees `new_size`
        // rounded to it does not overflow isize (GlobalAlloc::realloc's contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: new_layout has a non-zero size (the caller's contract).
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least this long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    /// A large block keeps its bytes through growing and shrinking moves, and a small one
    /// through mimalloc's own realloc; the pages dropped at free are only the freed block's.
    #[test]
    fn realloc_keeps_the_bytes_of_large_and_small_blocks() {
        let a = RelayAlloc;
        for (size, grown, shrunk) in [(3 << 20, 5 << 20, 2 << 20), (1000, 4 << 20, 100)] {
            let layout = Layout::from_size_align(size, 16).unwrap();
            // SAFETY (test): every pointer is used within the layout it was allocated with.
            unsafe {
                let p = a.alloc(layout);
                assert!(!p.is_null());
                for i in 0..size {
                    *p.add(i) = (i % 251) as u8;
                }
                let neighbour = a.alloc(layout);
                std::ptr::write_bytes(neighbour, 7, size);
                let p = a.realloc(p, layout, grown);
                assert!(!p.is_null());
                assert!((0..size).all(|i| *p.add(i) == (i % 251) as u8));
                let p = a.realloc(p, Layout::from_size_align(grown, 16).unwrap(), shrunk);
                assert!((0..shrunk.min(size)).all(|i| *p.add(i) == (i % 251) as u8));
                a.dealloc(p, Layout::from_size_align(shrunk, 16).unwrap());
                assert!((0..size).all(|i| *neighbour.add(i) == 7));
                a.dealloc(neighbour, layout);
            }
        }
    }
}
