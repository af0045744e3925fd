//! The backend conformance suite: the rules every [`RelayStore`] must obey, as functions over a
//! [`Backend`] (a factory of one store). A backend's tests run them all with
//! [`conformance_tests!`](crate::conformance_tests), one `#[test]` per rule, named after it:
//!
//! ```ignore
//! relay_store::conformance_tests!(MyBackend::new());
//! ```
//!
//! Checks panic on a broken rule (they are test code). Where a rule lives in a backend's own
//! bookkeeping (usage counters against a recount, index rows), the backend checks it in
//! [`Backend::check_invariants`], which the checks call after their writes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test suite: a check panics on a broken rule (it runs only in backends' tests)"
)]
#![allow(
    missing_docs,
    reason = "each check is a rule, named after it; the name is its doc"
)]

pub mod backup;
pub mod deny;
pub mod keys;
pub mod mail;
pub mod meta;
pub mod support;

use std::path::Path;
use std::sync::Arc;

use crate::{Clock, RelayStore, SharedStore};

/// One store of a backend under test, fresh and empty when made.
pub trait Backend {
    /// Open this backend's store (the same one at every call: a reopen once the last handle
    /// was closed), reading time from `clock`.
    fn open(&self, clock: Arc<dyn Clock>) -> SharedStore;
    /// [`Self::open`] with the relay log bounded by `keep` instead of the default.
    fn open_keeping(&self, clock: Arc<dyn Clock>, keep: crate::LogRetention) -> SharedStore;
    /// The schema version a store of this backend reports in its meta.
    fn schema_version(&self) -> u32;
    /// Check the backend's own bookkeeping against its data (panics when they differ).
    fn check_invariants(&self, _store: &dyn RelayStore) {}
    /// Restore the backup `file` into a second, new store of this backend (the one `open`
    /// opens stays as it is), check its bookkeeping, and open it.
    fn restore(&self, file: &Path, clock: Arc<dyn Clock>) -> SharedStore;
    /// Restore `file` into another new store of this backend and leave it closed: the
    /// restore's own answer, for files it must refuse.
    ///
    /// # Errors
    /// Whatever the backend's restore answers.
    fn try_restore(&self, file: &Path) -> Result<(), crate::BackupError>;
}

/// One `#[test]` per conformance rule, each on a fresh backend from `$new`.
#[macro_export]
macro_rules! conformance_tests {
    ($new:expr) => {
        $crate::conformance_tests!(@each $new;
            mail::insert_pull_ack_roundtrip,
            mail::a_pull_page_always_holds_one_item_whatever_its_byte_budget,
            mail::a_duplicate_answers_the_original_seq_and_time,
            mail::a_conflict_stores_nothing_even_for_other_targets,
            mail::concurrent_inserts_of_one_item_accept_it_once,
            mail::seqs_are_floored_at_the_clock_and_never_reused_across_restarts_and_epochs,
            mail::a_target_must_be_live_enrolled_at_commit_time,
            mail::a_push_batch_answers_each_item_on_its_own,
            mail::a_push_batch_sees_its_own_earlier_items,
            mail::queue_caps_are_inclusive_and_duplicates_are_not_charged,
            mail::sender_share_and_account_caps_hold_over_every_target,
            mail::the_sweep_expires_notifies_and_prunes,
            mail::the_sweep_sends_no_notice_past_the_senders_cap_or_twice,
            mail::never_expiring_items_outlive_every_sweep_and_send_no_notice,
            mail::an_item_leaving_its_queue_gives_back_its_usage,
            mail::a_notice_sees_the_items_before_it_leave_and_not_the_ones_after,
            mail::never_expiring_items_count_against_quotas_and_leave_on_ack,
            keys::enrolment_rules,
            keys::sightings_write_each_live_keys_latest_day_and_never_move_one_back,
            keys::an_invite_admits_one_new_key_once_before_it_expires,
            keys::issuing_an_invite_prunes_the_expired_and_caps_the_unexpired,
            keys::concurrent_enrolments_with_one_invite_admit_one_key,
            deny::a_deny_entry_refuses_its_subject_until_it_expires_and_survives_a_reopen,
            deny::adding_a_deny_entry_prunes_the_expired_and_caps_the_unexpired,
            deny::an_enrolment_records_its_client_and_a_deny_entry_refuses_it_in_its_commit,
            keys::a_rotation_moves_the_queue_after_the_new_keys_items,
            keys::a_revoked_key_loses_its_enc_ads_lists_and_enrolment_as_in_a_rotation,
            keys::a_purge_deletes_the_queue_and_tells_each_envelope_sender_once,
            keys::revoking_an_unknown_key_is_refused_and_changes_nothing,
            keys::a_fingerprint_prefix_finds_every_matching_enrolment,
            keys::v1_and_v2_ads_are_independent_and_the_last_write_wins,
            keys::a_v2_ad_of_a_key_not_live_at_commit_time_is_not_stored,
            keys::a_rotation_deletes_both_ads_of_the_old_key,
            keys::sender_lists_only_move_forward,
            keys::an_admission_reads_what_the_enrolment_and_sender_list_reads_do,
            keys::a_push_commits_only_while_its_sender_is_live,
            keys::idle_expiry_takes_only_live_idle_keys_with_empty_queues,
            meta::meta_epoch_heartbeat_and_the_pinned_relay_key,
            meta::the_relay_log_lists_newest_first_and_its_chain_verifies,
            meta::the_newest_entry_of_a_kind_is_found_however_deep_in_the_log,
            meta::enrolment_churn_never_pushes_other_entries_out_of_the_relay_log,
            meta::a_lease_holder_keeps_its_lease,
            meta::a_shared_challenge_book_is_bounded_expiring_and_single_use,
            backup::a_backup_restores_every_record_kind_with_a_new_epoch,
            backup::a_backup_with_repeated_items_or_dedup_rows_or_an_oversized_item_is_refused,
            backup::a_format_5_backup_still_restores,
        );
    };
    (@each $new:expr; $($module:ident :: $check:ident),* $(,)?) => {
        $(
            #[test]
            fn $check() {
                let backend = $new;
                $crate::conformance::$module::$check(&backend);
            }
        )*
    };
}
