//! The two states of a powercut filesystem: what was written and what is durable, and the rules
//! that move data between them (fsync, fsync of a directory, a power cut).
//!
//! Both states are inode tables. An inode number is never reused, so a kernel that still caches
//! an inode from before a cut never meets another file under that number.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

use crate::faults::Faults;

/// The root directory's inode number (FUSE's).
pub(crate) const ROOT: u64 = 1;
/// Size of a page for `--torn` (a tear never splits a sector of 512 bytes).
const PAGE: usize = 4096;
const SECTOR: usize = 512;
/// Most bytes of file data the written state may hold: a write past it fails with ENOSPC
/// (powercut is for test-sized stores; both states live in memory).
pub(crate) const MAX_BYTES: u64 = 2 << 30;

/// What an inode holds.
#[derive(Clone, Debug)]
pub(crate) enum Body {
    File(Vec<u8>),
    Dir(BTreeMap<OsString, u64>),
    /// A Unix socket's name (the relay's admin socket): no data.
    Socket,
}

/// One inode: its contents, permission bits and times.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) body: Body,
    pub(crate) perm: u16,
    pub(crate) mtime: SystemTime,
    pub(crate) ctime: SystemTime,
    /// Names pointing at it (computed, see [`Table::relink`]).
    pub(crate) nlink: u32,
}

impl Node {
    pub(crate) fn new(body: Body, perm: u16) -> Node {
        let now = SystemTime::now();
        Node {
            body,
            perm,
            mtime: now,
            ctime: now,
            nlink: 1,
        }
    }

    pub(crate) fn size(&self) -> u64 {
        match &self.body {
            Body::File(d) => d.len() as u64,
            Body::Dir(e) => e.len() as u64,
            Body::Socket => 0,
        }
    }
}

/// An inode table.
#[derive(Clone, Debug, Default)]
pub(crate) struct Table {
    pub(crate) nodes: HashMap<u64, Node>,
}

impl Table {
    /// A table holding only an empty root directory with these permission bits.
    pub(crate) fn with_root(perm: u16) -> Table {
        let mut t = Table::default();
        t.nodes
            .insert(ROOT, Node::new(Body::Dir(BTreeMap::new()), perm));
        t.relink();
        t
    }

    pub(crate) fn dir(&self, ino: u64) -> Option<&BTreeMap<OsString, u64>> {
        match self.nodes.get(&ino).map(|n| &n.body) {
            Some(Body::Dir(e)) => Some(e),
            _ => None,
        }
    }

    pub(crate) fn dir_mut(&mut self, ino: u64) -> Option<&mut BTreeMap<OsString, u64>> {
        match self.nodes.get_mut(&ino).map(|n| &mut n.body) {
            Some(Body::Dir(e)) => Some(e),
            _ => None,
        }
    }

    pub(crate) fn lookup(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.dir(parent)?.get(name).copied()
    }

    /// Inodes reachable by name from the root.
    fn reachable(&self) -> HashSet<u64> {
        let mut seen = HashSet::from([ROOT]);
        let mut todo = vec![ROOT];
        while let Some(ino) = todo.pop() {
            if let Some(entries) = self.dir(ino) {
                for child in entries.values() {
                    if seen.insert(*child) {
                        todo.push(*child);
                    }
                }
            }
        }
        seen
    }

    /// Recounts every inode's names (directories count `.` and each subdirectory's `..`).
    pub(crate) fn relink(&mut self) {
        let mut counts: HashMap<u64, u32> = HashMap::new();
        for (ino, node) in &self.nodes {
            if let Body::Dir(entries) = &node.body {
                *counts.entry(*ino).or_default() += 1;
                for child in entries.values() {
                    *counts.entry(*child).or_default() += 1;
                    if matches!(self.nodes.get(child).map(|n| &n.body), Some(Body::Dir(_))) {
                        *counts.entry(*ino).or_default() += 1;
                    }
                }
            }
        }
        *counts.entry(ROOT).or_default() += 1;
        for (ino, node) in self.nodes.iter_mut() {
            node.nlink = counts.get(ino).copied().unwrap_or(0);
        }
    }

    /// Bytes of file data held.
    pub(crate) fn bytes(&self) -> u64 {
        self.nodes
            .values()
            .map(|n| match &n.body {
                Body::File(d) => d.len() as u64,
                Body::Dir(_) | Body::Socket => 0,
            })
            .sum()
    }
}

/// A seeded generator for `--torn` (splitmix64: small, and a seed replays a cut exactly).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..=n`.
    fn upto(&mut self, n: usize) -> usize {
        (self.next() % (n as u64 + 1)) as usize
    }
}

/// The filesystem: the written state (what readers see) and the durable state (what a cut
/// leaves). Open handles only matter to the written state: an unlinked file lives while open.
#[derive(Debug)]
pub(crate) struct Fs {
    pub(crate) written: Table,
    pub(crate) durable: Table,
    /// Open handles per inode (an unlinked inode is dropped when its last handle closes).
    pub(crate) open: HashMap<u64, u32>,
    /// Per file, the byte range written since its last sync (an fsync copies only that: a
    /// journal preallocated to 64 MiB is not copied whole at every commit).
    dirty: HashMap<u64, (usize, usize)>,
    next_ino: u64,
    torn: Option<Rng>,
    /// Power cuts so far (handles opened before a cut are stale).
    pub(crate) cuts: u64,
    /// The faults injected now (`crate::faults`).
    pub(crate) faults: Faults,
}

impl Fs {
    /// A filesystem whose written and durable states are both `table` (e.g. loaded from the
    /// backing directory). `torn`: the seeded generator when cuts may keep torn tails.
    pub(crate) fn new(mut table: Table, torn: Option<Rng>) -> Fs {
        table.relink();
        let next_ino = table.nodes.keys().max().copied().unwrap_or(ROOT) + 1;
        Fs {
            durable: table.clone(),
            written: table,
            open: HashMap::new(),
            dirty: HashMap::new(),
            next_ino,
            torn,
            cuts: 0,
            faults: Faults::default(),
        }
    }

    /// Most bytes of file data the written state may hold now: [`MAX_BYTES`], or less while an
    /// ENOSPC fault is set.
    pub(crate) fn cap(&self) -> u64 {
        self.faults
            .enospc_at
            .map_or(MAX_BYTES, |b| b.min(MAX_BYTES))
    }

    /// An fsync of file `ino` failed (EIO): its data written since the last sync is dropped,
    /// as Linux drops the pages whose writeback failed (later reads and fsyncs see only what
    /// the disk holds).
    pub(crate) fn fail_sync(&mut self, ino: u64) {
        self.dirty.remove(&ino);
        let durable = match self.durable.nodes.get(&ino).map(|n| &n.body) {
            Some(Body::File(d)) => d.clone(),
            _ => Vec::new(),
        };
        if let Some(Body::File(w)) = self.written.nodes.get_mut(&ino).map(|n| &mut n.body) {
            *w = durable;
        }
    }

    /// One name of `ino` in the written state (for faults set by name).
    pub(crate) fn name_of(&self, ino: u64) -> Option<&OsStr> {
        self.written.nodes.values().find_map(|n| match &n.body {
            Body::Dir(e) => e
                .iter()
                .find(|(_, child)| **child == ino)
                .map(|(name, _)| name.as_os_str()),
            _ => None,
        })
    }

    pub(crate) fn alloc_ino(&mut self) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        ino
    }

    /// Drops `ino` from the written state when no name and no handle holds it.
    pub(crate) fn maybe_drop(&mut self, ino: u64) {
        let linked = self.written.nodes.get(&ino).is_some_and(|n| n.nlink > 0);
        if !linked && self.open.get(&ino).copied().unwrap_or(0) == 0 {
            self.written.nodes.remove(&ino);
            self.dirty.remove(&ino);
        }
    }

    /// Records that bytes `from..to` of file `ino` changed in the written state (a write, or a
    /// size change over that range).
    pub(crate) fn mark(&mut self, ino: u64, from: usize, to: usize) {
        let r = self.dirty.entry(ino).or_insert((from, to));
        *r = (r.0.min(from), r.1.max(to));
    }

    /// fsync/fdatasync of a file: its data and size (and, with `meta`, its mode) become durable.
    /// Its names do not: those are the directory's (as on ext4 and XFS without a journal commit
    /// of the directory, which an application may not count on).
    pub(crate) fn sync_file(&mut self, ino: u64, meta: bool) {
        let Some(w) = self.written.nodes.get(&ino) else {
            return;
        };
        let dirty = self.dirty.remove(&ino);
        match self.durable.nodes.get_mut(&ino) {
            Some(d) => {
                if let (Body::File(dd), Body::File(wd)) = (&mut d.body, &w.body) {
                    dd.resize(wd.len(), 0);
                    if let Some((from, to)) = dirty {
                        let to = to.min(wd.len());
                        if from < to {
                            dd[from..to].copy_from_slice(&wd[from..to]);
                        }
                    }
                }
                d.mtime = w.mtime;
                if meta {
                    d.perm = w.perm;
                    d.ctime = w.ctime;
                }
            }
            None => {
                let body = match &w.body {
                    Body::File(wd) => Body::File(wd.clone()),
                    Body::Dir(_) => Body::Dir(BTreeMap::new()),
                    Body::Socket => Body::Socket,
                };
                let mut d = Node::new(body, w.perm);
                d.mtime = w.mtime;
                self.durable.nodes.insert(ino, d);
            }
        }
    }

    /// fsync of a directory: the names in it become what they are in the written state. A named
    /// inode that was never synced becomes durable empty (its inode exists, its data does not).
    pub(crate) fn sync_dir(&mut self, ino: u64) {
        let Some(entries) = self.written.dir(ino).cloned() else {
            self.sync_file(ino, true);
            return;
        };
        if !self.durable.nodes.contains_key(&ino) {
            self.sync_file(ino, true);
        }
        for child in entries.values() {
            if !self.durable.nodes.contains_key(child) {
                if let Some(w) = self.written.nodes.get(child) {
                    let body = match &w.body {
                        Body::File(_) => Body::File(Vec::new()),
                        Body::Dir(_) => Body::Dir(BTreeMap::new()),
                        Body::Socket => Body::Socket,
                    };
                    let mut n = Node::new(body, w.perm);
                    n.mtime = w.mtime;
                    self.durable.nodes.insert(*child, n);
                }
            }
        }
        if let Some(d) = self.durable.dir_mut(ino) {
            *d = entries;
        }
        self.collect_durable();
    }

    /// Forgets durable inodes that no durable name reaches and the written state no longer has.
    fn collect_durable(&mut self) {
        let live = self.durable.reachable();
        let written = &self.written.nodes;
        self.durable
            .nodes
            .retain(|ino, _| live.contains(ino) || written.contains_key(ino));
    }

    /// Files with data written since their last sync, and how many bytes of it: what a cut now
    /// would drop (`--torn` keeps part of it). Drills report it to show their cuts bite.
    pub(crate) fn unsynced(&self) -> (usize, u64) {
        let bytes = self
            .dirty
            .values()
            .map(|(f, t)| t.saturating_sub(*f) as u64)
            .sum();
        (self.dirty.len(), bytes)
    }

    /// Cuts the power: the written state becomes the durable one (with `--torn`, each file keeps
    /// a random part of what was written over its durable data). Returns the inodes the kernel
    /// may cache (to invalidate).
    pub(crate) fn cut(&mut self) -> Vec<u64> {
        let before: Vec<u64> = self.written.nodes.keys().copied().collect();
        let live = self.durable.reachable();
        self.durable.nodes.retain(|ino, _| live.contains(ino));
        if let Some(rng) = self.torn.as_mut() {
            for (ino, d) in self.durable.nodes.iter_mut() {
                if let (Body::File(dd), Some(Body::File(wd))) =
                    (&mut d.body, self.written.nodes.get(ino).map(|n| &n.body))
                {
                    tear(dd, wd, rng);
                }
            }
        }
        self.durable.relink();
        self.written = self.durable.clone();
        self.open.clear();
        self.dirty.clear();
        self.cuts += 1;
        before
    }
}

/// `--torn`: `durable` keeps a random prefix of what `written` appended past it, and each page
/// where the two differ comes from either (a page may tear at a sector boundary). What the
/// cut keeps beyond the synced data is what a disk could have written back before the power went.
fn tear(durable: &mut Vec<u8>, written: &[u8], rng: &mut Rng) {
    let common = durable.len().min(written.len());
    for start in (0..common).step_by(PAGE) {
        let end = (start + PAGE).min(common);
        if durable[start..end] != written[start..end] {
            let sectors = (end - start).div_ceil(SECTOR);
            let keep = rng.upto(sectors) * SECTOR;
            let cut = (start + keep).min(end);
            durable[start..cut].copy_from_slice(&written[start..cut]);
        }
    }
    if written.len() > durable.len() {
        let extra = rng.upto(written.len() - durable.len());
        let from = durable.len();
        durable.extend_from_slice(&written[from..from + extra]);
        // The size may reach the disk before the last page's data: its tail reads as zeros.
        if extra > 0 && rng.upto(1) == 1 {
            let last_page = (durable.len() - 1) / PAGE * PAGE;
            let zero_from =
                (last_page.max(from) + rng.upto(PAGE / SECTOR) * SECTOR).min(durable.len());
            durable[zero_from..].fill(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(fs: &mut Fs, parent: u64, name: &str, data: &[u8]) -> u64 {
        let ino = fs.alloc_ino();
        fs.written
            .nodes
            .insert(ino, Node::new(Body::File(data.to_vec()), 0o600));
        fs.written.dir_mut(parent).unwrap().insert(name.into(), ino);
        fs.written.relink();
        ino
    }

    #[test]
    fn only_synced_data_and_names_survive_a_cut() {
        let mut fs = Fs::new(Table::with_root(0o755), None);
        let a = file(&mut fs, ROOT, "a", b"synced");
        fs.sync_file(a, true);
        fs.sync_dir(ROOT);
        let b = file(&mut fs, ROOT, "b", b"unsynced name");
        fs.sync_file(b, true);
        if let Body::File(d) = &mut fs.written.nodes.get_mut(&a).unwrap().body {
            d.extend_from_slice(b" and more");
        }
        fs.cut();
        assert_eq!(fs.written.lookup(ROOT, OsStr::new("b")), None);
        match &fs.written.nodes[&a].body {
            Body::File(d) => assert_eq!(d, b"synced"),
            _ => panic!("a is a file"),
        }
        assert!(
            !fs.durable.nodes.contains_key(&b),
            "unreachable inode collected"
        );
    }

    #[test]
    fn a_failed_fsync_drops_the_unsynced_data_and_keeps_the_synced() {
        let mut fs = Fs::new(Table::with_root(0o755), None);
        let a = file(&mut fs, ROOT, "a", b"synced");
        fs.sync_file(a, true);
        fs.sync_dir(ROOT);
        if let Body::File(d) = &mut fs.written.nodes.get_mut(&a).unwrap().body {
            d.extend_from_slice(b" and lost");
        }
        fs.mark(a, 6, 15);
        assert_eq!(fs.unsynced(), (1, 9));
        fs.fail_sync(a);
        assert_eq!(fs.unsynced(), (0, 0));
        match &fs.written.nodes[&a].body {
            Body::File(d) => assert_eq!(d, b"synced"),
            _ => panic!("a is a file"),
        }
        let b = file(&mut fs, ROOT, "b", b"never synced");
        fs.fail_sync(b);
        assert!(matches!(&fs.written.nodes[&b].body, Body::File(d) if d.is_empty()));
        assert_eq!(fs.name_of(b), Some(OsStr::new("b")));
    }

    #[test]
    fn an_enospc_fault_lowers_the_cap() {
        let mut fs = Fs::new(Table::with_root(0o755), None);
        assert_eq!(fs.cap(), MAX_BYTES);
        fs.faults.enospc_at = Some(1000);
        assert_eq!(fs.cap(), 1000);
    }

    #[test]
    fn torn_keeps_a_prefix_of_the_append_and_is_seeded() {
        let run = |seed| {
            let mut d = b"head".to_vec();
            let w: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8 + 1).collect();
            let mut w2 = b"head".to_vec();
            w2.extend_from_slice(&w);
            tear(&mut d, &w2, &mut Rng::new(seed));
            assert!(d.len() <= w2.len() && d.starts_with(b"head"));
            d
        };
        assert_eq!(run(7), run(7));
        let lens: HashSet<usize> = (0..20).map(|s| run(s).len()).collect();
        assert!(lens.len() > 1, "different seeds keep different prefixes");
    }
}
