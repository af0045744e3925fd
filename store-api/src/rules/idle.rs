//! Idle-enrolment expiry: a live enrolment last seen `idle_ms` or more ago whose queue is empty
//! is deleted (its place under the live cap freed); a revoked one stays revoked.

use crate::log_text;
use crate::rules::log::Entry;
use crate::rules::sweep;
use crate::types::{last_seen_ms, Enrolment, IdleReport, Key32, Usage, DAY_MS};

/// `e`, last seen on `last_seen_day` (none: at enrolment) with `queue` queued, expires at
/// `now_ms` after `idle_ms` idle.
pub fn expires(
    e: &Enrolment,
    last_seen_day: Option<u32>,
    queue: Usage,
    now_ms: u64,
    idle_ms: u64,
) -> bool {
    e.revoked_at_ms.is_none()
        && now_ms.saturating_sub(last_seen_ms(e.enrolled_at_ms, last_seen_day)) >= idle_ms
        && queue == Usage::default()
}

/// One idle-expiry step over at most `max` enrolment rows: the backend reads `max + 1` rows
/// after where the last step stopped, hands each of the first `max` to [`Scan::row`] (and
/// deletes those [`expires`]), and appends the log entry [`Scan::finish`] gives, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    max: usize,
    read: usize,
    report: IdleReport,
}

impl Scan {
    /// A step that read `read` rows (of at most `max + 1` asked; `max` at least 1).
    pub fn new(max: usize, read: usize) -> Scan {
        Scan {
            max,
            read,
            report: IdleReport::default(),
        }
    }

    /// How many of the rows read to look at (the last one only tells whether to call again).
    pub fn take(&self) -> usize {
        self.max
    }

    /// The row of `key` was looked at; `expired`: it was deleted.
    pub fn row(&mut self, key: Key32, expired: bool) {
        self.report.scanned += 1;
        self.report.expired += u64::from(expired);
        self.report.next = Some(key);
    }

    /// The report (`next`: where to continue, `None` at the end) and the relay-log entry
    /// (`expire-idle` with the count) when any enrolment went.
    pub fn finish(mut self, idle_ms: u64) -> (IdleReport, Option<Entry>) {
        if !sweep::more(self.read, self.max) {
            self.report.next = None;
        }
        let entry = (self.report.expired > 0).then(|| Entry {
            kind: "expire-idle",
            detail: log_text::idle_expired(self.report.expired, idle_ms / DAY_MS),
        });
        (self.report, entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::enrolment;
    use crate::types::DAY_MS;

    fn e(revoked: bool) -> Enrolment {
        enrolment(1, None, 1, DAY_MS, revoked)
    }

    const EMPTY: Usage = Usage { items: 0, bytes: 0 };

    #[test]
    fn idle_for_the_period_with_an_empty_queue_expires() {
        assert!(expires(&e(false), None, EMPTY, 11 * DAY_MS, 10 * DAY_MS));
        assert!(!expires(
            &e(false),
            None,
            EMPTY,
            11 * DAY_MS - 1,
            10 * DAY_MS
        ));
    }

    #[test]
    fn a_sighting_restarts_the_idle_period() {
        assert!(!expires(
            &e(false),
            Some(5),
            EMPTY,
            11 * DAY_MS,
            10 * DAY_MS
        ));
        assert!(expires(&e(false), Some(5), EMPTY, 15 * DAY_MS, 10 * DAY_MS));
    }

    #[test]
    fn queued_mail_keeps_an_idle_key() {
        let one = Usage { items: 1, bytes: 0 };
        assert!(!expires(&e(false), None, one, 99 * DAY_MS, DAY_MS));
        let bytes = Usage { items: 0, bytes: 1 };
        assert!(!expires(&e(false), None, bytes, 99 * DAY_MS, DAY_MS));
    }

    #[test]
    fn a_revoked_key_never_expires_idle() {
        assert!(!expires(&e(true), None, EMPTY, 99 * DAY_MS, DAY_MS));
    }

    #[test]
    fn a_scan_continues_after_its_last_row_until_the_end_and_logs_only_what_went() {
        let mut scan = Scan::new(2, 3);
        assert_eq!(scan.take(), 2);
        scan.row([1; 32], false);
        scan.row([2; 32], true);
        let (report, entry) = scan.finish(10 * DAY_MS);
        assert_eq!(
            report,
            IdleReport {
                scanned: 2,
                expired: 1,
                next: Some([2; 32])
            }
        );
        let entry = entry.unwrap();
        assert_eq!(entry.kind, "expire-idle");
        assert_eq!(entry.detail, log_text::idle_expired(1, 10));
        let mut end = Scan::new(2, 2);
        end.row([1; 32], false);
        end.row([2; 32], false);
        let (report, entry) = end.finish(DAY_MS);
        assert_eq!(
            (report.next, entry),
            (None, None),
            "the end: nothing logged"
        );
    }
}
