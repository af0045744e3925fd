//! Where a request's CPU-heavy work runs: a hop signature over a large body, and the parse of a
//! large JSON body (a push's tree, a sender list). Small bodies are handled on the async worker
//! that read them (their work costs about what handing it over does); larger ones on a small
//! dedicated pool of low-priority threads, so a flood of large bodies keeps its hashing and
//! parsing off the workers that answer everyone else, takes at most those threads (a request
//! waits for a free one, holding the memory the account charged it), and yields the CPU to the
//! workers when both want it.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Semaphore};

use relay_core::{Caller, HopCheck, RelayError};

/// Bodies up to this size are parsed on the async worker that read them.
pub(crate) const INLINE_PARSE_MAX: usize = 64 * 1024;

/// Niceness of the pool's threads (0 is the workers'; 19 the lowest): under contention the
/// scheduler gives the workers about ten times their share.
const CHECK_NICE: i32 = 10;

/// A check to run: the closure sends its own answer.
type Job = Box<dyn FnOnce() + Send>;

/// Runs large bodies' work (a signature check, a parse) on a few dedicated threads.
pub(crate) struct OffWorker {
    jobs: Mutex<mpsc::Sender<Job>>,
    /// One permit per thread: a request waits here (holding its body) rather than queueing
    /// unboundedly.
    slots: Arc<Semaphore>,
}

impl Default for OffWorker {
    /// Half the cores (at least one): the rest stay with the workers.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        OffWorker::new((cores / 2).max(1))
    }
}

impl OffWorker {
    /// A pool of `threads` threads (at least one).
    pub(crate) fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("off-worker-{i}"))
                .spawn(move || {
                    lower_priority();
                    loop {
                        let job = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(p) => p.into_inner().recv(),
                        };
                        match job {
                            // A panicking job drops its answer's sender (refused like any failed
                            // hop); the thread lives on, so the pool never shrinks.
                            Ok(job) => {
                                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                            }
                            Err(_) => return, // the pool is gone
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start an off-worker thread");
            }
        }
        OffWorker {
            jobs: Mutex::new(tx),
            slots: Arc::new(Semaphore::new(threads)),
        }
    }

    /// Check `check` over `body`; the body comes back with the answer.
    pub(super) async fn verify(
        &self,
        check: HopCheck,
        body: Vec<u8>,
    ) -> (Result<Caller, RelayError>, Vec<u8>) {
        if body.len() <= HopCheck::INLINE_BODY_MAX {
            return (check.verify(&body), body);
        }
        // A thread that could not start, or a panicking check (verification returns false on
        // any input), gives no answer: refused like any failed hop.
        self.run(move || (check.verify(&body), body))
            .await
            .unwrap_or_else(|| (Err(RelayError::bad_hop()), Vec::new()))
    }

    /// `work` over a body's `bytes` (a parse): on the async worker for a body up to
    /// [`INLINE_PARSE_MAX`], else on the pool; the bytes come back (none when the pool gave no
    /// answer: then 503).
    pub(crate) async fn over<T: Send + 'static>(
        &self,
        bytes: Vec<u8>,
        work: impl FnOnce(&[u8]) -> Result<T, RelayError> + Send + 'static,
    ) -> (Result<T, RelayError>, Vec<u8>) {
        if bytes.len() <= INLINE_PARSE_MAX {
            return (work(&bytes), bytes);
        }
        self.run(move || (work(&bytes), bytes))
            .await
            .unwrap_or_else(|| {
                (
                    Err(RelayError::unavailable("request parse was interrupted")),
                    Vec::new(),
                )
            })
    }

    /// Run `job` on one of the pool's threads once one is free; `None` when it gave no answer
    /// (it panicked, or the pool could not start).
    pub(crate) async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let _slot = self.slots.acquire().await.ok()?;
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(job());
        });
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs.send(job),
            Err(p) => p.into_inner().send(job),
        };
        sent.ok()?;
        rx.await.ok()
    }
}

/// Give the calling thread a lower scheduling priority ([`CHECK_NICE`]); best effort.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take plain integers and touch only this thread's
        // scheduling priority (on Linux `PRIO_PROCESS` with a thread id names that thread).
        let r = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, CHECK_NICE)
        };
        if r != 0 {
            tracing::debug!("could not lower an off-worker thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_check_leaves_its_thread_serving() {
        let v = OffWorker::new(1);
        let send = |job: Job| v.jobs.lock().unwrap().send(job).unwrap();
        send(Box::new(|| panic!("a check that panics")));
        let (tx, rx) = mpsc::channel();
        send(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the one thread still runs checks");
    }
}
