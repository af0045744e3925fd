//! Idle-enrolment expiry: a live enrolment last seen `idle_ms` or more ago whose queue is empty
//! is deleted (its place under the live cap freed); a revoked one stays revoked.

use crate::types::{last_seen_ms, Enrolment, Usage};

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
}
