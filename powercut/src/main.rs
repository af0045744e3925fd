//! `powercut`: a FUSE filesystem that forgets what was not made durable, to test programs against
//! power loss rather than a mere process kill (whose writes the page cache still carries out).
//!
//! `powercut mount BACKING MOUNTPOINT [--seed N] [--torn]` serves MOUNTPOINT in the foreground.
//! fsync/fdatasync of a file makes its data durable; fsync of a directory makes its names durable.
//! SIGUSR1 cuts the power (the mount then shows only the durable state and serves on); SIGTERM or
//! SIGINT unmounts and writes the files back to BACKING.

mod backing;
mod fuse;
mod state;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "powercut",
    about = "A FUSE filesystem whose power can be cut (SIGUSR1)"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve MOUNTPOINT, loaded from BACKING, until SIGTERM.
    Mount {
        backing: PathBuf,
        mountpoint: PathBuf,
        /// Seed of the random choices a torn cut makes (printed with each cut).
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// A cut keeps a random prefix of each file's unsynced writes and may tear a page.
        #[arg(long)]
        torn: bool,
    },
}

fn main() -> ExitCode {
    let Cmd::Mount {
        backing,
        mountpoint,
        seed,
        torn,
    } = Cli::parse().cmd;
    match serve(&backing, &mountpoint, seed, torn) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("powercut: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Blocks SIGUSR1, SIGTERM and SIGINT in every thread (so the session threads never take them)
/// and returns the set to wait on.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on a local, then pthread_sigmask of this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGUSR1, libc::SIGTERM, libc::SIGINT] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// One line on stdout for whoever waits on it; a closed stdout is not an error.
fn say(line: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn serve(
    backing: &std::path::Path,
    mountpoint: &std::path::Path,
    seed: u64,
    torn: bool,
) -> Result<(), String> {
    fuse::check_mountpoint(mountpoint)?;
    let table = backing::load(backing)?;
    let set = block_signals();
    let fs = fuse::Powercut::new(state::Fs::new(table, torn.then(|| state::Rng::new(seed))));
    let session = fuser::Session::new(fs.clone(), mountpoint, &fuse::config()).map_err(|e| {
        format!(
            "mount {}: {e} (needs /dev/fuse, and fusermount3 unless root)",
            mountpoint.display()
        )
    })?;
    let session = session.spawn().map_err(|e| format!("session: {e}"))?;
    let notifier = session.notifier();
    say(&format!("powercut: serving {}", mountpoint.display()));
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: waits on the set blocked above; writes only `sig`.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        if sig != libc::SIGUSR1 {
            break;
        }
        let cached = {
            let mut fs = fs.lock();
            let cached = fs.cut();
            eprintln!(
                "powercut: power cut {} (seed {seed}{}): {} inodes durable",
                fs.cuts,
                if torn { ", torn" } else { "" },
                fs.written.nodes.len()
            );
            cached
        };
        // Outside the lock: the kernel may call back into the filesystem while invalidating.
        for ino in cached {
            let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
        }
        // Tells a waiting test that the cut is complete.
        say(&format!("powercut: cut {}", fs.lock().cuts));
    }
    session
        .umount_and_join()
        .map_err(|e| format!("unmount {}: {e}", mountpoint.display()))?;
    let written = fs.lock().written.clone();
    backing::save(backing, &written)?;
    eprintln!("powercut: unmounted, {} saved", backing.display());
    Ok(())
}
