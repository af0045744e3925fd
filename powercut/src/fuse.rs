//! The FUSE face of [`Fs`]: each kernel request reads or changes the written state; fsync and
//! fsyncdir move it into the durable state. Every reply carries zero entry and attribute TTLs and
//! every open asks for direct I/O, so after a power cut the kernel caches nothing stale. A handle
//! opened before a cut writes, truncates and syncs nothing (EIO): its process would not have
//! outlived the power. The injected faults (`crate::faults`) act here: the fsync delay (taken
//! without the lock, on one of several session threads), EIO on fsync and reads, ENOSPC.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::state::{Body, Fs, Node, ROOT};

/// Nothing is cached by the kernel: a cut changes any inode at any time.
const TTL: Duration = Duration::ZERO;
const BLOCK: u64 = 4096;
/// Session threads: a delayed fsync holds one while the others serve.
const THREADS: usize = 4;

/// The filesystem shared by the FUSE session and the signal thread (which cuts the power).
#[derive(Clone)]
pub(crate) struct Powercut {
    pub(crate) fs: Arc<Mutex<Fs>>,
    uid: u32,
    gid: u32,
}

type R<T> = Result<T, Errno>;

impl Powercut {
    pub(crate) fn new(fs: Fs) -> Powercut {
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Powercut {
            fs: Arc::new(Mutex::new(fs)),
            uid,
            gid,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Fs> {
        // A panic inside a handler leaves the tables consistent (each change is one step).
        self.fs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn attr(&self, ino: u64, n: &Node) -> FileAttr {
        let (kind, perm) = match n.body {
            Body::File(_) => (FileType::RegularFile, n.perm),
            Body::Dir(_) => (FileType::Directory, n.perm),
            Body::Socket => (FileType::Socket, n.perm),
        };
        FileAttr {
            ino: INodeNo(ino),
            size: n.size(),
            blocks: n.size().div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.ctime,
            crtime: n.ctime,
            kind,
            perm,
            nlink: n.nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: BLOCK as u32,
            flags: 0,
        }
    }

    fn attr_of(&self, fs: &Fs, ino: u64) -> R<FileAttr> {
        let n = fs.written.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        Ok(self.attr(ino, n))
    }

    /// Adds `name` in `parent` for a new inode holding `body`.
    fn make(&self, parent: u64, name: &OsStr, body: Body, mode: u32, umask: u32) -> R<FileAttr> {
        let mut fs = self.lock();
        let dir = fs.written.dir(parent).ok_or(Errno::ENOTDIR)?;
        if dir.contains_key(name) {
            return Err(Errno::EEXIST);
        }
        let ino = fs.alloc_ino();
        let perm = (mode & !umask & 0o7777) as u16;
        fs.written.nodes.insert(ino, Node::new(body, perm));
        if let Some(d) = fs.written.dir_mut(parent) {
            d.insert(name.to_os_string(), ino);
        }
        touch(&mut fs, parent);
        fs.written.relink();
        self.attr_of(&fs, ino)
    }

    fn open_handle(&self, fs: &mut Fs, ino: u64) -> FileHandle {
        *fs.open.entry(ino).or_default() += 1;
        FileHandle(fs.cuts)
    }

    fn do_setattr(
        &self,
        ino: u64,
        fh: Option<FileHandle>,
        mode: Option<u32>,
        size: Option<u64>,
        mtime: Option<TimeOrNow>,
    ) -> R<FileAttr> {
        let mut fs = self.lock();
        if let Some(fh) = fh {
            current(&fs, fh)?;
        }
        let (total, cap) = (fs.written.bytes(), fs.cap());
        let mut resized = None;
        let n = fs.written.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if let Some(size) = size {
            let Body::File(d) = &mut n.body else {
                return Err(Errno::EISDIR);
            };
            if size > d.len() as u64 && total + (size - d.len() as u64) > cap {
                return Err(Errno::ENOSPC);
            }
            let old = d.len();
            d.resize(size as usize, 0);
            n.mtime = SystemTime::now();
            resized = Some((old.min(size as usize), old.max(size as usize)));
        }
        if let Some(mode) = mode {
            n.perm = (mode & 0o7777) as u16;
        }
        if let Some(t) = mtime {
            n.mtime = match t {
                TimeOrNow::SpecificTime(t) => t,
                TimeOrNow::Now => SystemTime::now(),
            };
        }
        n.ctime = SystemTime::now();
        if let Some((from, to)) = resized {
            fs.mark(ino, from, to);
        }
        self.attr_of(&fs, ino)
    }

    fn do_write(&self, ino: u64, fh: FileHandle, offset: u64, data: &[u8], append: bool) -> R<u32> {
        let mut fs = self.lock();
        current(&fs, fh)?;
        let (total, cap) = (fs.written.bytes(), fs.cap());
        let n = fs.written.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let Body::File(d) = &mut n.body else {
            return Err(Errno::EISDIR);
        };
        let at = if append { d.len() } else { offset as usize };
        let end = at + data.len();
        if end > d.len() {
            if total + (end - d.len()) as u64 > cap {
                return Err(Errno::ENOSPC);
            }
            d.resize(end, 0);
        }
        d[at..end].copy_from_slice(data);
        n.mtime = SystemTime::now();
        fs.mark(ino, at, end);
        Ok(data.len() as u32)
    }

    fn do_fallocate(&self, ino: u64, fh: FileHandle, offset: u64, length: u64, mode: i32) -> R<()> {
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Err(Errno::from_i32(libc::EOPNOTSUPP));
        }
        if mode & libc::FALLOC_FL_KEEP_SIZE != 0 {
            return Ok(());
        }
        let end = offset.checked_add(length).ok_or(Errno::EFBIG)?;
        let mut fs = self.lock();
        current(&fs, fh)?;
        let (total, cap) = (fs.written.bytes(), fs.cap());
        let n = fs.written.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        let Body::File(d) = &mut n.body else {
            return Err(Errno::EISDIR);
        };
        if end > d.len() as u64 {
            if total + end - d.len() as u64 > cap {
                return Err(Errno::ENOSPC);
            }
            let old = d.len();
            d.resize(end as usize, 0);
            fs.mark(ino, old, end as usize);
        }
        Ok(())
    }

    /// fsync of a file through `fh`: after the fault delay, refused for a handle from before a
    /// cut (one during the delay included), failed with EIO while that fault is set (the
    /// unsynced data dropped), else the file's data made durable.
    fn do_fsync(&self, ino: u64, fh: FileHandle, datasync: bool) -> R<()> {
        self.delay_sync();
        let mut fs = self.lock();
        current(&fs, fh)?;
        if fs.faults.take_fsync_eio() {
            fs.fail_sync(ino);
            return Err(Errno::EIO);
        }
        fs.sync_file(ino, !datasync);
        Ok(())
    }

    /// fsync of a directory: after the fault delay, unless the power was cut meanwhile.
    fn do_fsyncdir(&self, ino: u64) -> R<()> {
        let cuts = self.lock().cuts;
        self.delay_sync();
        let mut fs = self.lock();
        if fs.cuts != cuts {
            return Err(Errno::EIO);
        }
        fs.sync_dir(ino);
        Ok(())
    }

    /// The fsync delay fault, waited out without the lock.
    fn delay_sync(&self) {
        let delay = self.lock().faults.fsync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }

    fn do_unlink(&self, parent: u64, name: &OsStr, want_dir: bool) -> R<()> {
        let mut fs = self.lock();
        let ino = fs.written.lookup(parent, name).ok_or(Errno::ENOENT)?;
        removable(
            &fs.written.nodes.get(&ino).ok_or(Errno::ENOENT)?.body,
            want_dir,
        )?;
        if let Some(d) = fs.written.dir_mut(parent) {
            d.remove(name);
        }
        touch(&mut fs, parent);
        fs.written.relink();
        fs.maybe_drop(ino);
        Ok(())
    }

    fn do_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: RenameFlags,
    ) -> R<()> {
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            return Err(Errno::EINVAL);
        }
        let mut fs = self.lock();
        let ino = fs.written.lookup(parent, name).ok_or(Errno::ENOENT)?;
        fs.written.dir(newparent).ok_or(Errno::ENOTDIR)?;
        let is_dir = matches!(
            fs.written.nodes.get(&ino).map(|n| &n.body),
            Some(Body::Dir(_))
        );
        let old = fs.written.lookup(newparent, newname);
        if let Some(old) = old {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if old == ino {
                return Ok(());
            }
            removable(
                &fs.written.nodes.get(&old).ok_or(Errno::ENOENT)?.body,
                is_dir,
            )?;
        }
        if is_dir && is_under(&fs, newparent, ino) {
            return Err(Errno::EINVAL);
        }
        if let Some(d) = fs.written.dir_mut(parent) {
            d.remove(name);
        }
        if let Some(d) = fs.written.dir_mut(newparent) {
            d.insert(newname.to_os_string(), ino);
        }
        touch(&mut fs, parent);
        touch(&mut fs, newparent);
        fs.written.relink();
        if let Some(old) = old {
            fs.maybe_drop(old);
        }
        Ok(())
    }

    fn do_link(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        let mut fs = self.lock();
        if !matches!(
            fs.written.nodes.get(&ino).map(|n| &n.body),
            Some(Body::File(_))
        ) {
            return Err(Errno::EPERM);
        }
        let d = fs.written.dir_mut(newparent).ok_or(Errno::ENOTDIR)?;
        if d.contains_key(newname) {
            return Err(Errno::EEXIST);
        }
        d.insert(newname.to_os_string(), ino);
        touch(&mut fs, newparent);
        fs.written.relink();
        self.attr_of(&fs, ino)
    }
}

/// Whether the read-EIO fault covers this read of `ino`.
fn read_fault(fs: &Fs, ino: u64, offset: u64, size: u32) -> bool {
    fs.faults.read_eio.is_some()
        && fs
            .name_of(ino)
            .is_some_and(|n| fs.faults.read_fails(n, offset, u64::from(size)))
}

/// A handle opened before the last power cut is refused (EIO).
fn current(fs: &Fs, fh: FileHandle) -> R<()> {
    if fh.0 == fs.cuts {
        Ok(())
    } else {
        Err(Errno::EIO)
    }
}

/// Whether a name holding `body` may go (unlink, rmdir, or replaced by a rename of a directory
/// when `dir`, else of a file): as rmdir(2) and unlink(2) answer.
fn removable(body: &Body, dir: bool) -> R<()> {
    match (body, dir) {
        (Body::Dir(e), true) if !e.is_empty() => Err(Errno::ENOTEMPTY),
        (Body::Dir(_), false) => Err(Errno::EISDIR),
        (Body::File(_) | Body::Socket, true) => Err(Errno::ENOTDIR),
        _ => Ok(()),
    }
}

/// Whether `ino` is `dir` or one of its ancestors (a directory may not move under itself).
fn is_under(fs: &Fs, dir: u64, ino: u64) -> bool {
    let mut todo = vec![ino];
    while let Some(d) = todo.pop() {
        if d == dir {
            return true;
        }
        if let Some(e) = fs.written.dir(d) {
            todo.extend(e.values());
        }
    }
    false
}

fn touch(fs: &mut Fs, ino: u64) {
    if let Some(n) = fs.written.nodes.get_mut(&ino) {
        let now = SystemTime::now();
        n.mtime = now;
        n.ctime = now;
    }
}

fn entry(reply: ReplyEntry, r: R<FileAttr>) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn empty(reply: ReplyEmpty, r: R<()>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

impl Filesystem for Powercut {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let fs = self.lock();
        let r = fs
            .written
            .dir(parent.0)
            .ok_or(Errno::ENOTDIR)
            .and_then(|d| d.get(name).copied().ok_or(Errno::ENOENT))
            .and_then(|ino| self.attr_of(&fs, ino));
        entry(reply, r);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(&self.lock(), ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        match self.do_setattr(ino.0, fh, mode, size, mtime) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let body = match mode & libc::S_IFMT {
            libc::S_IFREG => Body::File(Vec::new()),
            libc::S_IFSOCK => Body::Socket,
            _ => return reply.error(Errno::EPERM),
        };
        entry(reply, self.make(parent.0, name, body, mode, umask));
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let body = Body::Dir(Default::default());
        entry(reply, self.make(parent.0, name, body, mode, umask));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.do_unlink(parent.0, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.do_unlink(parent.0, name, true));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.do_rename(parent.0, name, newparent.0, newname, flags),
        );
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(reply, self.do_link(ino.0, newparent.0, newname));
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let mut fs = self.lock();
        if !fs.written.nodes.contains_key(&ino.0) {
            return reply.error(Errno::ENOENT);
        }
        let fh = self.open_handle(&mut fs, ino.0);
        reply.opened(fh, FopenFlags::FOPEN_DIRECT_IO);
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let existing = self.lock().written.lookup(parent.0, name);
        let r = match existing {
            Some(_) if flags & libc::O_EXCL != 0 => Err(Errno::EEXIST),
            Some(ino) => {
                let size = (flags & libc::O_TRUNC != 0).then_some(0);
                self.do_setattr(ino, None, None, size, None)
            }
            None => self.make(parent.0, name, Body::File(Vec::new()), mode, umask),
        };
        match r {
            Ok(a) => {
                let fh = self.open_handle(&mut self.lock(), a.ino.0);
                reply.created(&TTL, &a, Generation(0), fh, FopenFlags::FOPEN_DIRECT_IO);
            }
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fs = self.lock();
        match fs.written.nodes.get(&ino.0).map(|n| &n.body) {
            Some(Body::File(_)) if read_fault(&fs, ino.0, offset, size) => {
                reply.error(Errno::EIO);
            }
            Some(Body::File(d)) => {
                let from = (offset as usize).min(d.len());
                let to = from.saturating_add(size as usize).min(d.len());
                reply.data(&d[from..to]);
            }
            Some(Body::Dir(_)) => reply.error(Errno::EISDIR),
            Some(Body::Socket) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match self.do_write(ino.0, fh, offset, data, flags.0 & libc::O_APPEND != 0) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut fs = self.lock();
        // A handle from before a cut was already forgotten by it.
        if fh.0 == fs.cuts {
            if let Some(n) = fs.open.get_mut(&ino.0) {
                *n = n.saturating_sub(1);
            }
            fs.maybe_drop(ino.0);
        }
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.do_fsync(ino.0, fh, datasync));
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let fs = self.lock();
        let Some(entries) = fs.written.dir(ino.0) else {
            return reply.error(Errno::ENOTDIR);
        };
        let dots = [
            (ino.0, FileType::Directory, OsStr::new(".")),
            (ROOT, FileType::Directory, OsStr::new("..")),
        ];
        let named = entries.iter().map(|(name, child)| {
            let kind = match fs.written.nodes.get(child).map(|n| &n.body) {
                Some(Body::Dir(_)) => FileType::Directory,
                Some(Body::Socket) => FileType::Socket,
                _ => FileType::RegularFile,
            };
            (*child, kind, name.as_os_str())
        });
        for (i, (child, kind, name)) in dots
            .into_iter()
            .chain(named)
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(child), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.do_fsyncdir(ino.0));
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let fs = self.lock();
        let blocks = fs.cap() / BLOCK;
        let free = blocks.saturating_sub(fs.written.bytes().div_ceil(BLOCK));
        let files = fs.written.nodes.len() as u64;
        reply.statfs(
            blocks,
            free,
            free,
            files + 1_000_000,
            1_000_000,
            BLOCK as u32,
            255,
            BLOCK as u32,
        );
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.do_fallocate(ino.0, fh, offset, length, mode));
    }
}

/// Mount options: a named filesystem whose permissions the kernel checks.
pub(crate) fn config() -> fuser::Config {
    let mut c = fuser::Config::default();
    c.n_threads = Some(THREADS);
    c.mount_options = vec![
        fuser::MountOption::FSName("powercut".into()),
        fuser::MountOption::Subtype("powercut".into()),
        fuser::MountOption::DefaultPermissions,
    ];
    c
}

/// Whether `p` looks like a mount point we can use (an existing directory).
pub(crate) fn check_mountpoint(p: &Path) -> Result<(), String> {
    if p.is_dir() {
        Ok(())
    } else {
        Err(format!("mount point {} is not a directory", p.display()))
    }
}
