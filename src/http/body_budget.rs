//! The memory held by request bodies being read: a budget shared by all requests, a share per
//! client address (IPv4 address, IPv6 /64) and a share per hop key, all counted in bytes
//! actually held. A request past its address's or key's share is refused at once (a flood from
//! one address or key gets answers, not a queue). A body's first piece that finds no room in the
//! shared budget waits for it at most `wait`, and room that frees goes first to the waiting
//! address holding the least (ties: the earliest), so many requests from a few addresses cannot
//! keep one from another address waiting behind them. A body already holding part of the budget
//! never waits (bodies holding parts could all wait for each other): it grows into the room left
//! once the waiting requests had theirs (freed room goes to them first), else it is refused at
//! once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_store::Key32;
use tokio::sync::oneshot;

use relay_core::rate::{address_key, AddrKey};

/// Why body memory could not be held.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Refused {
    /// The client's address holds its share (answer 429).
    AddressBusy,
    /// The hop's key holds its share (answer 429).
    KeyBusy,
    /// No room in the shared budget within the wait (answer 503).
    Busy,
}

/// The shared budget and the shares, with their limits.
pub struct BodyLimits {
    state: Mutex<State>,
    /// The shared budget's size.
    budget: u64,
    address_cap: u64,
    key_cap: u64,
    wait: Duration,
}

/// Everything under one lock: the shares and the budget move together.
struct State {
    /// Bytes of the shared budget not held.
    free: u64,
    /// Share bytes counted per address (held, or waited for).
    by_address: HashMap<AddrKey, u64>,
    /// Share bytes counted per key.
    by_key: HashMap<Key32, u64>,
    /// Requests waiting for room (at most one per request in flight).
    waiting: Vec<Waiter>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    addr: AddrKey,
    bytes: u64,
    granted: oneshot::Sender<()>,
}

impl BodyLimits {
    /// A shared budget of `budget` bytes; at most `address_cap` bytes per address and `key_cap`
    /// per key; a request waits at most `wait` for room in the budget.
    pub fn new(budget: u64, address_cap: u64, key_cap: u64, wait: Duration) -> Self {
        BodyLimits {
            state: Mutex::new(State {
                free: budget,
                by_address: HashMap::new(),
                by_key: HashMap::new(),
                waiting: Vec::new(),
                next_id: 0,
            }),
            budget,
            address_cap,
            key_cap,
            wait,
        }
    }

    /// The shared budget's size.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Bytes of the shared budget held now (for `/metrics` and `/status`).
    pub fn in_use(&self) -> u64 {
        self.budget.saturating_sub(self.lock().free)
    }

    /// An empty reservation for a request from `addr` (with a hop naming `key`); it grows as
    /// the body arrives and gives everything back when dropped.
    pub fn reservation(self: &Arc<Self>, addr: &str, key: Option<Key32>) -> Reservation {
        Reservation {
            limits: self.clone(),
            addr: address_key(addr),
            key,
            bytes: 0,
        }
    }

    /// Addresses and keys holding body memory now (for tests: the tables empty when requests
    /// end).
    pub fn holders(&self) -> (usize, usize) {
        let s = self.lock();
        (s.by_address.len(), s.by_key.len())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update keeps the tables consistent between its statements' panics-free steps.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl State {
    /// Count `extra` share bytes for `addr` and `key`, unless either share would pass its cap.
    fn take_shares(
        &mut self,
        limits: &BodyLimits,
        addr: &AddrKey,
        key: Option<&Key32>,
        extra: u64,
    ) -> Result<(), Refused> {
        if held(&self.by_address, addr).saturating_add(extra) > limits.address_cap {
            return Err(Refused::AddressBusy);
        }
        if let Some(k) = key {
            if held(&self.by_key, k).saturating_add(extra) > limits.key_cap {
                return Err(Refused::KeyBusy);
            }
            *self.by_key.entry(*k).or_insert(0) += extra;
        }
        *self.by_address.entry(addr.clone()).or_insert(0) += extra;
        Ok(())
    }

    /// Uncount `bytes` share bytes of `addr` and `key`; empty entries go.
    fn give_back_shares(&mut self, addr: &AddrKey, key: Option<&Key32>, bytes: u64) {
        uncount(&mut self.by_address, addr, bytes);
        if let Some(k) = key {
            uncount(&mut self.by_key, k, bytes);
        }
    }

    /// Hand freed room to waiters: each time to the waiting address holding the least (the
    /// earliest waiter of it), while that one's bytes fit. O(waiters) per grant; waiters are
    /// bounded by the requests in flight.
    fn grant(&mut self) {
        loop {
            let next = self
                .waiting
                .iter()
                .enumerate()
                .min_by_key(|(_, w)| (held(&self.by_address, &w.addr), w.id))
                .map(|(i, w)| (i, w.bytes));
            let Some((i, bytes)) = next else { return };
            if bytes > self.free {
                return;
            }
            self.free -= bytes;
            // Out of the list = granted: the waiter owns the bytes from here (see `settle`).
            let _ = self.waiting.swap_remove(i).granted.send(());
        }
    }

    /// Remove waiter `id` if it is still waiting (true); false when it was granted.
    fn withdraw(&mut self, id: u64) -> bool {
        match self.waiting.iter().position(|w| w.id == id) {
            Some(i) => {
                self.waiting.swap_remove(i);
                true
            }
            None => false,
        }
    }
}

/// What `m` counts for `k`.
fn held<K: Hash + Eq>(m: &HashMap<K, u64>, k: &K) -> u64 {
    m.get(k).copied().unwrap_or(0)
}

fn uncount<K: Hash + Eq>(m: &mut HashMap<K, u64>, k: &K, bytes: u64) {
    if let Some(held) = m.get_mut(k) {
        *held = held.saturating_sub(bytes);
        if *held == 0 {
            m.remove(k);
        }
    }
}

/// Body memory held for one request: `bytes` of its address's share, of its key's share and of
/// the shared budget.
pub struct Reservation {
    limits: Arc<BodyLimits>,
    addr: AddrKey,
    key: Option<Key32>,
    bytes: u64,
}

/// A wait for room in progress; dropping it (the request ended) settles it.
struct Wait<'a> {
    reservation: &'a mut Reservation,
    id: u64,
    extra: u64,
    settled: bool,
}

impl Reservation {
    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.bytes
    }

    /// Hold `total` bytes: the address's and key's shares first (refused at once past them),
    /// then the shared budget: holding nothing yet, it waits for room (at most the limits'
    /// wait); holding some, it takes the room that is free now, or none.
    ///
    /// # Errors
    /// See [`Refused`]; nothing more is held then.
    pub async fn grow_to(&mut self, total: u64) -> Result<(), Refused> {
        if total <= self.bytes {
            return Ok(());
        }
        let extra = total - self.bytes;
        let limits = self.limits.clone();
        let (id, granted) = {
            let mut s = limits.lock();
            s.take_shares(&limits, &self.addr, self.key.as_ref(), extra)?;
            if self.bytes > 0 {
                if s.free < extra {
                    s.give_back_shares(&self.addr, self.key.as_ref(), extra);
                    return Err(Refused::Busy);
                }
                s.free -= extra;
                drop(s);
                self.bytes = total;
                return Ok(());
            }
            let id = s.next_id;
            s.next_id += 1;
            let (tx, rx) = oneshot::channel();
            s.waiting.push(Waiter {
                id,
                addr: self.addr.clone(),
                bytes: extra,
                granted: tx,
            });
            s.grant();
            (id, rx)
        };
        let mut wait = Wait {
            reservation: self,
            id,
            extra,
            settled: false,
        };
        let got = tokio::time::timeout(limits.wait, granted).await;
        if matches!(got, Ok(Ok(()))) || !wait.withdraw() {
            wait.settled = true;
            wait.reservation.bytes = total;
            Ok(())
        } else {
            Err(Refused::Busy)
        }
    }
}

impl Wait<'_> {
    /// Stop waiting: true when it was still waiting (its shares given back), false when it had
    /// been granted meanwhile.
    fn withdraw(&mut self) -> bool {
        let r = &*self.reservation;
        let mut s = r.limits.lock();
        if !s.withdraw(self.id) {
            return false;
        }
        s.give_back_shares(&r.addr, r.key.as_ref(), self.extra);
        self.settled = true;
        // This waiter may have been the one the others waited behind.
        s.grant();
        true
    }
}

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        if self.settled || self.withdraw() {
            return;
        }
        // Granted while its request went away: give the bytes back.
        let r = &*self.reservation;
        let mut s = r.limits.lock();
        s.free += self.extra;
        s.give_back_shares(&r.addr, r.key.as_ref(), self.extra);
        s.grant();
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut s = self.limits.lock();
        s.free += self.bytes;
        s.give_back_shares(&self.addr, self.key.as_ref(), self.bytes);
        s.grant();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_wait_for_room_is_bounded_and_leaves_nothing_behind() {
        let limits = Arc::new(BodyLimits::new(
            4096,
            u64::MAX,
            u64::MAX,
            Duration::from_millis(100),
        ));
        let mut first = limits.reservation("192.0.2.1", None);
        first.grow_to(3000).await.unwrap();
        let mut second = limits.reservation("192.0.2.2", None);
        let t = std::time::Instant::now();
        assert_eq!(second.grow_to(2000).await, Err(Refused::Busy));
        assert!(t.elapsed() >= Duration::from_millis(100));
        assert_eq!(second.held(), 0);
        assert_eq!(
            limits.holders(),
            (1, 0),
            "the refused wait gave its share back"
        );
        drop(first);
        second.grow_to(4096).await.unwrap();
        drop(second);
        assert_eq!(limits.holders(), (0, 0));
        assert_eq!(limits.lock().free, 4096);
    }

    #[tokio::test]
    async fn a_body_holding_part_never_waits() {
        let limits = std::sync::Arc::new(BodyLimits::new(2000, u64::MAX, u64::MAX, LONG));
        let mut a = limits.reservation("192.0.2.1", None);
        a.grow_to(1500).await.unwrap();
        let l = limits.clone();
        let b = tokio::spawn(async move {
            let mut b = l.reservation("192.0.2.2", None);
            b.grow_to(1000).await.map(|()| b.held())
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        // 500 free, not enough for the waiter: A grows into it without waiting, then is
        // refused at once.
        a.grow_to(1900).await.unwrap();
        assert_eq!(a.grow_to(2100).await, Err(Refused::Busy));
        assert_eq!(a.held(), 1900);
        drop(a);
        assert_eq!(b.await.unwrap(), Ok(1000));
        assert_eq!(limits.holders(), (0, 0));
    }

    #[tokio::test]
    async fn freed_room_goes_to_the_waiting_address_holding_the_least() {
        let limits = std::sync::Arc::new(BodyLimits::new(4000, u64::MAX, u64::MAX, LONG));
        let mut holder = limits.reservation("192.0.2.1", None);
        holder.grow_to(4000).await.unwrap();
        // Ten requests of a busy address wait first, then one of a quiet address.
        let mut tasks = Vec::new();
        for i in 0..11u64 {
            let limits = limits.clone();
            let addr = if i < 10 { "192.0.2.9" } else { "192.0.2.7" };
            tasks.push(tokio::spawn(async move {
                let mut r = limits.reservation(addr, None);
                r.grow_to(1000).await.unwrap();
                tokio::time::sleep(LONG).await;
                drop(r);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(holder);
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Four grants of 1000: the quiet address first, then three of the busy one.
        let s = limits.lock();
        assert_eq!(s.free, 0);
        assert_eq!(s.waiting.len(), 7);
        assert!(
            s.waiting.iter().all(|w| w.addr == address_key("192.0.2.9")),
            "the quiet address was served"
        );
        drop(s);
        for t in tasks {
            t.abort();
        }
    }

    #[tokio::test]
    async fn an_abandoned_wait_gives_back_its_share_and_what_it_was_granted() {
        use std::future::Future as _;
        let limits = Arc::new(BodyLimits::new(1000, u64::MAX, u64::MAX, LONG));
        let mut holder = limits.reservation("192.0.2.1", None);
        holder.grow_to(1000).await.unwrap();
        // Abandoned while waiting.
        let mut waiter = limits.reservation("192.0.2.2", None);
        let blocked = tokio::time::timeout(Duration::from_millis(30), waiter.grow_to(500)).await;
        assert!(blocked.is_err(), "waits while the budget is held");
        assert_eq!(limits.holders(), (1, 0));
        // Abandoned after its grant, before it ran again.
        let mut fut = Box::pin(waiter.grow_to(500));
        std::future::poll_fn(|cx| {
            assert!(fut.as_mut().poll(cx).is_pending());
            std::task::Poll::Ready(())
        })
        .await;
        drop(holder);
        assert_eq!(limits.lock().free, 500, "granted to the waiter");
        drop(fut);
        assert_eq!(limits.holders(), (0, 0));
        let s = limits.lock();
        assert_eq!((s.free, s.waiting.len()), (1000, 0));
    }

    #[tokio::test]
    async fn shares_per_address_and_per_key_are_refused_at_once() {
        let limits = Arc::new(BodyLimits::new(1 << 30, 10_000, 15_000, LONG));
        let key = [7u8; 32];
        let mut a = limits.reservation("192.0.2.1", Some(key));
        a.grow_to(6_000).await.unwrap();
        let mut b = limits.reservation("192.0.2.1:4000", Some(key));
        assert_eq!(b.grow_to(5_000).await, Err(Refused::AddressBusy));
        b.grow_to(4_000).await.unwrap();
        // Another address, the same key: the key's share is what is left.
        let mut c = limits.reservation("192.0.2.2", Some(key));
        assert_eq!(c.grow_to(6_000).await, Err(Refused::KeyBusy));
        c.grow_to(5_000).await.unwrap();
        let mut other = limits.reservation("192.0.2.2", Some([8u8; 32]));
        other.grow_to(5_000).await.unwrap();
        // IPv6 by /64.
        let mut v6 = limits.reservation("2001:db8::1", None);
        v6.grow_to(10_000).await.unwrap();
        let mut v6b = limits.reservation("2001:db8::2", None);
        assert_eq!(v6b.grow_to(1).await, Err(Refused::AddressBusy));
        assert_eq!(limits.holders(), (3, 2));
        drop((a, b, c, other, v6, v6b));
        assert_eq!(limits.holders(), (0, 0), "the tables empty");
        assert_eq!(limits.lock().free, 1 << 30);
    }
}
