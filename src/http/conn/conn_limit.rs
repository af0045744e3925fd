//! Open connections per client address, for the accept loop's per-address cap
//! (`--max-connections-per-address`): one address (an IPv4 address, an IPv6 /64) cannot hold
//! every connection slot.
//!
//! The accept loop knows only the socket address (a proxy header arrives later, per request), so
//! behind a reverse proxy this counts the proxy.
//!
//! An address has an entry only while it has an open connection: the table never holds more
//! entries than connections are open (at most `--max-connections`), and an address with no
//! open connection costs nothing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use relay_core::{ip_key, AddrKey};

/// Open-connection counts by client address, each at most `cap`.
pub(crate) struct OpenPerAddress {
    cap: usize,
    open: Mutex<HashMap<AddrKey, usize>>,
}

/// One open connection counted for its address; dropping it uncounts it.
pub(crate) struct AddressSlot {
    table: Arc<OpenPerAddress>,
    key: AddrKey,
}

impl OpenPerAddress {
    /// A table allowing `cap` open connections per address.
    pub(super) fn new(cap: usize) -> Arc<Self> {
        Arc::new(OpenPerAddress {
            cap: cap.max(1),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Count one more open connection from `ip`; `None` when its address is at the cap.
    pub(crate) fn try_open(self: &Arc<Self>, ip: IpAddr) -> Option<AddressSlot> {
        let key = ip_key(ip);
        let mut open = self.lock();
        let n = open.entry(key.clone()).or_insert(0);
        if *n >= self.cap {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            table: Arc::clone(self),
            key,
        })
    }

    /// Addresses with at least one open connection (for tests).
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<AddrKey, usize>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.table.lock();
        if let Some(n) = open.get_mut(&self.key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_address_at_its_cap_is_refused_and_others_are_not() {
        let t = OpenPerAddress::new(2);
        let a = [
            t.try_open(ip("192.0.2.1")).unwrap(),
            t.try_open(ip("192.0.2.1")).unwrap(),
        ];
        assert!(t.try_open(ip("192.0.2.1")).is_none());
        assert!(t.try_open(ip("::ffff:192.0.2.1")).is_none(), "v4-mapped");
        let b = t.try_open(ip("192.0.2.2")).unwrap();
        drop(a);
        assert!(t.try_open(ip("192.0.2.1")).is_some(), "freed on close");
        drop(b);
    }

    #[test]
    fn ipv6_counts_by_64() {
        let t = OpenPerAddress::new(1);
        let _held = t.try_open(ip("2001:db8:1:2::1")).unwrap();
        assert!(t.try_open(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        assert!(t.try_open(ip("2001:db8:1:3::1")).is_some(), "another /64");
    }

    #[test]
    fn addresses_without_open_connections_hold_no_entry() {
        let t = OpenPerAddress::new(3);
        let held: Vec<_> = (0..100u8)
            .filter_map(|i| t.try_open(IpAddr::from([10, 0, 0, i])))
            .collect();
        assert_eq!(t.addresses(), 100);
        // A refused open leaves nothing behind either.
        let full = OpenPerAddress::new(1);
        let _one = full.try_open(ip("10.1.1.1")).unwrap();
        assert!(full.try_open(ip("10.1.1.1")).is_none());
        assert_eq!(full.addresses(), 1);
        drop(held);
        assert_eq!(t.addresses(), 0);
    }
}
