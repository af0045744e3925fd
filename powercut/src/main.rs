//! `powercut`: a FUSE filesystem that forgets what was not made durable, to test programs against
//! power loss rather than a mere process kill (whose writes the page cache still carries out).
//!
//! `powercut mount BACKING MOUNTPOINT [--seed N] [--torn] [--fsync-delay-ms N] [--faults FILE]`
//! serves MOUNTPOINT in the foreground. fsync/fdatasync of a file makes its data durable; fsync of
//! a directory makes its names durable. SIGUSR1 cuts the power (the mount then shows only the
//! durable state and serves on; handles opened before it write nothing); SIGUSR2 reads the
//! faults to inject from FILE (`faults`: fsync delay, EIO on fsync or reads, ENOSPC); SIGTERM
//! or SIGINT unmounts and writes the files back to BACKING.

mod backing;
mod faults;
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
        /// Each fsync waits this long before it takes effect (a cut may land in between).
        #[arg(long, default_value_t = 0)]
        fsync_delay_ms: u64,
        /// The control file SIGUSR2 reads the faults to inject from (`faults`).
        #[arg(long)]
        faults: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let Cmd::Mount {
        backing,
        mountpoint,
        seed,
        torn,
        fsync_delay_ms,
        faults,
    } = Cli::parse().cmd;
    let opts = Opts {
        seed,
        torn,
        fsync_delay: std::time::Duration::from_millis(fsync_delay_ms),
        faults,
    };
    match serve(&backing, &mountpoint, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("powercut: {e}");
            ExitCode::FAILURE
        }
    }
}

/// How a mount behaves beyond its paths.
struct Opts {
    seed: u64,
    torn: bool,
    fsync_delay: std::time::Duration,
    faults: Option<PathBuf>,
}

/// Blocks SIGUSR1, SIGUSR2, SIGTERM and SIGINT in every thread (so the session threads never take them)
/// and returns the set to wait on.
fn block_signals() -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on a local, then pthread_sigmask of this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGUSR1, libc::SIGUSR2, libc::SIGTERM, libc::SIGINT] {
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

/// Read the faults from the control file into `fs`, at mount (the delay from the command line
/// stays unless the file sets one) and at each SIGUSR2. Returns a line for the waiting test.
fn load_faults(fs: &fuse::Powercut, opts: &Opts) -> String {
    let Some(path) = &opts.faults else {
        return "powercut: faults not loaded (no --faults file)".into();
    };
    let text = std::fs::read_to_string(path).unwrap_or_default();
    match faults::Faults::parse(&text) {
        Ok(mut f) => {
            if f.fsync_delay.is_zero() {
                f.fsync_delay = opts.fsync_delay;
            }
            let line = format!("powercut: faults {f:?}");
            fs.lock().faults = f;
            line
        }
        Err(e) => format!("powercut: faults not loaded: {e}"),
    }
}

fn serve(
    backing: &std::path::Path,
    mountpoint: &std::path::Path,
    opts: &Opts,
) -> Result<(), String> {
    let (seed, torn) = (opts.seed, opts.torn);
    fuse::check_mountpoint(mountpoint)?;
    let table = backing::load(backing)?;
    let set = block_signals();
    let fs = fuse::Powercut::new(state::Fs::new(table, torn.then(|| state::Rng::new(seed))));
    fs.lock().faults.fsync_delay = opts.fsync_delay;
    if opts.faults.is_some() {
        load_faults(&fs, opts);
    }
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
        if sig == libc::SIGUSR2 {
            say(&load_faults(&fs, opts));
            continue;
        }
        if sig != libc::SIGUSR1 {
            break;
        }
        let (cached, unsynced) = {
            let mut fs = fs.lock();
            let unsynced = fs.unsynced();
            let cached = fs.cut();
            eprintln!(
                "powercut: power cut {} (seed {seed}{}): {} inodes durable",
                fs.cuts,
                if torn { ", torn" } else { "" },
                fs.written.nodes.len()
            );
            (cached, unsynced)
        };
        // Outside the lock: the kernel may call back into the filesystem while invalidating.
        for ino in cached {
            let _ = notifier.inval_inode(fuser::INodeNo(ino), 0, 0);
        }
        // Tells a waiting test that the cut is complete, and what it dropped.
        say(&format!(
            "powercut: cut {}: {} bytes in {} files not synced",
            fs.lock().cuts,
            unsynced.1,
            unsynced.0
        ));
    }
    session
        .umount_and_join()
        .map_err(|e| format!("unmount {}: {e}", mountpoint.display()))?;
    let written = fs.lock().written.clone();
    backing::save(backing, &written)?;
    eprintln!("powercut: unmounted, {} saved", backing.display());
    Ok(())
}
