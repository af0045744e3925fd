//! The wake registry of live delivery (docs/protocol.md, "mbx-relay extension: live delivery"):
//! long-poll pulls and event streams wait here for their target's queue to grow.
//!
//! A target has an entry only while someone waits on it (created on the first waiter, removed
//! with the last), so a target without waiters costs nothing, and a push to it costs one atomic
//! load when nobody waits anywhere. Each waiter has its own [`Notify`] (a wake is never lost: a
//! permit is stored when the waiter is not polling) and a few bits saying why it was woken.
//! Bounds: [`PER_KEY_WAITERS`] per host key (a new one evicts the oldest) and a global cap (the
//! connection cap, set by `serve`). The push path calls [`Wake::queued`] only after the store
//! answered the write durable, so nothing is ever woken for an item a crash could still erase.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use relay_store::Key32;
use tokio::sync::Notify;

/// Most concurrent waits and streams per host key; a new one evicts the oldest.
pub const PER_KEY_WAITERS: usize = 4;
/// The largest `wait` a pull may ask for, in seconds (also sent as `x-mbx-wait-max`).
pub const MAX_WAIT_SECS: u64 = 60;
/// Default global cap on waiters (`serve` sets the connection cap instead).
const DEFAULT_CAP: usize = 1024;

/// The queue grew (a durable push stored an item for the target).
const QUEUED: u8 = 1;
/// The epoch changed.
const EPOCH: u8 = 2;
/// A newer waiter of the same key took this one's place (sticky).
const EVICTED: u8 = 4;
/// The relay is shutting down (sticky).
const CLOSED: u8 = 8;
/// The waiter's key was revoked, rotated away or expired (sticky).
const REVOKED: u8 = 16;
/// Bits that stay set once set: the waiter must end.
const STICKY: u8 = EVICTED | CLOSED | REVOKED;

/// Why a waiter woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Woken(u8);

impl Woken {
    /// An item for the target became durable.
    pub fn queued(self) -> bool {
        self.0 & QUEUED != 0
    }
    /// The epoch changed.
    pub fn epoch(self) -> bool {
        self.0 & EPOCH != 0
    }
    /// The waiter must answer now and end: evicted by a newer one of its key, its key
    /// revoked, or shutdown.
    pub fn ending(self) -> bool {
        self.0 & STICKY != 0
    }
    /// The waiter's key lost its live enrolment: it must end at once, a waiting pull with the
    /// answer a revoked key's hop gets.
    pub fn revoked(self) -> bool {
        self.0 & REVOKED != 0
    }
}

/// Why a waiter could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The relay is shutting down.
    Closed,
    /// The global cap is reached.
    Full,
}

/// One waiting pull or stream.
struct Waiter {
    id: u64,
    bits: AtomicU8,
    /// Highest seq stored for the target since the waiter registered (0: none).
    head: AtomicU64,
    notify: Notify,
}

impl Waiter {
    fn wake(&self, bits: u8) {
        self.bits.fetch_or(bits, Ordering::AcqRel);
        self.notify.notify_one();
    }
}

#[derive(Default)]
struct State {
    targets: HashMap<Key32, VecDeque<Arc<Waiter>>>,
    next_id: u64,
    closed: bool,
}

/// The registry: waiters by target.
pub struct Wake {
    state: Mutex<State>,
    /// Waiters registered (a lock-free "nobody waits" check for the push path).
    total: AtomicUsize,
    cap: AtomicUsize,
}

impl Default for Wake {
    fn default() -> Self {
        Wake {
            state: Mutex::new(State::default()),
            total: AtomicUsize::new(0),
            cap: AtomicUsize::new(DEFAULT_CAP),
        }
    }
}

/// A registered waiter; dropping it unregisters it (and the target's entry with its last one).
pub struct Ticket {
    wake: Arc<Wake>,
    target: Key32,
    waiter: Arc<Waiter>,
}

impl Wake {
    /// Set the global cap on waiters (at least 1).
    pub fn set_cap(&self, cap: usize) {
        self.cap.store(cap.max(1), Ordering::Relaxed);
    }

    /// Waiters registered now.
    pub fn waiters(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }

    /// Targets with at least one waiter (entries held).
    pub fn targets(&self) -> usize {
        self.lock().targets.len()
    }

    /// Register a waiter for `target`, before reading its queue (so no wake is lost between
    /// the read and the wait). With [`PER_KEY_WAITERS`] already waiting for the key, the
    /// oldest is evicted (woken to answer and end).
    ///
    /// # Errors
    /// [`Refused::Closed`] once shutdown began; [`Refused::Full`] at the global cap.
    pub fn register(self: &Arc<Self>, target: Key32) -> Result<Ticket, Refused> {
        let mut st = self.lock();
        if st.closed {
            return Err(Refused::Closed);
        }
        let list = st.targets.get(&target);
        let evicts = list.is_some_and(|l| l.len() >= PER_KEY_WAITERS);
        if !evicts && self.total.load(Ordering::Acquire) >= self.cap.load(Ordering::Relaxed) {
            return Err(Refused::Full);
        }
        st.next_id += 1;
        let waiter = Arc::new(Waiter {
            id: st.next_id,
            bits: AtomicU8::new(0),
            head: AtomicU64::new(0),
            notify: Notify::new(),
        });
        let list = st.targets.entry(target).or_default();
        if evicts {
            if let Some(old) = list.pop_front() {
                old.wake(EVICTED);
                self.total.fetch_sub(1, Ordering::AcqRel);
            }
        }
        list.push_back(waiter.clone());
        self.total.fetch_add(1, Ordering::AcqRel);
        Ok(Ticket {
            wake: self.clone(),
            target,
            waiter,
        })
    }

    /// Items for these targets are durable, the highest seq of each given: wake their waiters.
    /// Call only after the store answered the write durable.
    pub fn queued(&self, stored: impl IntoIterator<Item = (Key32, u64)>) {
        if self.total.load(Ordering::Acquire) == 0 {
            return;
        }
        let st = self.lock();
        for (target, seq) in stored {
            for w in st.targets.get(&target).into_iter().flatten() {
                w.head.fetch_max(seq, Ordering::AcqRel);
                w.wake(QUEUED);
            }
        }
    }

    /// End every waiter of `key` now: `revoked` when the key lost its live enrolment (revoked,
    /// rotated away, expired), else as an eviction (its queue was purged: a waiting pull
    /// answers its page, a stream ends). They leave the registry with their tickets.
    pub fn end_key(&self, key: &Key32, revoked: bool) {
        let bits = if revoked { REVOKED } else { EVICTED };
        if self.total.load(Ordering::Acquire) == 0 {
            return;
        }
        let st = self.lock();
        for w in st.targets.get(key).into_iter().flatten() {
            w.wake(bits);
        }
    }

    /// The keys with at least one waiter, at most `max` of them (bounded by the waiter cap).
    pub fn keys(&self, max: usize) -> Vec<Key32> {
        if self.total.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        self.lock().targets.keys().take(max).copied().collect()
    }

    /// The epoch changed: wake every waiter.
    pub(crate) fn epoch_changed(&self) {
        self.wake_all(EPOCH);
    }

    /// Shutdown: wake every waiter to answer now, and refuse new ones.
    pub fn close(&self) {
        self.lock().closed = true;
        self.wake_all(CLOSED);
    }

    fn wake_all(&self, bits: u8) {
        let st = self.lock();
        st.targets.values().flatten().for_each(|w| w.wake(bits));
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Ticket {
    /// Wait until woken; returns why. Returns at once while a sticky reason holds.
    pub async fn woken(&self) -> Woken {
        loop {
            let bits = self.waiter.bits.fetch_and(STICKY, Ordering::AcqRel);
            if bits != 0 {
                return Woken(bits);
            }
            self.waiter.notify.notified().await;
        }
    }

    /// Highest seq stored for the target since registering (0: none yet).
    pub fn head(&self) -> u64 {
        self.waiter.head.load(Ordering::Acquire)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut st = self.wake.lock();
        let Some(list) = st.targets.get_mut(&self.target) else {
            return;
        };
        if let Some(at) = list.iter().position(|w| w.id == self.waiter.id) {
            list.remove(at);
            self.wake.total.fetch_sub(1, Ordering::AcqRel);
        }
        if list.is_empty() {
            st.targets.remove(&self.target);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn now<F: std::future::Future>(f: F) -> Option<F::Output> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(20), f)
                .await
                .ok()
        })
    }

    #[test]
    fn a_wake_before_the_wait_is_not_lost() {
        let w = Arc::new(Wake::default());
        let t = w.register([1; 32]).unwrap();
        w.queued([([1; 32], 7)]);
        let why = now(t.woken()).expect("woken");
        assert!(why.queued() && !why.ending());
        assert_eq!(t.head(), 7);
        assert!(now(t.woken()).is_none(), "one wake, one answer");
    }

    #[test]
    fn only_the_targets_waiters_wake() {
        let w = Arc::new(Wake::default());
        let a = w.register([1; 32]).unwrap();
        let b = w.register([2; 32]).unwrap();
        w.queued([([2; 32], 1)]);
        assert!(now(a.woken()).is_none());
        assert!(now(b.woken()).is_some());
    }

    #[test]
    fn a_fifth_waiter_of_a_key_evicts_the_oldest() {
        let w = Arc::new(Wake::default());
        let t: Vec<_> = (0..PER_KEY_WAITERS)
            .map(|_| w.register([1; 32]).unwrap())
            .collect();
        let fifth = w.register([1; 32]).unwrap();
        assert!(now(t[0].woken()).unwrap().ending());
        assert!(now(t[0].woken()).unwrap().ending(), "sticky");
        assert!(now(t[1].woken()).is_none());
        assert_eq!(w.waiters(), PER_KEY_WAITERS);
        drop(t);
        assert_eq!(w.waiters(), 1);
        drop(fifth);
        assert_eq!(
            (w.waiters(), w.targets()),
            (0, 0),
            "no entry without waiters"
        );
    }

    #[test]
    fn ending_a_key_ends_its_waiters_only_and_sticks() {
        let w = Arc::new(Wake::default());
        let a1 = w.register([1; 32]).unwrap();
        let a2 = w.register([1; 32]).unwrap();
        let b = w.register([2; 32]).unwrap();
        assert_eq!(w.keys(10).len(), 2);
        w.end_key(&[1; 32], true);
        for t in [&a1, &a2] {
            let why = now(t.woken()).expect("woken");
            assert!(why.revoked() && why.ending());
            assert!(now(t.woken()).unwrap().revoked(), "sticky");
        }
        assert!(now(b.woken()).is_none());
        w.end_key(&[3; 32], true);
        assert!(now(b.woken()).is_none());
        w.end_key(&[2; 32], false);
        let why = now(b.woken()).expect("woken");
        assert!(why.ending() && !why.revoked(), "a purge ends, not revokes");
    }

    #[test]
    fn the_global_cap_refuses_and_close_wakes_everyone() {
        let w = Arc::new(Wake::default());
        w.set_cap(2);
        let a = w.register([1; 32]).unwrap();
        let b = w.register([2; 32]).unwrap();
        assert_eq!(w.register([3; 32]).err(), Some(Refused::Full));
        w.epoch_changed();
        assert!(now(a.woken()).unwrap().epoch());
        w.close();
        assert!(now(a.woken()).unwrap().ending());
        assert!(now(b.woken()).unwrap().ending());
        drop((a, b));
        assert_eq!(w.register([1; 32]).err(), Some(Refused::Closed));
    }
}
