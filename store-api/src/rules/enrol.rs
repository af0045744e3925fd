//! Enrolment (docs/protocol.md "Enrolment"): re-enrolling is idempotent; a revoked key stays
//! revoked; a weaker authority never overwrites what a stronger one recorded; a name is unique
//! only inside a proven account; at most `max_live` live enrolments; a new key the invite
//! authority allowed redeems its invite in the same commit (single use).

use crate::types::{EnrolOutcome, EnrolRequest, Enrolment, Invite, InviteClaim, InviteHash};

/// What an enrol request asks of the backend.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "one value per enrolment, moved straight into the backend's write"
)]
pub enum Step {
    /// Answer this and write nothing.
    Answer(EnrolOutcome),
    /// Write `new` (a first enrolment when `first`, else replacing the stored row, which the
    /// relay log names), unless [`name_taken`] by another live key: then `NameTaken`. With
    /// `redeem`, delete that invite in the same commit.
    Write {
        /// The row to store.
        new: Enrolment,
        /// No row was stored for this key before.
        first: bool,
        /// The invite to delete in the same commit.
        redeem: Option<InviteHash>,
    },
}

impl Step {
    /// The answer once the write (if any) is done.
    pub fn outcome_after_write(first: bool) -> EnrolOutcome {
        if first {
            EnrolOutcome::Enrolled
        } else {
            EnrolOutcome::AlreadyEnrolled
        }
    }
}

/// Decide `req` at `now_ms` given the key's stored enrolment, the live count and the stored
/// row of the invite `req` presents (read by the backend only for [`InviteClaim::Presented`]).
pub fn decide(
    stored: Option<&Enrolment>,
    req: EnrolRequest,
    live_count: u64,
    invite: Option<&Invite>,
    now_ms: u64,
) -> Step {
    match stored {
        Some(e) if e.revoked_at_ms.is_some() => Step::Answer(EnrolOutcome::Revoked),
        Some(e) => {
            if req.authority_rank < e.authority_rank {
                return Step::Answer(EnrolOutcome::AlreadyEnrolled);
            }
            let updated = Enrolment {
                host_name: req.host_name,
                owner_fp: req.owner_fp,
                account: req.account,
                org: req.org,
                client_id: req.client_id,
                authorized_by: req.authorized_by,
                authority_rank: req.authority_rank,
                ..e.clone()
            };
            if updated == *e {
                return Step::Answer(EnrolOutcome::AlreadyEnrolled);
            }
            Step::Write {
                new: updated,
                first: false,
                redeem: None,
            }
        }
        None => {
            let redeem = match req.invite {
                InviteClaim::NotNeeded => None,
                InviteClaim::Presented(hash) if super::invite::redeemable(invite, now_ms) => {
                    Some(hash)
                }
                InviteClaim::Presented(_) | InviteClaim::Missing => {
                    return Step::Answer(EnrolOutcome::InviteRefused)
                }
            };
            if live_count >= req.max_live {
                return Step::Answer(EnrolOutcome::Capacity);
            }
            Step::Write {
                redeem,
                new: Enrolment {
                    host_pubkey: req.host_pubkey,
                    host_name: req.host_name,
                    owner_fp: req.owner_fp,
                    account: req.account,
                    authorized_by: req.authorized_by,
                    authority_rank: req.authority_rank,
                    enrolled_at_ms: now_ms,
                    revoked_at_ms: None,
                    org: req.org,
                    client_id: req.client_id,
                },
                first: true,
            }
        }
    }
}

/// Another live key carries `e`'s name inside `e`'s proven account; `same_name` are the live
/// enrolments whose name equals `e`'s case-insensitively (as the backend's name index finds
/// them). No proven account: names are not unique.
pub fn name_taken<'a>(e: &Enrolment, same_name: impl IntoIterator<Item = &'a Enrolment>) -> bool {
    let Some(account) = &e.account else {
        return false;
    };
    same_name.into_iter().any(|o| {
        o.host_pubkey != e.host_pubkey
            && o.revoked_at_ms.is_none()
            && o.account.as_deref() == Some(account)
    })
}

/// How many same-name rows [`name_taken`] needs at most (every live key, plus one).
pub fn name_rows_limit(max_live: u64) -> usize {
    usize::try_from(max_live.saturating_add(1)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(rank: u8, account: Option<&str>) -> EnrolRequest {
        EnrolRequest {
            host_pubkey: [1; 32],
            host_name: "alice".into(),
            owner_fp: "fp".into(),
            account: account.map(str::to_string),
            authorized_by: "host-key".into(),
            authority_rank: rank,
            max_live: 2,
            invite: InviteClaim::NotNeeded,
            org: None,
            client_id: None,
            denied_if: Vec::new(),
        }
    }

    fn stored(rank: u8, account: Option<&str>) -> Enrolment {
        match decide(None, req(rank, account), 0, None, 10) {
            Step::Write { new, .. } => new,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_first_enrolment_is_written_at_now() {
        let e = stored(1, None);
        assert_eq!(e.enrolled_at_ms, 10);
        assert_eq!(e.revoked_at_ms, None);
        assert_eq!(Step::outcome_after_write(true), EnrolOutcome::Enrolled);
    }

    #[test]
    fn re_enrolling_unchanged_is_idempotent() {
        let e = stored(1, None);
        assert_eq!(
            decide(Some(&e), req(1, None), 1, None, 99),
            Step::Answer(EnrolOutcome::AlreadyEnrolled)
        );
    }

    #[test]
    fn a_revoked_key_stays_revoked() {
        let mut e = stored(1, None);
        e.revoked_at_ms = Some(20);
        assert_eq!(
            decide(Some(&e), req(9, Some("acct")), 0, None, 99),
            Step::Answer(EnrolOutcome::Revoked)
        );
    }

    #[test]
    fn a_weaker_authority_never_overwrites_a_stronger_one() {
        let e = stored(5, Some("acct"));
        assert_eq!(
            decide(Some(&e), req(1, None), 1, None, 99),
            Step::Answer(EnrolOutcome::AlreadyEnrolled)
        );
        let Step::Write { new, first, .. } = decide(Some(&e), req(5, Some("other")), 1, None, 99)
        else {
            panic!("an equal authority may change the record");
        };
        assert!(!first);
        assert_eq!(new.account.as_deref(), Some("other"));
        assert_eq!(new.enrolled_at_ms, 10, "the enrolment time stays");
    }

    #[test]
    fn a_new_key_beyond_the_live_cap_is_refused() {
        assert_eq!(
            decide(None, req(1, None), 2, None, 10),
            Step::Answer(EnrolOutcome::Capacity)
        );
        let e = stored(1, None);
        assert!(
            matches!(
                decide(Some(&e), req(2, None), 2, None, 10),
                Step::Write { .. }
            ),
            "a known key is not counted again"
        );
    }

    fn invite(expires_ms: u64) -> Invite {
        Invite {
            hash: [7; 32],
            created_ms: 1,
            expires_ms,
            note: String::new(),
        }
    }

    fn with_invite() -> EnrolRequest {
        EnrolRequest {
            invite: InviteClaim::Presented([7; 32]),
            ..req(1, None)
        }
    }

    #[test]
    fn a_new_key_redeems_its_invite_only_while_it_is_stored_and_unexpired() {
        let refused = Step::Answer(EnrolOutcome::InviteRefused);
        assert_eq!(decide(None, with_invite(), 0, None, 10), refused);
        assert_eq!(
            decide(None, with_invite(), 0, Some(&invite(10)), 10),
            refused
        );
        let Step::Write { redeem, first, .. } =
            decide(None, with_invite(), 0, Some(&invite(11)), 10)
        else {
            panic!("an unexpired invite admits a new key");
        };
        assert!(first);
        assert_eq!(redeem, Some([7; 32]));
    }

    #[test]
    fn a_new_key_without_an_invite_is_refused_a_live_one_is_not() {
        let missing = EnrolRequest {
            invite: InviteClaim::Missing,
            ..req(1, None)
        };
        assert_eq!(
            decide(None, missing.clone(), 0, None, 10),
            Step::Answer(EnrolOutcome::InviteRefused)
        );
        let mut e = stored(1, None);
        e.host_name = "old".into();
        assert!(matches!(
            decide(Some(&e), missing, 1, None, 10),
            Step::Write { redeem: None, .. }
        ));
    }

    #[test]
    fn a_live_key_re_enrolling_redeems_no_invite() {
        let mut e = stored(1, None);
        e.host_name = "old".into();
        let Step::Write { redeem, .. } = decide(Some(&e), with_invite(), 1, None, 10) else {
            panic!("a live key re-enrols without an invite");
        };
        assert_eq!(redeem, None);
        let mut r = e.clone();
        r.revoked_at_ms = Some(5);
        assert_eq!(
            decide(Some(&r), with_invite(), 1, Some(&invite(99)), 10),
            Step::Answer(EnrolOutcome::Revoked),
            "a revoked key stays revoked, its invite untouched"
        );
    }

    #[test]
    fn a_name_is_unique_only_inside_a_proven_account() {
        let mine = stored(5, Some("acct"));
        let mut other = stored(5, Some("acct"));
        other.host_pubkey = [2; 32];
        assert!(name_taken(&mine, [&other]));
        assert!(
            !name_taken(&mine, [&mine]),
            "a key never takes its own name"
        );
        let mut elsewhere = other.clone();
        elsewhere.account = Some("b".into());
        assert!(!name_taken(&mine, [&elsewhere]));
        let unproven = stored(1, None);
        assert!(
            !name_taken(&unproven, [&other]),
            "no account: no uniqueness"
        );
        let mut revoked = other.clone();
        revoked.revoked_at_ms = Some(1);
        assert!(!name_taken(&mine, [&revoked]));
    }
}
