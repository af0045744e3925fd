//! A network namespace joined to the root namespace by a veth pair, made by a test with
//! iproute2 (`ip netns`, `ip link`, `ip route`, `ip rule`): a server started inside it (a
//! [`crate::cluster::PgCluster`] with [`crate::cluster::PgCluster::start_in_netns`]) is reached
//! over the pair's private /30, and the test cuts and restores that link to partition it.
//! Several namespaces can share one LAN instead ([`Lan`]: their pairs' root ends on a bridge
//! that has the root namespace's address), so they reach each other without the root routing
//! (the pg_auto_failover nodes of [`crate::ha::HaCluster::start_in_netns_or_skip`]); a test
//! then cuts one namespace off entirely ([`Netns::cut`]) or drops the packets between it and
//! one address, in one direction or both ([`Netns::drop_from`], [`Netns::drop_to`]). Removed
//! on drop (the namespace and, with it, both ends of the pair; a LAN's bridge), on every exit
//! path of the test.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// Namespaces made by this process so far: each takes its own names and /30.
static NEXT: AtomicU8 = AtomicU8::new(0);
/// LANs made by this process so far: each takes its own bridge name and /24.
static NEXT_LAN: AtomicU8 = AtomicU8::new(0);
/// The `ip rule` preference of the rules that drop arriving packets: ahead of the `local`
/// table's lookup, which each namespace moves from 0 to [`LOCAL_PREF`] (packets for a local
/// address otherwise never reach a later rule).
const DROP_PREF: &str = "10";
const LOCAL_PREF: &str = "100";

/// A namespace with a veth pair to the root namespace, deleted on drop.
pub struct Netns {
    name: String,
    /// The pair's end inside the namespace (the one [`Netns::cut`] sets down).
    inner_if: String,
    outer: Ipv4Addr,
    inner: Ipv4Addr,
    /// The prefix length of the inner address: 30 for a pair of its own, 24 on a [`Lan`].
    prefix: u8,
    /// The bridge the pair's root end joins (on a [`Lan`]); `None`: that end has `outer`.
    bridge: Option<String>,
}

/// A bridge in the root namespace with the address `10.x.y.1/24`, which namespaces join
/// ([`Lan::join`]): they reach each other and the root namespace over it. Deleted on drop.
pub struct Lan {
    bridge: String,
    net: [u8; 3],
    hosts: AtomicU8,
}

/// Run `ip` with `args`; `Err` with its stderr when it failed.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("running ip {}: {e}", args.join(" ")))?;
    if !out.status.success() {
        return Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Whether this process may make namespaces (root); else a skip line for `test`.
fn may_make_namespaces(test: &str) -> bool {
    let root = crate::privilege::running_as_root();
    if !root {
        eprintln!("SKIP {test}: network namespaces need root");
    }
    root
}

impl Netns {
    /// Make a namespace and its link, or print a skip line for `test` and answer `None` when
    /// we are not root or `ip netns` is unavailable.
    ///
    /// # Panics
    /// When the namespace was made but its link could not be set up (a failure, not a skip).
    pub fn create_or_skip(test: &str) -> Option<Netns> {
        if !may_make_namespaces(test) {
            return None;
        }
        let pid = std::process::id();
        // A /30 per namespace: the pid picks the third octet (tests of other processes), the
        // counter the fourth.
        Netns::make(test, |n| {
            let base = [10, 201, (pid % 250) as u8, (n % 64) * 4];
            (
                Ipv4Addr::new(base[0], base[1], base[2], base[3] + 1),
                Ipv4Addr::new(base[0], base[1], base[2], base[3] + 2),
                30,
                None,
            )
        })
    }

    /// A new namespace whose link `addrs` places (given the namespace's number): the root
    /// end's address, the inner one, its prefix length, the bridge the root end joins.
    fn make(
        test: &str,
        addrs: impl FnOnce(u8) -> (Ipv4Addr, Ipv4Addr, u8, Option<String>),
    ) -> Option<Netns> {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let name = format!("mbx-part-{pid}-{n}");
        if let Err(e) = ip(&["netns", "add", &name]) {
            eprintln!("SKIP {test}: `ip netns` unavailable ({e})");
            return None;
        }
        let (outer, inner, prefix, bridge) = addrs(n);
        let ns = Netns {
            name,
            inner_if: format!("mbx{}i{n}", pid % 100_000),
            outer,
            inner,
            prefix,
            bridge,
        };
        // From here the guard removes what was made, whatever fails.
        if let Err(e) = ns.link_up() {
            panic!("setting up the veth pair of {}: {e}", ns.name);
        }
        Some(ns)
    }

    /// The veth pair, its addresses (the root end's only when it joins no bridge), both ends
    /// and the namespace's loopback up, and the `local` table's rule moved behind
    /// [`DROP_PREF`].
    fn link_up(&self) -> Result<(), String> {
        let outer_if = self.inner_if.replacen('i', "o", 1);
        let inner = format!("{}/{}", self.inner, self.prefix);
        let name = self.name.as_str();
        ip(&[
            "link",
            "add",
            &outer_if,
            "type",
            "veth",
            "peer",
            "name",
            &self.inner_if,
            "netns",
            name,
        ])?;
        match &self.bridge {
            Some(bridge) => ip(&["link", "set", &outer_if, "master", bridge])?,
            None => ip(&[
                "addr",
                "add",
                &format!("{}/{}", self.outer, self.prefix),
                "dev",
                &outer_if,
            ])?,
        }
        ip(&["link", "set", &outer_if, "up"])?;
        ip(&["-n", name, "addr", "add", &inner, "dev", &self.inner_if])?;
        ip(&["-n", name, "link", "set", &self.inner_if, "up"])?;
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", name, "rule", "add", "pref", LOCAL_PREF, "lookup", "local",
        ])?;
        ip(&["-n", name, "rule", "del", "pref", "0", "lookup", "local"])
    }

    /// The namespace's file (`setns` takes it).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// The address inside the namespace (where its server listens).
    pub fn inner_addr(&self) -> Ipv4Addr {
        self.inner
    }

    /// The root namespace's address on the link (where the namespace's clients in the root
    /// namespace come from): the pair's root end, or the [`Lan`]'s.
    pub fn outer_addr(&self) -> Ipv4Addr {
        self.outer
    }

    /// Partition: the namespace's end of the pair set down. The root end loses its carrier and
    /// keeps its route, so packets to the namespace vanish without an error (as behind a dead
    /// switch): open connections hang, new ones time out.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn cut(&self) {
        ip(&["-n", &self.name, "link", "set", &self.inner_if, "down"])
            .unwrap_or_else(|e| panic!("cutting the link: {e}"));
    }

    /// Heal the partition: the namespace's end up again.
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn restore(&self) {
        ip(&["-n", &self.name, "link", "set", &self.inner_if, "up"])
            .unwrap_or_else(|e| panic!("restoring the link: {e}"));
    }

    /// Drop every packet arriving from `peer`, silently (an `ip rule ... blackhole` ahead of
    /// the local lookup): `peer`'s connections to this namespace hang, new ones time out.
    /// Undone by [`Netns::undrop_from`].
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn drop_from(&self, peer: Ipv4Addr) {
        self.rule("add", peer);
    }

    /// Undo [`Netns::drop_from`].
    ///
    /// # Panics
    /// When `ip` fails (e.g. there was no such drop).
    pub fn undrop_from(&self, peer: Ipv4Addr) {
        self.rule("del", peer);
    }

    fn rule(&self, op: &str, peer: Ipv4Addr) {
        let from = peer.to_string();
        ip(&[
            "-n",
            &self.name,
            "rule",
            op,
            "pref",
            DROP_PREF,
            "from",
            &from,
            "blackhole",
        ])
        .unwrap_or_else(|e| panic!("ip rule {op} from {peer}: {e}"));
    }

    /// Drop every packet this namespace sends to `peer` (a blackhole route): `peer` hears
    /// nothing more from here, while what it sends still arrives (unless
    /// [`Netns::drop_from`] too). Processes here get an error sending to `peer`; those
    /// elsewhere see only silence. Undone by [`Netns::undrop_to`].
    ///
    /// # Panics
    /// When `ip` fails.
    pub fn drop_to(&self, peer: Ipv4Addr) {
        self.blackhole_route("add", peer);
    }

    /// Undo [`Netns::drop_to`].
    ///
    /// # Panics
    /// When `ip` fails (e.g. there was no such drop).
    pub fn undrop_to(&self, peer: Ipv4Addr) {
        self.blackhole_route("del", peer);
    }

    fn blackhole_route(&self, op: &str, peer: Ipv4Addr) {
        let to = format!("{peer}/32");
        ip(&["-n", &self.name, "route", op, "blackhole", &to])
            .unwrap_or_else(|e| panic!("ip route {op} blackhole {to}: {e}"));
    }
}

impl Lan {
    /// Make the bridge, or print a skip line for `test` and answer `None` when we are not
    /// root or `ip` cannot make one.
    ///
    /// # Panics
    /// When the bridge was made but could not be set up.
    pub fn create_or_skip(test: &str) -> Option<Lan> {
        if !may_make_namespaces(test) {
            return None;
        }
        let n = NEXT_LAN.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let bridge = format!("mbx{}b{n}", pid % 100_000);
        if let Err(e) = ip(&["link", "add", &bridge, "type", "bridge"]) {
            eprintln!("SKIP {test}: no bridge ({e})");
            return None;
        }
        // A /24 per LAN: the counter picks the second octet, the pid the third.
        let lan = Lan {
            bridge,
            net: [10, 202 + n % 48, (pid % 250) as u8],
            hosts: AtomicU8::new(2),
        };
        let addr = format!("{}/24", lan.root_addr());
        if let Err(e) = ip(&["addr", "add", &addr, "dev", &lan.bridge])
            .and_then(|()| ip(&["link", "set", &lan.bridge, "up"]))
        {
            panic!("setting up bridge {}: {e}", lan.bridge);
        }
        Some(lan)
    }

    /// The root namespace's address on this LAN (where its clients come from).
    pub fn root_addr(&self) -> Ipv4Addr {
        let [a, b, c] = self.net;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// A new namespace on this LAN with the next free address, or `None` (a skip line for
    /// `test`) when `ip netns` is unavailable.
    ///
    /// # Panics
    /// As [`Netns::create_or_skip`], or when the LAN is full.
    pub fn join(&self, test: &str) -> Option<Netns> {
        let host = self.hosts.fetch_add(1, Ordering::SeqCst);
        assert!(host < 250, "LAN {} is full", self.bridge);
        let [a, b, c] = self.net;
        Netns::make(test, |_| {
            (
                self.root_addr(),
                Ipv4Addr::new(a, b, c, host),
                24,
                Some(self.bridge.clone()),
            )
        })
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        if let Err(e) = ip(&["link", "del", &self.bridge]) {
            eprintln!("removing bridge {}: {e}", self.bridge);
        }
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the root's end.
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("removing network namespace {}: {e}", self.name);
        }
    }
}
