//! What a bench reads of another process from `/proc` (same machine only): its CPU, memory and
//! bytes written to disk, a PostgreSQL cluster's CPU and writes over all its processes, and
//! the machine's load.

use std::time::Duration;

/// The fields of `/proc/<pid>/stat` after the `(comm)`: state is [0], ppid [1], utime [11],
/// stime [12], cutime [13], cstime [14].
pub fn stat(pid: u32) -> Result<Vec<String>, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    let rest = s.rsplit_once(')').map(|(_, r)| r).ok_or("bad /proc stat")?;
    Ok(rest.split_whitespace().map(str::to_string).collect())
}

fn ticks_to_duration(t: u64) -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(t * 1000 / hz)
}

/// CPU (user + system) `pid` has used so far, with that of the children it waited for when
/// `children` (PostgreSQL's postmaster reaps its backends: their CPU lands there).
pub fn cpu(pid: u32, children: bool) -> Result<Duration, String> {
    let f = stat(pid)?;
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    let t = ticks(11) + ticks(12) + if children { ticks(13) + ticks(14) } else { 0 };
    Ok(ticks_to_duration(t))
}

/// A memory figure of `pid` (`VmRSS`: resident now, `VmHWM`: peak resident), in MiB.
pub fn mib(pid: u32, field: &str) -> Result<f64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .map_err(|e| format!("/proc/{pid}/status: {e}"))?;
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .ok_or_else(|| format!("no {field} in /proc/{pid}/status"))
}

/// Bytes `pid` (all its threads) caused to be written to the block layer so far
/// (`write_bytes` of `/proc/<pid>/io`: journal, flushes and compactions alike).
pub fn write_bytes(pid: u32) -> Result<u64, String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io"))
        .map_err(|e| format!("/proc/{pid}/io: {e}"))?;
    s.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("no write_bytes in /proc/{pid}/io"))
}

/// The running children of `pid` (a PostgreSQL postmaster's backends and workers).
pub fn children(pid: u32) -> Result<Vec<u32>, String> {
    let me = pid.to_string();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc")
        .map_err(|e| format!("/proc: {e}"))?
        .flatten()
    {
        let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        // A process may end between the listing and the read: it is then not counted.
        if stat(p).is_ok_and(|f| f.get(1) == Some(&me)) {
            out.push(p);
        }
    }
    Ok(out)
}

/// CPU the whole PostgreSQL cluster has used: the postmaster with the backends it reaped, plus
/// the backends (and background processes) still running.
pub fn cluster_cpu(postmaster: u32) -> Result<Duration, String> {
    let mut total = cpu(postmaster, true)?;
    for c in children(postmaster)? {
        total += cpu(c, true).unwrap_or_default();
    }
    Ok(total)
}

/// Bytes the postmaster and its running processes wrote (backends that ended are not
/// counted: the bench's relays hold their connections for the whole run).
pub fn cluster_write_bytes(postmaster: u32) -> Result<u64, String> {
    let mut total = write_bytes(postmaster)?;
    for c in children(postmaster)? {
        total += write_bytes(c).unwrap_or(0);
    }
    Ok(total)
}

/// The 1-minute load average (how busy the shared machine was).
pub fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(0.0)
}

/// Bytes the files under `dir` occupy on disk (allocated blocks; sparse files count what they
/// use).
pub fn disk_bytes(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}
