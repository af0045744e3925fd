//! An admin's revocation and/or purge of one key (`relay-tool revoke` / `purge`), decided once
//! for every backend. Before anything is written: an unknown key, or a purge of a queue over
//! [`MAX_PURGE_ITEMS`], changes nothing. Then revoking (a live key only: a revocation is never
//! redone) runs before purging, so a notice for mail the key sent itself is not queued for a
//! revoked key; the purge takes the queue from the acked cursor to the head as it is before any
//! notice (a notice for mail the key sent itself is queued behind it and stays); dedup rows stay
//! as tombstones (a retried push of a purged item stays a duplicate); one relay-log entry
//! records it all. The backend does the I/O each step names, in this order.

use crate::log_text;
use crate::rules::log::Entry;
use crate::types::{Enrolment, RevokeOutcome, RevokeReport, RevokeRequest, MAX_PURGE_ITEMS};

/// One revoke/purge under way: what it still has to do and what it did so far.
#[derive(Debug, Clone)]
pub struct Revocation<'a> {
    req: &'a RevokeRequest,
    /// The key's enrolment when it is live (it is revoked if asked).
    live: Option<Enrolment>,
    report: RevokeReport,
}

impl<'a> Revocation<'a> {
    /// Start `req` over the key's stored enrolment (live or revoked): `Err(UnknownKey)`, nothing
    /// written, when it has none.
    ///
    /// # Errors
    /// The outcome to answer when nothing is to be done.
    pub fn start(
        req: &'a RevokeRequest,
        stored: Option<Enrolment>,
    ) -> Result<Revocation<'a>, RevokeOutcome> {
        let e = stored.ok_or(RevokeOutcome::UnknownKey)?;
        let already_revoked = e.revoked_at_ms.is_some();
        Ok(Revocation {
            req,
            live: (!already_revoked).then_some(e),
            report: RevokeReport {
                already_revoked,
                ..RevokeReport::default()
            },
        })
    }

    /// The purge's bound, given the items queued for the key: `Err(QueueTooLarge)`, nothing
    /// written, when a purge is asked of more than [`MAX_PURGE_ITEMS`] (refused, not
    /// half-purged).
    ///
    /// # Errors
    /// The outcome to answer when the queue is too large to purge.
    pub fn check_queue(&self, queued_items: u64) -> Result<(), RevokeOutcome> {
        if self.req.purge && queued_items > MAX_PURGE_ITEMS {
            return Err(RevokeOutcome::QueueTooLarge {
                items: queued_items,
            });
        }
        Ok(())
    }

    /// The live enrolment to revoke now (as a rotation revokes its old key: out of other
    /// targets' allowlists, its own allowlist and both enc ads gone, the row [`revoked`]), or
    /// `None`: no revocation asked, or the key is revoked already. Then [`Revocation::revoked`].
    pub fn to_revoke(&self) -> Option<&Enrolment> {
        self.live.as_ref().filter(|_| self.req.revoke)
    }

    /// The revocation is written; `lists_changed` other allowlists no longer name the key.
    pub fn revoked(&mut self, lists_changed: u64) {
        self.report.revoked = true;
        self.report.lists_changed = lists_changed;
    }

    /// The seqs the purge deletes, `(after, through)`: after the acked cursor `acked` through
    /// the head `head` as it is before any notice is queued; `None` when no purge is asked.
    /// Each deleted item starts its dedup row's horizon and earns its sender a notice (the
    /// sweep's rule, `relay_store::notice`); then [`Revocation::purged`].
    pub fn purge_range(&self, acked: u64, head: u64) -> Option<(u64, u64)> {
        self.req.purge.then_some((acked, head))
    }

    /// One item of `bytes` is purged, and its sender's notice was queued when `noticed`.
    pub fn purged(&mut self, bytes: u64, noticed: bool) {
        self.report.purged_items += 1;
        self.report.purged_bytes += bytes;
        self.report.notices += u64::from(noticed);
    }

    /// The relay-log entry to append (`revoke` when a revocation was asked, else `purge`; the
    /// admin's uid, the reason and the counts) and the answer.
    pub fn finish(self) -> (Entry, RevokeOutcome) {
        let entry = Entry {
            kind: if self.req.revoke { "revoke" } else { "purge" },
            detail: log_text::revoked(self.req, &self.report),
        };
        (entry, RevokeOutcome::Done(self.report))
    }
}

/// `e` revoked at `now_ms`: everything else about it stays (a revocation is never undone).
pub fn revoked(e: &Enrolment, now_ms: u64) -> Enrolment {
    Enrolment {
        revoked_at_ms: Some(now_ms),
        ..e.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::fixtures::enrolment;
    use crate::types::Quotas;

    fn req(revoke: bool, purge: bool) -> RevokeRequest {
        RevokeRequest {
            key: [1; 32],
            revoke,
            purge,
            quotas: Quotas::all(1),
            retention_ms: 1,
            admin_uid: 7,
            reason: "why".into(),
        }
    }

    fn live() -> Option<Enrolment> {
        Some(enrolment(1, None, 1, 10, false))
    }

    fn revoked_before() -> Option<Enrolment> {
        Some(enrolment(1, None, 1, 10, true))
    }

    #[test]
    fn an_unknown_key_changes_nothing() {
        let r = req(true, true);
        assert_eq!(
            Revocation::start(&r, None).err(),
            Some(RevokeOutcome::UnknownKey)
        );
    }

    #[test]
    fn a_purge_of_a_queue_over_the_cap_is_refused_not_half_done() {
        let r = req(true, true);
        let rev = Revocation::start(&r, live()).unwrap();
        assert_eq!(rev.check_queue(MAX_PURGE_ITEMS), Ok(()));
        assert_eq!(
            rev.check_queue(MAX_PURGE_ITEMS + 1),
            Err(RevokeOutcome::QueueTooLarge {
                items: MAX_PURGE_ITEMS + 1
            })
        );
        let only_revoke = req(true, false);
        let rev = Revocation::start(&only_revoke, live()).unwrap();
        assert_eq!(
            rev.check_queue(u64::MAX),
            Ok(()),
            "a revocation alone has no bound"
        );
    }

    #[test]
    fn only_a_live_key_is_revoked_and_a_revocation_is_never_redone() {
        let r = req(true, false);
        let rev = Revocation::start(&r, live()).unwrap();
        assert_eq!(rev.to_revoke(), live().as_ref());
        let rev = Revocation::start(&r, revoked_before()).unwrap();
        assert_eq!(rev.to_revoke(), None);
        let (_, outcome) = rev.finish();
        let RevokeOutcome::Done(report) = outcome else {
            panic!("{outcome:?}");
        };
        assert!(report.already_revoked && !report.revoked);
        let purge_only = req(false, true);
        let rev = Revocation::start(&purge_only, live()).unwrap();
        assert_eq!(rev.to_revoke(), None, "a purge alone revokes nothing");
    }

    #[test]
    fn a_purge_takes_the_queue_after_the_acked_cursor_through_the_head() {
        let r = req(false, true);
        let rev = Revocation::start(&r, live()).unwrap();
        assert_eq!(rev.purge_range(3, 9), Some((3, 9)));
        let only_revoke = req(true, false);
        let rev = Revocation::start(&only_revoke, live()).unwrap();
        assert_eq!(rev.purge_range(3, 9), None);
    }

    #[test]
    fn the_relay_log_names_a_revocation_or_a_purge_with_its_counts() {
        let r = req(true, true);
        let mut rev = Revocation::start(&r, live()).unwrap();
        rev.revoked(2);
        rev.purged(10, true);
        rev.purged(5, false);
        let (entry, outcome) = rev.finish();
        let want = RevokeReport {
            revoked: true,
            already_revoked: false,
            purged_items: 2,
            purged_bytes: 15,
            notices: 1,
            lists_changed: 2,
        };
        assert_eq!(outcome, RevokeOutcome::Done(want));
        assert_eq!(entry.kind, "revoke");
        assert_eq!(entry.detail, log_text::revoked(&r, &want));
        let p = req(false, true);
        let (entry, _) = Revocation::start(&p, revoked_before()).unwrap().finish();
        assert_eq!(entry.kind, "purge");
    }

    #[test]
    fn a_revoked_row_keeps_everything_but_its_revocation_time() {
        let e = enrolment(1, Some("acct"), 3, 10, false);
        let r = revoked(&e, 99);
        assert_eq!(r.revoked_at_ms, Some(99));
        assert_eq!(
            Enrolment {
                revoked_at_ms: None,
                ..r
            },
            e
        );
    }
}
