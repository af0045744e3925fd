//! Tallies the bench keeps per phase: request latencies (for percentiles) and errors by kind
//! (bounded: past [`MAX_KINDS`] distinct kinds, the rest count as `other`).

use std::collections::BTreeMap;

use serde::Serialize;

/// Distinct error kinds kept; more would only be noise.
const MAX_KINDS: usize = 32;

/// Errors by kind, in a bounded map.
#[derive(Default, Clone, Debug)]
pub(super) struct Errors(pub BTreeMap<String, u64>);

impl Errors {
    /// Count `n` errors of `kind`.
    pub(super) fn add(&mut self, kind: &str, n: u64) {
        if n == 0 {
            return;
        }
        if let Some(c) = self.0.get_mut(kind) {
            *c += n;
        } else if self.0.len() < MAX_KINDS {
            self.0.insert(kind.to_string(), n);
        } else {
            *self.0.entry("other".to_string()).or_insert(0) += n;
        }
    }

    /// Add another tally to this one.
    pub(super) fn merge(&mut self, other: &Errors) {
        for (k, n) in &other.0 {
            self.add(k, *n);
        }
    }
}

/// Latency percentiles in milliseconds.
#[derive(Serialize, Clone, Copy, Debug, Default)]
pub(super) struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentiles of latencies given in microseconds (sorted here).
pub(super) fn percentiles(lat_us: &mut [u32]) -> Percentiles {
    if lat_us.is_empty() {
        return Percentiles::default();
    }
    lat_us.sort_unstable();
    let at = |q: f64| {
        let rank = ((q * lat_us.len() as f64).ceil() as usize).clamp(1, lat_us.len());
        f64::from(lat_us[rank - 1]) / 1000.0
    };
    Percentiles {
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: f64::from(lat_us[lat_us.len() - 1]) / 1000.0,
    }
}

/// CPU time (user + system) this process has used so far: measured around the timed windows
/// to show what the load generator itself costs on a shared machine.
pub(super) fn process_cpu() -> std::time::Duration {
    // SAFETY: getrusage only writes the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return std::time::Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Microseconds in `d`, saturating (a request over 71 minutes is not a latency worth keeping).
pub(super) fn micros(d: std::time::Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u32> = (1..=100).rev().map(|x| x * 1000).collect();
        let p = percentiles(&mut v);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        let mut one = vec![2500];
        let p = percentiles(&mut one);
        assert_eq!((p.p50, p.p99, p.max), (2.5, 2.5, 2.5));
        assert_eq!(percentiles(&mut []).max, 0.0);
    }

    #[test]
    fn error_kinds_are_bounded() {
        let mut e = Errors::default();
        for i in 0..100 {
            e.add(&format!("k{i}"), 1);
        }
        e.add("k0", 2);
        assert_eq!(e.0.len(), MAX_KINDS + 1);
        assert_eq!(e.0["other"], 100 - MAX_KINDS as u64);
        assert_eq!(e.0.values().sum::<u64>(), 102);
    }
}
