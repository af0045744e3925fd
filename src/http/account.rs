//! The one account of the memory requests hold: request bodies as they arrive, the parse work a
//! body will cost, and response pages until they are written. One budget is shared by all
//! requests (its total is documented in docs/failure-behaviour.md); inside it, shares:
//!
//! - **per client address** (IPv4 address, IPv6 /64), from the first byte: everything a request
//!   holds counts against its address;
//! - **per hop key, only once the key proved itself**: a request's bytes count against the key's
//!   share from the moment its signature verified ([`Held::prove`]), never before, so nothing a
//!   client sends under a key it cannot sign for can make that key's own requests be refused.
//!
//! All counted in bytes actually held. A request past its address's or key's share is refused at
//! once (a flood from one address or key gets answers, not a queue). A request's first piece
//! that finds no room in the shared budget waits for it at most `wait`, and room that frees goes
//! first to the waiting address holding the least (ties: the earliest), so many requests from a
//! few addresses cannot keep one from another address waiting behind them. A request already
//! holding part of the budget never waits (holders could all wait for each other): it grows into
//! the room left once the waiting requests had theirs (freed room goes to them first), else it is
//! refused at once.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_core::Key32;
use tokio::sync::oneshot;

use relay_core::{address_key, AddrKey};

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
pub struct MemoryAccount {
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
    addr: Option<AddrKey>,
    bytes: u64,
    granted: oneshot::Sender<()>,
}

impl MemoryAccount {
    /// A shared budget of `budget` bytes; at most `address_cap` bytes per address and `key_cap`
    /// per key; a request waits at most `wait` for room in the budget.
    pub fn new(budget: u64, address_cap: u64, key_cap: u64, wait: Duration) -> Self {
        MemoryAccount {
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

    /// Nothing held yet for a request from `addr`; it grows as the request takes memory, counts
    /// against a key once the key proved itself ([`Held::prove`]), and gives everything back
    /// when dropped.
    pub fn reservation(self: &Arc<Self>, addr: &str) -> Held {
        Held {
            limits: self.clone(),
            addr: Some(address_key(addr)),
            key: None,
            bytes: 0,
        }
    }

    /// Nothing held yet for a response to `key`, which proved itself: counted against the key's
    /// share and the shared budget, not an address (a response is the key's, whoever's
    /// connection it goes out on: hosts sharing an address do not share this).
    pub fn for_key(self: &Arc<Self>, key: Key32) -> Held {
        Held {
            limits: self.clone(),
            addr: None,
            key: Some(key),
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
        limits: &MemoryAccount,
        addr: Option<&AddrKey>,
        key: Option<&Key32>,
        extra: u64,
    ) -> Result<(), Refused> {
        if let Some(a) = addr {
            if held(&self.by_address, a).saturating_add(extra) > limits.address_cap {
                return Err(Refused::AddressBusy);
            }
        }
        if let Some(k) = key {
            if held(&self.by_key, k).saturating_add(extra) > limits.key_cap {
                return Err(Refused::KeyBusy);
            }
            *self.by_key.entry(*k).or_insert(0) += extra;
        }
        if let Some(a) = addr {
            *self.by_address.entry(a.clone()).or_insert(0) += extra;
        }
        Ok(())
    }

    /// Uncount `bytes` share bytes of `addr` and `key`; empty entries go.
    fn give_back_shares(&mut self, addr: Option<&AddrKey>, key: Option<&Key32>, bytes: u64) {
        if let Some(a) = addr {
            uncount(&mut self.by_address, a, bytes);
        }
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
                .min_by_key(|(_, w)| {
                    let by_address = w.addr.as_ref().map_or(0, |a| held(&self.by_address, a));
                    (by_address, w.id)
                })
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

/// Memory held for one request: `bytes` of the shared budget, of its address's share and, once
/// its key proved itself, of that key's share.
pub struct Held {
    limits: Arc<MemoryAccount>,
    /// The client address (none for a response held for its key alone).
    addr: Option<AddrKey>,
    key: Option<Key32>,
    bytes: u64,
}

/// A wait for room in progress; dropping it (the request ended) settles it.
struct Wait<'a> {
    reservation: &'a mut Held,
    id: u64,
    extra: u64,
    settled: bool,
}

impl Held {
    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.bytes
    }

    /// The longest a request waits for room in the shared budget.
    pub fn wait(&self) -> Duration {
        self.limits.wait
    }

    /// The request's hop verified as `key`: what it holds counts against the key's share from
    /// now on (and all it takes later).
    ///
    /// # Errors
    /// [`Refused::KeyBusy`] when the key's share has no room for it; nothing changes then.
    pub fn prove(&mut self, key: Key32) -> Result<(), Refused> {
        if self.key.is_some() {
            return Ok(());
        }
        let mut s = self.limits.lock();
        let counted = held(&s.by_key, &key);
        if counted.saturating_add(self.bytes) > self.limits.key_cap {
            return Err(Refused::KeyBusy);
        }
        if self.bytes > 0 {
            *s.by_key.entry(key).or_insert(0) += self.bytes;
        }
        drop(s);
        self.key = Some(key);
        Ok(())
    }

    /// Hold `total` bytes without waiting: the shares as [`Held::grow_to`], and only room of the
    /// shared budget that is free now (for a response that is already built, where waiting
    /// would hold its memory longer).
    ///
    /// # Errors
    /// See [`Refused`]; nothing more is held then.
    pub fn grow_now(&mut self, total: u64) -> Result<(), Refused> {
        if total <= self.bytes {
            return Ok(());
        }
        let extra = total - self.bytes;
        let limits = self.limits.clone();
        let mut s = limits.lock();
        s.take_shares(&limits, self.addr.as_ref(), self.key.as_ref(), extra)?;
        if s.free < extra || !s.waiting.is_empty() {
            s.give_back_shares(self.addr.as_ref(), self.key.as_ref(), extra);
            return Err(Refused::Busy);
        }
        s.free -= extra;
        self.bytes = total;
        Ok(())
    }

    /// Hold only `total` bytes (no more than now): the rest goes back to the shares and the
    /// budget, and to whoever waits for room.
    pub fn shrink_to(&mut self, total: u64) {
        if total >= self.bytes {
            return;
        }
        let back = self.bytes - total;
        let mut s = self.limits.lock();
        s.free += back;
        s.give_back_shares(self.addr.as_ref(), self.key.as_ref(), back);
        s.grant();
        drop(s);
        self.bytes = total;
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
            s.take_shares(&limits, self.addr.as_ref(), self.key.as_ref(), extra)?;
            if self.bytes > 0 {
                if s.free < extra {
                    s.give_back_shares(self.addr.as_ref(), self.key.as_ref(), extra);
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
        s.give_back_shares(r.addr.as_ref(), r.key.as_ref(), self.extra);
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
        s.give_back_shares(r.addr.as_ref(), r.key.as_ref(), self.extra);
        s.grant();
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut s = self.limits.lock();
        s.free += self.bytes;
        s.give_back_shares(self.addr.as_ref(), self.key.as_ref(), self.bytes);
        s.grant();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_wait_for_room_is_bounded_and_leaves_nothing_behind() {
        let limits = Arc::new(MemoryAccount::new(
            4096,
            u64::MAX,
            u64::MAX,
            Duration::from_millis(100),
        ));
        let mut first = limits.reservation("192.0.2.1");
        first.grow_to(3000).await.unwrap();
        let mut second = limits.reservation("192.0.2.2");
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
        let limits = std::sync::Arc::new(MemoryAccount::new(2000, u64::MAX, u64::MAX, LONG));
        let mut a = limits.reservation("192.0.2.1");
        a.grow_to(1500).await.unwrap();
        let l = limits.clone();
        let b = tokio::spawn(async move {
            let mut b = l.reservation("192.0.2.2");
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
        let limits = std::sync::Arc::new(MemoryAccount::new(4000, u64::MAX, u64::MAX, LONG));
        let mut holder = limits.reservation("192.0.2.1");
        holder.grow_to(4000).await.unwrap();
        // Ten requests of a busy address wait first, then one of a quiet address.
        let mut tasks = Vec::new();
        for i in 0..11u64 {
            let limits = limits.clone();
            let addr = if i < 10 { "192.0.2.9" } else { "192.0.2.7" };
            tasks.push(tokio::spawn(async move {
                let mut r = limits.reservation(addr);
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
            s.waiting
                .iter()
                .all(|w| w.addr == Some(address_key("192.0.2.9"))),
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
        let limits = Arc::new(MemoryAccount::new(1000, u64::MAX, u64::MAX, LONG));
        let mut holder = limits.reservation("192.0.2.1");
        holder.grow_to(1000).await.unwrap();
        // Abandoned while waiting.
        let mut waiter = limits.reservation("192.0.2.2");
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

    /// A reservation of `addr` whose hop proved itself as `key`.
    fn proven(limits: &Arc<MemoryAccount>, addr: &str, key: Key32) -> Held {
        let mut h = limits.reservation(addr);
        h.prove(key).unwrap();
        h
    }

    #[tokio::test]
    async fn shares_per_address_and_per_key_are_refused_at_once() {
        let limits = Arc::new(MemoryAccount::new(1 << 30, 10_000, 15_000, LONG));
        let key = [7u8; 32];
        let mut a = proven(&limits, "192.0.2.1", key);
        a.grow_to(6_000).await.unwrap();
        let mut b = proven(&limits, "192.0.2.1:4000", key);
        assert_eq!(b.grow_to(5_000).await, Err(Refused::AddressBusy));
        b.grow_to(4_000).await.unwrap();
        // Another address, the same key: the key's share is what is left.
        let mut c = proven(&limits, "192.0.2.2", key);
        assert_eq!(c.grow_to(6_000).await, Err(Refused::KeyBusy));
        c.grow_to(5_000).await.unwrap();
        let mut other = proven(&limits, "192.0.2.2", [8u8; 32]);
        other.grow_to(5_000).await.unwrap();
        // IPv6 by /64.
        let mut v6 = limits.reservation("2001:db8::1");
        v6.grow_to(10_000).await.unwrap();
        let mut v6b = limits.reservation("2001:db8::2");
        assert_eq!(v6b.grow_to(1).await, Err(Refused::AddressBusy));
        assert_eq!(limits.holders(), (3, 2));
        drop((a, b, c, other, v6, v6b));
        assert_eq!(limits.holders(), (0, 0), "the tables empty");
        assert_eq!(limits.lock().free, 1 << 30);
    }

    #[tokio::test]
    async fn a_key_is_charged_only_after_it_proved_itself() {
        let limits = Arc::new(MemoryAccount::new(1 << 30, 100_000, 15_000, LONG));
        let victim = [9u8; 32];
        // Unproven bodies naming the victim's key (a keyless client can only do this): counted
        // against their address, never against the key.
        let mut junk = Vec::new();
        for i in 0..4 {
            let mut h = limits.reservation(&format!("198.51.100.{i}"));
            h.grow_to(14_000).await.unwrap();
            junk.push(h);
        }
        assert_eq!(limits.holders(), (4, 0), "no key is charged before a proof");
        // The victim's own request proves itself and is served in full.
        let mut own = limits.reservation("192.0.2.1");
        own.grow_to(14_000).await.unwrap();
        own.prove(victim).unwrap();
        assert_eq!(limits.holders(), (5, 1));
        // Once proven, the key's share counts: a second proven request past it is refused, and
        // the refusal changes nothing.
        let mut second = limits.reservation("192.0.2.2");
        second.grow_to(2_000).await.unwrap();
        assert_eq!(second.prove(victim), Err(Refused::KeyBusy));
        assert_eq!(second.held(), 2_000);
        drop(own);
        second.prove(victim).unwrap();
        assert_eq!(own_share(&limits, &victim), 2_000);
        drop((junk, second));
        assert_eq!(limits.holders(), (0, 0));
    }

    fn own_share(limits: &MemoryAccount, key: &Key32) -> u64 {
        held(&limits.lock().by_key, key)
    }

    #[tokio::test]
    async fn a_response_is_held_without_waiting_and_gives_back_what_it_no_longer_needs() {
        let limits = Arc::new(MemoryAccount::new(10_000, u64::MAX, u64::MAX, LONG));
        let mut page = proven(&limits, "192.0.2.1", [1u8; 32]);
        page.grow_now(8_000).unwrap();
        let mut other = limits.reservation("192.0.2.2");
        assert_eq!(other.grow_now(3_000), Err(Refused::Busy), "no wait");
        assert_eq!(other.held(), 0);
        page.shrink_to(5_000);
        other.grow_now(3_000).unwrap();
        assert_eq!(limits.lock().free, 2_000);
        drop((page, other));
        assert_eq!(limits.lock().free, 10_000);
        assert_eq!(limits.holders(), (0, 0));
    }
}
