//! Where hop signatures are checked: a small body on the async worker that read it (its hash
//! costs about what the signature check does), a larger one on a small dedicated pool of
//! low-priority threads, so a flood of large badly signed bodies keeps its hashing off the
//! workers that answer everyone else, takes at most those threads, and yields the CPU to the
//! workers when both want it.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Semaphore};

use relay_core::{Caller, HopCheck, RelayError};

/// Niceness of the check threads (0 is the workers'; 19 the lowest): under contention the
/// scheduler gives the workers about ten times their share.
const CHECK_NICE: i32 = 10;

/// A check to run: the closure sends its own answer.
type Job = Box<dyn FnOnce() + Send>;

/// Runs [`HopCheck::verify`] for large bodies on `threads` dedicated threads.
pub(super) struct Verifier {
    jobs: Mutex<mpsc::Sender<Job>>,
    /// One permit per thread: a request waits here (holding its body) rather than queueing
    /// unboundedly.
    slots: Arc<Semaphore>,
}

impl Default for Verifier {
    /// Half the cores (at least one): the rest stay with the workers.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        Verifier::new((cores / 2).max(1))
    }
}

impl Verifier {
    /// A pool of `threads` check threads (at least one).
    pub(super) fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("hop-check-{i}"))
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
                            Err(_) => return, // the verifier is gone
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a hop check thread");
            }
        }
        Verifier {
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
        let Ok(_slot) = self.slots.acquire().await else {
            return (Err(RelayError::bad_hop()), body);
        };
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let r = check.verify(&body);
            let _ = tx.send((r, body));
        });
        let sent = match self.jobs.lock() {
            Ok(jobs) => jobs.send(job),
            Err(p) => p.into_inner().send(job),
        };
        if sent.is_err() {
            return (Err(RelayError::bad_hop()), Vec::new());
        }
        // A check thread that could not start, or a panicking check (verification returns
        // false on any input), drops the sender: refused like any failed hop.
        rx.await
            .unwrap_or_else(|_| (Err(RelayError::bad_hop()), Vec::new()))
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
            tracing::debug!("could not lower the hop check thread's priority");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_check_leaves_its_thread_serving() {
        let v = Verifier::new(1);
        let send = |job: Job| v.jobs.lock().unwrap().send(job).unwrap();
        send(Box::new(|| panic!("a check that panics")));
        let (tx, rx) = mpsc::channel();
        send(Box::new(move || tx.send(()).unwrap()));
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the one thread still runs checks");
    }
}
