//! Last seen: the UTC day each live key was last seen (a hop by it, a push to it). A missing
//! day means "seen at enrolment".

/// Whether a sighting on `day` is written for a key whose enrolment is `live` (enrolled, not
/// revoked) and whose stored day is `stored`: a live key only, and a day never moves back (the
/// same day is not written again).
pub fn advances(live: bool, stored: Option<u32>, day: u32) -> bool {
    live && stored.is_none_or(|d| d < day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sighting_never_moves_a_day_back() {
        assert!(advances(true, None, 5));
        assert!(advances(true, Some(4), 5));
        assert!(
            !advances(true, Some(5), 5),
            "the same day is not written again"
        );
        assert!(!advances(true, Some(6), 5));
    }

    #[test]
    fn only_a_live_key_is_marked_seen() {
        assert!(!advances(false, None, 5));
        assert!(!advances(false, Some(4), 5));
    }
}
