//! powercut's rules, each checked on a real mount: a synced file survives byte for byte,
//! unsynced data and names do not, a rename survives once its directory is synced, O_APPEND,
//! pwrite, truncate, fallocate and chmod behave and obey the same rules, flock works (fjall's
//! lock file), `--torn` keeps a seeded prefix, and SIGTERM writes the files back to BACKING.
//! Fails (never skips) without /dev/fuse or fusermount3.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: a panic is how a test (and its helpers) fails"
)]

use relay_testkit::powercut as mount;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use mount::Powercut;

fn pc(args: &[&str]) -> Powercut {
    Powercut::mount(Path::new(env!("CARGO_BIN_EXE_powercut")), args)
}

fn sync_dir(dir: &Path) {
    File::open(dir).unwrap().sync_all().unwrap();
}

/// Writes `data` to `path` (created or truncated), fsyncs it when `sync`.
fn put(path: &Path, data: &[u8], sync: bool) {
    let mut f = File::create(path).unwrap();
    f.write_all(data).unwrap();
    if sync {
        f.sync_all().unwrap();
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Bytes that differ at every position (a lost or shifted byte shows).
fn pattern(n: usize, salt: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u32).wrapping_mul(31) as u8 ^ salt)
        .collect()
}

#[test]
fn a_synced_file_survives_byte_for_byte_and_unsynced_data_and_names_do_not() {
    let mut p = pc(&[]);
    let m = p.path().to_path_buf();
    let big = pattern(300_000, 7);
    put(&m.join("synced"), &big, true);
    fs::create_dir(m.join("sub")).unwrap();
    sync_dir(&m);
    put(&m.join("sub/in-sub"), b"data synced, sub not", true);
    put(&m.join("name-only"), b"", false);
    sync_dir(&m);
    // Unsynced from here on.
    OpenOptions::new()
        .append(true)
        .open(m.join("synced"))
        .unwrap()
        .write_all(b"tail")
        .unwrap();
    put(&m.join("new"), b"never synced", false);
    put(&m.join("data-synced-name-not"), b"data", true);
    fs::create_dir(m.join("newdir")).unwrap();
    fs::write(m.join("name-only"), b"unsynced data").unwrap();
    assert_eq!(
        fs::read(m.join("new")).unwrap(),
        b"never synced",
        "readers see written data"
    );

    p.cut();
    assert_eq!(names(&m), ["name-only", "sub", "synced"]);
    assert_eq!(fs::read(m.join("synced")).unwrap(), big, "byte for byte");
    assert_eq!(
        fs::read(m.join("name-only")).unwrap(),
        b"",
        "the name was synced, no data"
    );
    assert!(
        names(&m.join("sub")).is_empty(),
        "sub's names were never synced"
    );
    // The mount serves on after a cut.
    put(&m.join("after"), b"x", true);
    sync_dir(&m);
    p.cut();
    assert_eq!(fs::read(m.join("after")).unwrap(), b"x");
}

#[test]
fn a_rename_survives_once_its_directory_is_synced_and_an_unlink_likewise() {
    let mut p = pc(&[]);
    let m = p.path().to_path_buf();
    put(&m.join("old"), b"first", true);
    put(&m.join("doomed"), b"d", true);
    sync_dir(&m);
    // A temp-then-rename without the directory sync: the old state comes back.
    put(&m.join("tmp"), b"second", true);
    fs::rename(m.join("tmp"), m.join("old")).unwrap();
    fs::remove_file(m.join("doomed")).unwrap();
    p.cut();
    assert_eq!(names(&m), ["doomed", "old"]);
    assert_eq!(fs::read(m.join("old")).unwrap(), b"first");
    // With it: the new state stays.
    put(&m.join("tmp"), b"second", true);
    fs::rename(m.join("tmp"), m.join("old")).unwrap();
    fs::remove_file(m.join("doomed")).unwrap();
    sync_dir(&m);
    p.cut();
    assert_eq!(names(&m), ["old"]);
    assert_eq!(fs::read(m.join("old")).unwrap(), b"second");
    // A hard link is a name like any other.
    fs::hard_link(m.join("old"), m.join("linked")).unwrap();
    assert_eq!(fs::metadata(m.join("old")).unwrap().nlink(), 2);
    sync_dir(&m);
    p.cut();
    assert_eq!(fs::read(m.join("linked")).unwrap(), b"second");
    // RENAME_NOREPLACE refuses an existing target.
    let (a, b) = (
        std::ffi::CString::new(m.join("old").to_str().unwrap()).unwrap(),
        std::ffi::CString::new(m.join("linked").to_str().unwrap()).unwrap(),
    );
    // SAFETY: renameat2 on two NUL-terminated paths.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    assert_eq!(rc, -1);
    assert_eq!(
        std::io::Error::last_os_error().raw_os_error(),
        Some(libc::EEXIST)
    );
}

use std::os::unix::fs::MetadataExt;

#[test]
fn append_pwrite_truncate_fallocate_and_chmod_obey_the_rules() {
    let mut p = pc(&[]);
    let m = p.path().to_path_buf();
    let path = m.join("f");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
        .unwrap();
    f.write_all(b"one ").unwrap();
    f.write_all(b"two").unwrap();
    let rw = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    rw.write_at(b"ONE", 0).unwrap();
    f.write_all(b" three").unwrap();
    assert_eq!(
        fs::read(&path).unwrap(),
        b"ONE two three",
        "O_APPEND writes at the end"
    );
    rw.set_len(7).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"ONE two");
    // fallocate mode 0 extends with zeros.
    // SAFETY: fallocate on an open descriptor.
    let rc = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&rw), 0, 0, 10) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    assert_eq!(fs::read(&path).unwrap(), b"ONE two\0\0\0");
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    rw.sync_all().unwrap();
    sync_dir(&m);
    // Unsynced: a truncate, a pwrite past the end, a chmod.
    rw.set_len(2).unwrap();
    rw.write_at(b"zz", 20).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    p.cut();
    assert_eq!(fs::read(&path).unwrap(), b"ONE two\0\0\0");
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Handles from before the cut are gone with the power; a fresh one works.
    let mut g = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    g.seek(SeekFrom::Start(3)).unwrap();
    g.write_all(b"-").unwrap();
    let mut s = String::new();
    File::open(&path).unwrap().read_to_string(&mut s).unwrap();
    assert_eq!(s, "ONE-two\0\0\0");
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
    g.sync_all().unwrap();
    p.cut();
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o640,
        "fsync keeps the mode"
    );
    assert_eq!(fs::read(&path).unwrap(), b"ONE-two\0\0\0");
    // Directory modes (the relay refuses loose ones) are what mkdir and chmod set.
    fs::create_dir(m.join("d")).unwrap();
    fs::set_permissions(m.join("d"), fs::Permissions::from_mode(0o700)).unwrap();
    sync_dir(&m);
    p.cut();
    assert_eq!(
        fs::metadata(m.join("d")).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[test]
fn flock_and_unix_sockets_work_like_fjalls_lock_file_and_the_admin_socket() {
    let p = pc(&[]);
    let path = p.path().join("lock");
    let a = File::create(&path).unwrap();
    let b = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    a.try_lock().unwrap();
    assert!(matches!(
        b.try_lock(),
        Err(std::fs::TryLockError::WouldBlock)
    ));
    a.unlock().unwrap();
    b.try_lock().unwrap();
    // The relay's admin socket lives in its store directory.
    let sock = p.path().join("admin.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut c = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    c.write_all(b"hi").unwrap();
    let mut got = [0u8; 2];
    listener.accept().unwrap().0.read_exact(&mut got).unwrap();
    assert_eq!(&got, b"hi");
}

/// The black-box check: many files and names, some made durable and some not, one cut, and
/// exactly the durable ones are found with exactly their synced bytes.
#[test]
fn only_what_was_made_durable_is_found_after_a_cut() {
    let mut p = pc(&[]);
    let m = p.path().to_path_buf();
    // File i: its data is synced when i % 4 < 2, the directory is synced after it when i % 4
    // is 0 or 2. So every name up to the last directory sync (f38) is durable, with its data
    // when that was synced and empty when not; f39 is not.
    let data = |i: u8| pattern(1000 + i as usize * 997, i);
    for i in 0..40u8 {
        put(&m.join(format!("f{i:02}")), &data(i), i % 4 < 2);
        if i % 4 == 0 || i % 4 == 2 {
            sync_dir(&m);
        }
    }
    let expect: Vec<(String, Vec<u8>)> = (0..=38u8)
        .map(|i| {
            (
                format!("f{i:02}"),
                if i % 4 < 2 { data(i) } else { Vec::new() },
            )
        })
        .collect();
    p.cut();
    let found = names(&m);
    let want: Vec<String> = expect.iter().map(|(n, _)| n.clone()).collect();
    assert_eq!(found, want);
    for (name, data) in &expect {
        assert_eq!(&fs::read(m.join(name)).unwrap(), data, "{name}");
    }
}

#[test]
fn torn_cuts_keep_a_seeded_prefix_of_unsynced_appends() {
    let run = |seed: &str| {
        let mut p = pc(&["--torn", "--seed", seed]);
        let m = p.path().to_path_buf();
        let path = m.join("log");
        let head = pattern(5000, 1);
        put(&path, &head, true);
        sync_dir(&m);
        let tail = pattern(50_000, 2);
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&tail)
            .unwrap();
        p.cut();
        let got = fs::read(&path).unwrap();
        assert!(got.len() >= head.len() && got.len() <= head.len() + tail.len());
        assert_eq!(&got[..head.len()], &head[..], "the synced part is intact");
        // What was kept of the tail is the written bytes, except a zeroed end of its last page.
        let kept = &got[head.len()..];
        let good = kept.iter().zip(&tail).take_while(|(a, b)| a == b).count();
        assert!(
            kept[good..].iter().all(|b| *b == 0),
            "a torn tail reads as zeros"
        );
        assert!(kept.len() - good <= 4096, "at most one page torn");
        got.len()
    };
    let a: Vec<usize> = ["1", "2", "3", "4", "5"].iter().map(|s| run(s)).collect();
    assert_eq!(run("3"), a[2], "a seed replays its cut");
    assert!(a.iter().any(|&l| l != a[0]), "seeds differ: {a:?}");
}

#[test]
fn sigterm_unmounts_and_writes_the_files_back_to_the_backing_directory() {
    let mut p = pc(&[]);
    let m = p.path().to_path_buf();
    fs::create_dir(m.join("d")).unwrap();
    fs::set_permissions(m.join("d"), fs::Permissions::from_mode(0o700)).unwrap();
    put(&m.join("d/x"), b"kept", false);
    let backing = p.unmount();
    assert_eq!(fs::read(backing.join("d/x")).unwrap(), b"kept");
    assert_eq!(
        fs::metadata(backing.join("d"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(names(&m).is_empty(), "unmounted");
}
