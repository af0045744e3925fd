//! Live enrolments against `--max-enrolments`: at the cap every new host is refused (503), so the
//! relay warns once when live enrolments reach 90 % of it and once when they fall back under,
//! and `/metrics` shows both figures.

use std::sync::Mutex;

use super::Relay;

/// The share of the cap, in percent, at and above which the relay warns.
pub(crate) const WARN_PERCENT: u64 = 90;

/// Whether live enrolments were at or above [`WARN_PERCENT`] of the cap at the last check.
#[derive(Default)]
pub(crate) struct CapWatch {
    above: Mutex<bool>,
}

impl CapWatch {
    /// Read the live count with `read` (under the lock, so checks are ordered) and log a warning
    /// when it crosses [`WARN_PERCENT`] of `max` either way; the count read, if any.
    pub(crate) fn check(&self, max: u64, read: impl FnOnce() -> Option<u64>) -> Option<u64> {
        let mut above = self.above.lock().unwrap_or_else(|p| p.into_inner());
        let live = read()?;
        let high = u128::from(live) * 100 >= u128::from(max) * u128::from(WARN_PERCENT);
        if high && !*above {
            tracing::warn!(
                live,
                max,
                "live enrolments reached {WARN_PERCENT}% of --max-enrolments: at the cap new hosts are refused"
            );
        } else if !high && *above {
            tracing::warn!(
                live,
                max,
                "live enrolments back under {WARN_PERCENT}% of --max-enrolments"
            );
        }
        *above = high;
        Some(live)
    }
}

impl Relay {
    /// Check live enrolments against the cap (an O(1) counter read); the live count, unless the
    /// store could not be read.
    pub fn watch_enrolments(&self) -> Option<u64> {
        self.metrics
            .enrolment_cap
            .check(self.limits.max_enrolments, || {
                self.store.live_enrolment_count().ok()
            })
    }

    /// `--max-enrolments`.
    pub fn max_enrolments(&self) -> u64 {
        self.limits.max_enrolments
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_is_above_from_ninety_percent_and_ignores_failed_reads() {
        let w = CapWatch::default();
        let high = |w: &CapWatch| *w.above.lock().unwrap();
        assert_eq!(w.check(10, || Some(8)), Some(8));
        assert!(!high(&w));
        w.check(10, || Some(9));
        assert!(high(&w), "9 of 10 is 90 %");
        w.check(10, || Some(10));
        assert!(high(&w));
        w.check(10, || Some(8));
        assert!(!high(&w));
        assert_eq!(w.check(10, || None), None);
        assert!(!high(&w), "a failed read changes nothing");
    }
}
