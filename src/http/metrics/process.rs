//! The standard `process_*` metrics (the names every Prometheus client exports), read from
//! `/proc` at each scrape: resident and virtual memory, CPU seconds, open and allowed file
//! descriptors, start time. A figure `/proc` cannot give is left out, never made up.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric as _};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Most entries of `/proc/self/fd` counted (a bound on the scrape's work; far above any
/// sane `--max-connections`).
const MAX_FDS_COUNTED: usize = 1 << 20;

/// What `/proc/self` tells about this process.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct ProcessFacts {
    pub resident_bytes: Option<u64>,
    pub virtual_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub start_time_seconds: Option<u64>,
}

impl ProcessFacts {
    /// Read them now.
    pub(crate) fn read() -> ProcessFacts {
        let mut f = ProcessFacts::default();
        // SAFETY: sysconf has no preconditions.
        let (tick, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            // The command name may hold spaces and parentheses: fields start after the last ')'.
            let fields: Vec<&str> = stat
                .rsplit_once(')')
                .map(|(_, rest)| rest.split_whitespace().collect())
                .unwrap_or_default();
            // Fields 3.. of proc(5), so field N is at N - 3.
            let num = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
            if tick > 0 {
                let tick = tick as f64;
                if let (Some(u), Some(s)) = (num(14), num(15)) {
                    f.cpu_seconds = Some((u + s) as f64 / tick);
                }
                if let (Some(start), Some(boot)) = (num(22), boot_time()) {
                    f.start_time_seconds = Some(boot + (start as f64 / tick) as u64);
                }
            }
            f.virtual_bytes = num(23);
            if page > 0 {
                f.resident_bytes = num(24).map(|p| p * page as u64);
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            f.open_fds = Some(dir.take(MAX_FDS_COUNTED).count() as u64);
        }
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: `lim` is a valid rlimit to write into.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            f.max_fds = Some(lim.rlim_cur);
        }
        f
    }
}

/// Seconds since the Unix epoch at boot (`btime` of `/proc/stat`).
fn boot_time() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The `process_*` collector.
#[derive(Debug)]
pub(crate) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let f = ProcessFacts::read();
        if let Some(v) = f.cpu_seconds {
            let c = ConstCounter::new(v);
            c.encode(e.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                c.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                f.resident_bytes,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                f.virtual_bytes,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                f.open_fds,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                f.max_fds,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                f.start_time_seconds,
            ),
        ];
        for (name, help, v) in gauges {
            if let Some(v) = v.and_then(|v| i64::try_from(v).ok()) {
                let g = ConstGauge::new(v);
                g.encode(e.encode_descriptor(name, help, None, g.metric_type())?)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_plausible_figures() {
        let f = ProcessFacts::read();
        assert!(f.resident_bytes.unwrap() > 1 << 20, "{f:?}");
        assert!(f.virtual_bytes.unwrap() >= f.resident_bytes.unwrap());
        assert!(f.open_fds.unwrap() >= 3, "{f:?}");
        assert!(f.max_fds.unwrap() >= f.open_fds.unwrap());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let start = f.start_time_seconds.unwrap();
        assert!(start <= now + 1 && start + 86_400 > now, "{start} vs {now}");
        assert!(f.cpu_seconds.unwrap() >= 0.0);
    }
}
