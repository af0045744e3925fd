//! A network namespace joined to the root namespace by a veth pair, made by a test with
//! iproute2 (`ip netns`, `ip link`): a server started inside it (a [`crate::cluster::PgCluster`]
//! with [`crate::cluster::PgCluster::start_in_netns`]) is reached over the pair's private /30,
//! and the test cuts and restores that link to partition it. Removed on drop (the namespace and,
//! with it, both ends of the pair), on every exit path of the test.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

/// Namespaces made by this process so far: each takes its own names and /30.
static NEXT: AtomicU8 = AtomicU8::new(0);

/// A namespace with a veth pair to the root namespace, deleted on drop.
pub struct Netns {
    name: String,
    /// The pair's end inside the namespace (the one [`Netns::cut`] sets down).
    inner_if: String,
    outer: Ipv4Addr,
    inner: Ipv4Addr,
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

impl Netns {
    /// Make a namespace and its link, or print a skip line for `test` and answer `None` when
    /// we are not root or `ip netns` is unavailable.
    ///
    /// # Panics
    /// When the namespace was made but its link could not be set up (a failure, not a skip).
    pub fn create_or_skip(test: &str) -> Option<Netns> {
        if !crate::privilege::running_as_root() {
            eprintln!("SKIP {test}: network namespaces need root");
            return None;
        }
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let name = format!("mbx-part-{pid}-{n}");
        if let Err(e) = ip(&["netns", "add", &name]) {
            eprintln!("SKIP {test}: `ip netns` unavailable ({e})");
            return None;
        }
        // A /30 per namespace: the pid picks the third octet (tests of other processes), the
        // counter the fourth.
        let base = [10, 201, (pid % 250) as u8, (n % 64) * 4];
        let ns = Netns {
            name,
            inner_if: format!("mbx{}i{n}", pid % 100_000),
            outer: Ipv4Addr::new(base[0], base[1], base[2], base[3] + 1),
            inner: Ipv4Addr::new(base[0], base[1], base[2], base[3] + 2),
        };
        // From here the guard removes what was made, whatever fails.
        if let Err(e) = ns.link_up() {
            panic!("setting up the veth pair of {}: {e}", ns.name);
        }
        Some(ns)
    }

    /// The veth pair, its addresses, both ends and the namespace's loopback up.
    fn link_up(&self) -> Result<(), String> {
        let outer_if = self.inner_if.replacen('i', "o", 1);
        let (outer, inner) = (format!("{}/30", self.outer), format!("{}/30", self.inner));
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
        ip(&["addr", "add", &outer, "dev", &outer_if])?;
        ip(&["link", "set", &outer_if, "up"])?;
        ip(&["-n", name, "addr", "add", &inner, "dev", &self.inner_if])?;
        ip(&["-n", name, "link", "set", &self.inner_if, "up"])?;
        ip(&["-n", name, "link", "set", "lo", "up"])
    }

    /// The namespace's file (`setns` takes it).
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// The address inside the namespace (where its server listens).
    pub fn inner_addr(&self) -> Ipv4Addr {
        self.inner
    }

    /// The root namespace's end of the pair (where the namespace's clients come from).
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
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it the root's end.
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            eprintln!("removing network namespace {}: {e}", self.name);
        }
    }
}
