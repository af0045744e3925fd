//! Fixed one-minute rate windows per key (client address prefix or sender key), in a hard-capped
//! table that never locks new keys out.
//!
//! Client addresses are keyed by [`address_key`]: IPv4 by full address, IPv6 by /64 prefix (one
//! end site usually holds a whole /64, so per-address windows there would be free to multiply;
//! a site's whole /48 is 65,536 keys, fewer than the relay's 100,000-address tables hold).
//!
//! [`NestedWindows`] adds the network around an address (IPv4 /24, IPv6 /48) as windows of
//! their own, for the enrolment-class calls: a site holding a whole /48 gets the /48's limit,
//! not 65,536 times the /64's.
//!
//! When the table is full, expired windows go first and then the oldest live window is evicted,
//! so a new client is always served; memory stays bounded by the cap. See [`RateTable`] for what
//! eviction costs.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const WINDOW_MS: u64 = 60_000;
/// The length of every window: the longest a refused caller waits.
#[cfg(test)]
pub(crate) const WINDOW: Duration = Duration::from_millis(WINDOW_MS);
/// Most expired windows dropped by one hit (keeps each call short; more than the one window a
/// hit can add, so the expired backlog only shrinks).
const EXPIRE_STEP: usize = 4;

/// The rate-limiting identity of a client address: what one window counts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum AddrKey {
    /// An IPv4 address (also from an IPv4-mapped IPv6 address).
    V4(u32),
    /// The upper 64 bits of an IPv6 address: its /64 prefix.
    V6(u64),
    /// A string that is not an IP address (as a proxy header gave it, already length-capped).
    Other(Box<str>),
}

/// The window key for a client address: IPv4 by address, IPv4-mapped IPv6 as its IPv4 address,
/// other IPv6 by /64 prefix. A socket form with a port (`1.2.3.4:5`, `[::1]:5`) counts as its
/// address; anything else is kept as given.
pub fn address_key(addr: &str) -> AddrKey {
    let ip = addr
        .parse::<IpAddr>()
        .or_else(|_| addr.parse::<SocketAddr>().map(|s| s.ip()));
    match ip {
        Ok(ip) => ip_key(ip),
        Err(_) => AddrKey::Other(addr.into()),
    }
}

/// The window key of an IP address (as [`address_key`] gives it for the address's text).
pub fn ip_key(ip: IpAddr) -> AddrKey {
    match ip {
        IpAddr::V4(v4) => AddrKey::V4(u32::from(v4)),
        IpAddr::V6(v6) => v6_key(v6),
    }
}

fn v6_key(v6: Ipv6Addr) -> AddrKey {
    match v6.to_ipv4_mapped() {
        Some(v4) => AddrKey::V4(u32::from(v4)),
        None => AddrKey::V6((u128::from(v6) >> 64) as u64),
    }
}

/// One key's current window.
struct Window {
    start: u64,
    count: u32,
}

/// The windows and the order they started in (oldest first). Every live window has exactly one
/// entry `(key, start)` in `order`; entries whose window has since restarted or gone are stale
/// and skipped.
struct Inner<K> {
    windows: HashMap<K, Window>,
    order: VecDeque<(K, u64)>,
    evictions: u64,
}

/// Per-key counters over one-minute windows, holding at most `cap` keys.
///
/// Each hit first drops a few windows whose minute is over (oldest first, at most
/// [`EXPIRE_STEP`] per hit: amortized constant time, never a scan of the table). A new key
/// arriving when the table is still full evicts the oldest window, so new clients are never
/// locked out and memory stays bounded by the cap.
///
/// Trade-off: an evicted key that comes back gets a fresh window. A window is only evicted once
/// `cap` newer windows have started after it, so to give one key `limit` more requests early an
/// attacker must first send `cap` requests from other keys (fresh IPv4 addresses or IPv6 /64s;
/// each of those it would have been allowed anyway). Rotating through more than `cap` keys it
/// gets at most `limit` extra requests per eviction, i.e. at most `limit` requests per `cap`
/// new-key requests for each key, instead of `limit` per key per minute. A legitimate heavy
/// client can likewise have its window reset early under such a flood; it is never refused
/// because of it.
pub struct RateTable<K> {
    limit: u32,
    /// Processes sharing `limit` (`set_share`): this one enforces `limit / share`.
    share: AtomicU32,
    cap: usize,
    inner: Mutex<Inner<K>>,
}

impl<K: Hash + Eq + Clone> RateTable<K> {
    /// A table allowing `limit` hits per key per minute, holding at most `cap` keys.
    pub fn new(limit: u32, cap: usize) -> Self {
        RateTable {
            limit,
            share: AtomicU32::new(1),
            cap: cap.max(1),
            inner: Mutex::new(Inner {
                windows: HashMap::new(),
                order: VecDeque::new(),
                evictions: 0,
            }),
        }
    }

    /// Enforce `1 / processes` of the limit from now on (at least one hit per window): the
    /// processes on one store together admit at most the limit (`crate::peers`).
    pub fn set_share(&self, processes: u32) {
        self.share.store(processes.max(1), Ordering::Relaxed);
    }

    /// The limit this process enforces: its share of the configured one, at least 1 (when
    /// the configured one is).
    fn limit(&self) -> u32 {
        (self.limit / self.share.load(Ordering::Relaxed).max(1)).max(self.limit.min(1))
    }

    /// Count one hit for `key` at `now_ms`; false when the key is over its limit this minute.
    pub fn hit(&self, key: &K, now_ms: u64) -> bool {
        self.try_hit(key, now_ms).is_ok()
    }

    /// [`RateTable::hit`], saying how long until the key's window frees when it is refused
    /// (for `Retry-After`).
    ///
    /// # Errors
    /// The wait when the key is over its limit this minute (nothing counted).
    pub fn try_hit(&self, key: &K, now_ms: u64) -> Result<(), Duration> {
        let mut inner = self.lock();
        if inner.prepare(key, now_ms, self.limit(), self.cap) {
            inner.count(key);
            Ok(())
        } else {
            Err(inner.frees_in(key, now_ms))
        }
    }

    /// True when `key` has used up its window at `now_ms`; counts nothing (to refuse before
    /// doing the work whose failure [`RateTable::hit`] would count).
    #[cfg(test)]
    pub(crate) fn exhausted(&self, key: &K, now_ms: u64) -> bool {
        self.wait(key, now_ms).is_some()
    }

    /// How long until `key`'s used-up window frees (`None`: it has room); counts nothing.
    pub fn wait(&self, key: &K, now_ms: u64) -> Option<Duration> {
        let inner = self.lock();
        inner
            .windows
            .get(key)
            .is_some_and(|w| !expired(w.start, now_ms) && w.count >= self.limit())
            .then(|| inner.frees_in(key, now_ms))
    }

    /// Keys currently held (for metrics and tests).
    pub fn len(&self) -> usize {
        self.lock().windows.len()
    }

    /// True when no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Live windows evicted so far to make room for new keys (for metrics and tests).
    #[cfg(test)]
    pub(crate) fn evictions(&self) -> u64 {
        self.lock().evictions
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl RateTable<AddrKey> {
    /// Count one hit for a client address, keyed by [`address_key`].
    #[cfg(test)]
    pub(crate) fn hit_addr(&self, addr: &str, now_ms: u64) -> bool {
        self.try_hit_addr(addr, now_ms).is_ok()
    }

    /// [`RateTable::try_hit`] for a client address, keyed by [`address_key`].
    ///
    /// # Errors
    /// The wait until the address's window frees.
    pub fn try_hit_addr(&self, addr: &str, now_ms: u64) -> Result<(), Duration> {
        self.try_hit(&address_key(addr), now_ms)
    }
}

/// Per-minute limits of the nested client-address windows (see [`NestedWindows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NestedLimits {
    /// Per IPv4 address and per IPv6 /64 (the [`address_key`] of the client).
    pub address: u32,
    /// Per IPv4 /24.
    pub(crate) v4_24: u32,
    /// Per IPv6 /48.
    pub(crate) v6_48: u32,
}

/// One-minute windows over a client address and the network around it: an IPv4 address and its
/// /24, an IPv6 /64 and its /48. A hit is admitted only when every window containing the
/// address has room, and then counts in all of them; so one site cannot multiply its share by
/// spreading over the 65,536 /64s of its /48 (or the 256 addresses of a /24). Each level is a
/// [`RateTable`] of its own, hard-capped at `cap` keys.
pub(crate) struct NestedWindows {
    address: RateTable<AddrKey>,
    v4_24: RateTable<AddrKey>,
    v6_48: RateTable<AddrKey>,
}

impl NestedWindows {
    /// Windows with these limits, each table holding at most `cap` keys.
    pub(crate) fn new(limits: NestedLimits, cap: usize) -> Self {
        NestedWindows {
            address: RateTable::new(limits.address, cap),
            v4_24: RateTable::new(limits.v4_24, cap),
            v6_48: RateTable::new(limits.v6_48, cap),
        }
    }

    /// Each level enforces `1 / processes` of its limit ([`RateTable::set_share`]).
    pub(crate) fn set_share(&self, processes: u32) {
        for t in [&self.address, &self.v4_24, &self.v6_48] {
            t.set_share(processes);
        }
    }

    /// Count one hit for a client address in all its windows; false (counted nowhere) when one
    /// of them is full this minute. A non-IP address has only its own window.
    #[cfg(test)]
    pub(crate) fn hit_addr(&self, addr: &str, now_ms: u64) -> bool {
        self.try_hit_addr(addr, now_ms).is_ok()
    }

    /// [`NestedWindows::hit_addr`], saying how long until every full window holding the
    /// address has freed when it is refused.
    ///
    /// # Errors
    /// The longest wait of the full windows (nothing counted).
    pub(crate) fn try_hit_addr(&self, addr: &str, now_ms: u64) -> Result<(), Duration> {
        let key = address_key(addr);
        match &key {
            AddrKey::V4(a) => {
                let net = AddrKey::V4(a & 0xffff_ff00);
                hit_all(&[(&self.address, &key), (&self.v4_24, &net)], now_ms)
            }
            AddrKey::V6(p) => {
                let net = AddrKey::V6(p & 0xffff_ffff_ffff_0000);
                hit_all(&[(&self.address, &key), (&self.v6_48, &net)], now_ms)
            }
            AddrKey::Other(_) => self.address.try_hit(&key, now_ms),
        }
    }

    /// Keys held per level: address, IPv4 /24, IPv6 /48 (for tests).
    #[cfg(test)]
    pub(crate) fn lens(&self) -> [usize; 3] {
        [self.address.len(), self.v4_24.len(), self.v6_48.len()]
    }
}

/// Count one hit in every `(table, key)` window, or in none: `Ok` (and counted everywhere) only
/// when each window has room this minute, else the longest wait of the full ones. The tables are locked in the order given, so callers
/// must always pass them in one fixed order (a nesting, outermost last) and never one table
/// twice; a refused hit counts nowhere, so it never uses up another window's room.
fn hit_all<K: Hash + Eq + Clone>(
    windows: &[(&RateTable<K>, &K)],
    now_ms: u64,
) -> Result<(), Duration> {
    let mut guards: Vec<_> = windows.iter().map(|(t, _)| t.lock()).collect();
    let mut wait: Option<Duration> = None;
    for (g, (t, key)) in guards.iter_mut().zip(windows) {
        // Every window is made current (even after a refusal) so each table's order stays sound.
        if !g.prepare(key, now_ms, t.limit(), t.cap) {
            wait = wait.max(Some(g.frees_in(key, now_ms)));
        }
    }
    if let Some(wait) = wait {
        return Err(wait);
    }
    for (g, (_, key)) in guards.iter_mut().zip(windows) {
        g.count(key);
    }
    Ok(())
}

/// True when a window started at `start` is over at `now_ms` (a clock that went back leaves it
/// running).
fn expired(start: u64, now_ms: u64) -> bool {
    now_ms.saturating_sub(start) >= WINDOW_MS
}

impl<K: Hash + Eq + Clone> Inner<K> {
    /// Make `key`'s window current at `now_ms` (restart a finished one; start an empty one,
    /// evicting the oldest when the table holds `cap` keys) and say whether it has room for one
    /// more hit under `limit`. Counts nothing.
    fn prepare(&mut self, key: &K, now_ms: u64, limit: u32, cap: usize) -> bool {
        self.expire(now_ms, EXPIRE_STEP);
        if let Some(w) = self.windows.get_mut(key) {
            if expired(w.start, now_ms) {
                w.start = now_ms;
                w.count = 0;
                self.order.push_back((key.clone(), now_ms));
                self.compact_if_bloated(cap);
            }
        } else {
            if self.windows.len() >= cap {
                self.evict_oldest(now_ms);
            }
            self.windows.insert(
                key.clone(),
                Window {
                    start: now_ms,
                    count: 0,
                },
            );
            self.order.push_back((key.clone(), now_ms));
            self.compact_if_bloated(cap);
        }
        self.windows.get(key).is_some_and(|w| w.count < limit)
    }

    /// How long until `key`'s current window ends (at most a window: a clock that went back
    /// does not stretch it).
    fn frees_in(&self, key: &K, now_ms: u64) -> Duration {
        let ms = self.windows.get(key).map_or(0, |w| {
            w.start.saturating_add(WINDOW_MS).saturating_sub(now_ms)
        });
        Duration::from_millis(ms.min(WINDOW_MS))
    }

    /// Count one hit in `key`'s window (made current by [`Inner::prepare`]).
    fn count(&mut self, key: &K) {
        if let Some(w) = self.windows.get_mut(key) {
            w.count = w.count.saturating_add(1);
        }
    }

    /// True when `(key, start)` is the entry of a window still held.
    fn is_current(&self, key: &K, start: u64) -> bool {
        self.windows.get(key).is_some_and(|w| w.start == start)
    }

    /// Pop up to `step` expired entries from the front of the order, dropping their windows.
    fn expire(&mut self, now_ms: u64, step: usize) {
        for _ in 0..step {
            match self.order.front() {
                Some((_, start)) if expired(*start, now_ms) => {}
                _ => return,
            }
            if let Some((key, start)) = self.order.pop_front() {
                if self.is_current(&key, start) {
                    self.windows.remove(&key);
                }
            }
        }
    }

    /// Drop the oldest window held (expired ones are the oldest), skipping stale entries.
    fn evict_oldest(&mut self, now_ms: u64) {
        while let Some((key, start)) = self.order.pop_front() {
            if self.is_current(&key, start) {
                self.windows.remove(&key);
                if !expired(start, now_ms) {
                    self.evictions += 1;
                }
                return;
            }
        }
        // Unreachable while every held window has its entry; stay bounded regardless.
        if let Some(key) = self.windows.keys().next().cloned() {
            self.windows.remove(&key);
            self.evictions += 1;
        }
    }

    /// Rebuild the order from the windows when stale entries pile up (only possible when the
    /// clock goes back): at most once per `cap` hits, so amortized constant time.
    fn compact_if_bloated(&mut self, cap: usize) {
        if self.order.len() <= cap.saturating_mul(2) {
            return;
        }
        let mut live: Vec<(K, u64)> = self
            .windows
            .iter()
            .map(|(k, w)| (k.clone(), w.start))
            .collect();
        live.sort_by_key(|(_, start)| *start);
        self.order = live.into();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_limits_and_resets() {
        let t = RateTable::new(2, 10);
        assert!(t.hit(&"a", 0));
        assert!(t.hit(&"a", 1));
        assert!(!t.hit(&"a", 2));
        assert!(t.hit(&"b", 2));
        assert!(!t.hit(&"a", 59_999), "the window lasts a minute");
        assert!(t.hit(&"a", 60_000));
        assert!(t.hit(&"a", 60_001));
        assert!(!t.hit(&"a", 60_002));
    }

    /// A refusal says when the window frees (for `Retry-After`), never more than a window.
    #[test]
    fn each_of_n_processes_enforces_its_share_of_the_limit() {
        let t = RateTable::new(10, 100);
        t.set_share(3);
        assert_eq!(
            (0..10).filter(|_| t.hit(&1, 0)).count(),
            3,
            "10 / 3 processes"
        );
        t.set_share(1);
        assert!(t.hit(&1, 0), "the whole limit once alone again");
        let tiny = RateTable::new(2, 100);
        tiny.set_share(5);
        assert_eq!(
            (0..5).filter(|_| tiny.hit(&1, 0)).count(),
            1,
            "never below one per window"
        );
        let nested = NestedWindows::new(
            NestedLimits {
                address: 4,
                v4_24: 8,
                v6_48: 8,
            },
            100,
        );
        nested.set_share(2);
        assert_eq!((0..4).filter(|_| nested.hit_addr("10.0.0.1", 0)).count(), 2);
    }

    #[test]
    fn a_refused_hit_says_how_long_until_the_window_frees() {
        let t = RateTable::new(1, 10);
        assert_eq!(t.try_hit(&"a", 1_000), Ok(()));
        assert_eq!(t.wait(&"a", 1_000), Some(Duration::from_secs(60)));
        assert_eq!(t.try_hit(&"a", 21_000), Err(Duration::from_secs(40)));
        assert_eq!(t.wait(&"a", 60_999), Some(Duration::from_millis(1)));
        assert_eq!(t.wait(&"a", 61_000), None, "a new minute");
        assert_eq!(t.wait(&"b", 0), None, "an unknown key has room");
        // A clock that went back does not stretch the wait past one window.
        assert_eq!(t.try_hit(&"a", 0), Err(WINDOW));
        let w = NestedWindows::new(
            NestedLimits {
                address: 1,
                v4_24: 2,
                v6_48: 1,
            },
            10,
        );
        assert_eq!(w.try_hit_addr("10.0.0.1", 0), Ok(()));
        assert_eq!(w.try_hit_addr("10.0.0.2", 10_000), Ok(()));
        // The /24 (started at 0) and the address (started at 10 s): the longer wait.
        assert_eq!(
            w.try_hit_addr("10.0.0.2", 30_000),
            Err(Duration::from_secs(40))
        );
        assert_eq!(
            w.try_hit_addr("10.0.0.3", 30_000),
            Err(Duration::from_secs(30)),
            "only the /24 is full"
        );
    }

    #[test]
    fn exhausted_tells_without_counting() {
        let t = RateTable::new(2, 10);
        assert!(!t.exhausted(&"a", 0));
        assert!(t.hit(&"a", 0));
        assert!(!t.exhausted(&"a", 1));
        assert!(t.hit(&"a", 1));
        assert!(t.exhausted(&"a", 2));
        assert!(t.exhausted(&"a", 2), "asking twice counts nothing");
        assert!(!t.exhausted(&"a", 60_000), "a new minute");
    }

    #[test]
    fn expired_windows_are_swept_without_a_full_table() {
        let t = RateTable::new(5, 1000);
        for k in 0..100 {
            assert!(t.hit(&k, 0));
        }
        assert_eq!(t.len(), 100);
        // Each later hit drops a few expired windows; enough hits empty the backlog.
        let later = 100 / EXPIRE_STEP + 1;
        for k in 0..later {
            assert!(t.hit(&(1000 + k), 60_000));
            assert!(t.len() <= 100, "the table only shrinks: {}", t.len());
        }
        assert_eq!(t.len(), later, "only the live windows are left");
        assert_eq!(t.evictions(), 0, "expiry is not eviction");
    }

    #[test]
    fn a_full_table_drops_expired_windows_before_live_ones() {
        let t = RateTable::new(1, 3);
        assert!(t.hit(&1, 0));
        assert!(t.hit(&2, 30_000));
        assert!(t.hit(&3, 30_000));
        // Key 1's minute is over: a new key takes its place, not a live window.
        assert!(t.hit(&4, 60_000));
        assert_eq!(t.len(), 3);
        assert_eq!(t.evictions(), 0);
        assert!(!t.hit(&2, 60_001), "live windows were kept");
        assert!(!t.hit(&3, 60_001));
    }

    #[test]
    fn a_new_client_is_served_when_the_table_is_full_of_live_windows() {
        let t = RateTable::new(2, 100);
        for k in 0..100 {
            assert!(t.hit(&k, 1_000 + k));
            assert!(t.hit(&k, 1_000 + k));
            assert!(!t.hit(&k, 1_000 + k), "key {k} at its limit");
        }
        assert_eq!(t.len(), 100);
        // Every one of many new keys is served, and the table stays at its cap.
        for k in 100..1_000 {
            assert!(t.hit(&k, 2_000), "new key {k} refused");
            assert!(t.len() <= 100, "table grew past its cap: {}", t.len());
        }
        assert_eq!(t.len(), 100);
        assert_eq!(t.evictions(), 900);
        // The most recent keys kept their windows.
        assert!(t.hit(&999, 2_001));
        assert!(!t.hit(&999, 2_002));
    }

    #[test]
    fn the_oldest_window_is_evicted_first() {
        let t = RateTable::new(1, 3);
        assert!(t.hit(&1, 10));
        assert!(t.hit(&2, 20));
        assert!(t.hit(&3, 30));
        assert!(t.hit(&4, 40));
        // Key 1 (oldest) was evicted and so gets a fresh window (the documented trade-off);
        // keys 3 and 4 are still limited, and key 1's return evicts key 2, then the oldest.
        assert!(!t.hit(&3, 41));
        assert!(!t.hit(&4, 41));
        assert!(t.hit(&1, 42), "evicted key starts afresh");
        assert_eq!(t.len(), 3);
        assert!(!t.hit(&3, 43));
        assert!(t.hit(&2, 44), "key 2 was the oldest when key 1 came back");
    }

    #[test]
    fn restarted_windows_leave_no_unbounded_order() {
        // One key restarting its window every minute for a long time: stale entries are
        // dropped as they expire.
        let t = RateTable::new(1, 4);
        for m in 0..1_000u64 {
            assert!(t.hit(&"k", m * WINDOW_MS));
            assert!(!t.hit(&"k", m * WINDOW_MS + 1));
        }
        assert!(t.lock().order.len() <= 2, "{}", t.lock().order.len());
        // A clock going back and forth cannot grow the order past twice the cap.
        let t = RateTable::new(1, 4);
        for i in 0..10_000u64 {
            let now = if i % 2 == 0 { i * WINDOW_MS } else { 0 };
            t.hit(&(i % 8), now);
            assert!(t.len() <= 4);
            assert!(t.lock().order.len() <= 9, "{}", t.lock().order.len());
        }
    }

    #[test]
    fn addresses_group_by_ipv6_64_and_ipv4_address() {
        let same = [
            "2001:db8:1:2::1",
            "2001:db8:1:2:ffff:ffff:ffff:ffff",
            "[2001:db8:1:2::7]:443",
        ];
        for a in same {
            assert_eq!(address_key(a), address_key(same[0]), "{a}");
        }
        assert_ne!(
            address_key("2001:db8:1:2::1"),
            address_key("2001:db8:1:3::1")
        );
        assert_eq!(address_key("::ffff:192.0.2.1"), address_key("192.0.2.1"));
        assert_eq!(address_key("192.0.2.1:8080"), address_key("192.0.2.1"));
        assert_ne!(address_key("192.0.2.1"), address_key("192.0.2.2"));
        // IPv4-compatible (deprecated) and other v6 forms are not folded into IPv4.
        assert_ne!(address_key("::1"), address_key("0.0.0.1"));
        assert_eq!(address_key("not an ip"), AddrKey::Other("not an ip".into()));
    }

    #[test]
    fn one_64_shares_a_window_and_another_does_not() {
        let t = RateTable::new(2, 10);
        assert!(t.hit_addr("2001:db8:a:b::1", 0));
        assert!(t.hit_addr("2001:db8:a:b::2", 0));
        assert!(!t.hit_addr("2001:db8:a:b:1:2:3:4", 0), "same /64");
        assert!(t.hit_addr("2001:db8:a:c::1", 0), "another /64");
        assert!(t.hit_addr("198.51.100.9", 0));
        assert!(t.hit_addr("::ffff:198.51.100.9", 0));
        assert!(
            !t.hit_addr("198.51.100.9", 0),
            "v4-mapped is its IPv4 address"
        );
        assert!(t.hit_addr("198.51.100.10", 0), "IPv4 by full address");
        assert_eq!(t.len(), 4);
    }

    fn nested(address: u32, v4_24: u32, v6_48: u32) -> NestedWindows {
        NestedWindows::new(
            NestedLimits {
                address,
                v4_24,
                v6_48,
            },
            1_000,
        )
    }

    #[test]
    fn the_64s_of_one_48_share_the_48_window() {
        let w = nested(2, 100, 5);
        // Five different /64s of one /48: the fifth call fills the /48 window.
        for i in 0..5 {
            assert!(w.hit_addr(&format!("2001:db8:1:{i:x}::1"), 0), "/64 {i}");
        }
        assert!(!w.hit_addr("2001:db8:1:ff::1", 0), "a sixth /64 of the /48");
        assert!(!w.hit_addr("2001:db8:1:0::2", 0), "a /64 with room left");
        assert!(
            w.hit_addr("2001:db8:2::1", 0),
            "another /48 has its own window"
        );
        assert!(w.hit_addr("2001:db8:1:ff::1", 60_000), "a new minute");
    }

    #[test]
    fn the_addresses_of_one_24_share_the_24_window() {
        let w = nested(2, 3, 100);
        for i in 1..=3 {
            assert!(w.hit_addr(&format!("198.51.100.{i}"), 0), "address {i}");
        }
        assert!(
            !w.hit_addr("198.51.100.200", 0),
            "a fourth address of the /24"
        );
        assert!(
            !w.hit_addr("::ffff:198.51.100.9", 0),
            "v4-mapped is in the /24"
        );
        assert!(w.hit_addr("198.51.101.1", 0), "another /24");
    }

    #[test]
    fn the_inner_window_still_limits_one_address() {
        let w = nested(2, 100, 100);
        assert!(w.hit_addr("2001:db8:1:2::1", 0));
        assert!(w.hit_addr("2001:db8:1:2::9", 0));
        assert!(!w.hit_addr("2001:db8:1:2::3", 0), "same /64");
        assert!(w.hit_addr("2001:db8:1:3::1", 0), "next /64, same /48");
        assert!(w.hit_addr("203.0.113.1", 0));
        assert!(w.hit_addr("203.0.113.1", 0));
        assert!(!w.hit_addr("203.0.113.1", 0), "IPv4 address");
        assert!(w.hit_addr("203.0.113.2", 0), "next address, same /24");
        assert!(
            w.hit_addr("not an ip", 0),
            "non-IP keys have their own window"
        );
        assert!(w.hit_addr("not an ip", 0));
        assert!(!w.hit_addr("not an ip", 0));
    }

    #[test]
    fn a_refused_hit_counts_in_no_window() {
        let w = nested(1, 2, 2);
        // One address at its own limit, hammering: its refusals do not use up the /24.
        assert!(w.hit_addr("192.0.2.1", 0));
        for _ in 0..10 {
            assert!(!w.hit_addr("192.0.2.1", 0));
        }
        assert!(w.hit_addr("192.0.2.2", 0), "the /24 had room for one more");
        // Likewise for a /64 inside its /48.
        let w = nested(1, 100, 2);
        assert!(w.hit_addr("2001:db8:5:1::1", 0));
        for _ in 0..10 {
            assert!(!w.hit_addr("2001:db8:5:1::1", 0));
        }
        assert!(
            w.hit_addr("2001:db8:5:2::1", 0),
            "the /48 had room for one more"
        );
        assert!(!w.hit_addr("2001:db8:5:3::1", 0), "and now it is full");
    }

    #[test]
    fn nested_tables_stay_bounded() {
        let w = NestedWindows::new(
            NestedLimits {
                address: 1,
                v4_24: 1,
                v6_48: 1,
            },
            50,
        );
        for i in 0..10_000u32 {
            let v4 = std::net::Ipv4Addr::from(i.wrapping_mul(2_654_435_761));
            w.hit_addr(&v4.to_string(), 0);
            w.hit_addr(&format!("2001:{:x}:{:x}::1", i >> 16, i & 0xffff), 0);
            assert!(w.lens().iter().all(|n| *n <= 50), "{:?}", w.lens());
        }
    }
}
