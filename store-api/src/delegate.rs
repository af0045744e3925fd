//! `delegate_relay_store!`: `impl RelayStore` for a backend whose inherent methods carry the
//! trait's names and signatures, so each backend states only what differs (leases, the shared
//! challenge book, close, its figures) instead of a 100-line list of one-line calls.
//!
//! The delegated list below is the trait's, once. A name the backend lacks as an inherent
//! method would resolve to the trait method itself and recurse (rustc does not lint recursion
//! inside another crate's macro): keep each backend's inherent operations under the trait's
//! names. The conformance suite calls 36 of the 38 through `dyn RelayStore` on both backends
//! (`expire_idle` and `dump` are called through it by tests/it/serve_limits.rs and the
//! backends' own tests), where a recursion would overflow the stack.

/// `impl RelayStore for $ty { $own... }` plus every other method as a call of `$ty`'s inherent
/// method of the same name. `$own` holds the methods the backend writes itself (those not in
/// the delegated list: `try_lease`, `shared_challenges`, `commit_stats`, `reopen_count`,
/// `close`, and optionally `live_keys`, which has a default).
#[macro_export]
macro_rules! delegate_relay_store {
    ($ty:ty { $($own:tt)* }) => {
        $crate::__delegate_relay_store! { $ty; { $($own)* };
            fn meta() -> $crate::Result<$crate::Meta>;
            fn pin_relay_pubkey(pk: $crate::Key32) -> $crate::Pending<()>;
            fn rotate_epoch(reason: &str) -> $crate::Pending<String>;
            fn heartbeat(now_ms: u64) -> $crate::Pending<()>;
            fn enrol(req: $crate::EnrolRequest) -> $crate::Pending<$crate::EnrolOutcome>;
            fn enrolment(key: &$crate::Key32) -> $crate::Result<Option<$crate::Enrolment>>;
            fn live_enrolments_by_name(name: &str, limit: usize) -> $crate::Result<Vec<$crate::Enrolment>>;
            fn live_enrolment_count() -> $crate::Result<u64>;
            fn enrolments_by_fingerprint(prefix: &str, limit: usize) -> $crate::Result<Vec<$crate::Enrolment>>;
            fn record_seen(seen: Vec<($crate::Key32, u32)>) -> $crate::Pending<u64>;
            fn expire_idle(now_ms: u64, idle_ms: u64, after: Option<$crate::Key32>, max: usize) -> $crate::Pending<$crate::IdleReport>;
            fn rebind(old: $crate::Key32, new: $crate::Key32) -> $crate::Pending<$crate::RebindOutcome>;
            fn revoke_key(req: $crate::RevokeRequest, notice: $crate::NoticeFn) -> $crate::Pending<$crate::RevokeOutcome>;
            fn put_invite(invite: $crate::Invite, max: u64) -> $crate::Pending<$crate::InviteOutcome>;
            fn hosts(filter: &$crate::HostFilter, each: &mut dyn FnMut(&$crate::HostRow) -> $crate::Result<()>) -> $crate::Result<u64>;
            fn put_enc_ad(ad: $crate::EncAd) -> $crate::Pending<()>;
            fn put_enc_ad_v2(ad: $crate::EncAdV2) -> $crate::Pending<bool>;
            fn enc_ad(key: &$crate::Key32) -> $crate::Result<Option<$crate::EncAd>>;
            fn enc_ads(key: &$crate::Key32) -> $crate::Result<$crate::EncAds>;
            fn put_sender_list(list: $crate::SenderList) -> $crate::Pending<$crate::SenderListOutcome>;
            fn sender_list(target: &$crate::Key32) -> $crate::Result<Option<$crate::SenderList>>;
            fn insert(req: $crate::InsertRequest) -> $crate::Pending<$crate::InsertOutcome>;
            fn insert_many(reqs: Vec<$crate::InsertRequest>) -> $crate::Pending<Vec<$crate::InsertOutcome>>;
            fn dedup(sender: &$crate::Key32, item_id: &str, target: &$crate::Key32) -> $crate::Result<Option<$crate::DedupRow>>;
            fn pull(target: &$crate::Key32, after: u64, limit: usize, max_bytes: u64) -> $crate::Result<$crate::Page>;
            fn cursor(target: &$crate::Key32) -> $crate::Result<$crate::Cursor>;
            fn usage_target(target: &$crate::Key32) -> $crate::Result<$crate::Usage>;
            fn usage_sender(sender: &$crate::Key32, target: &$crate::Key32) -> $crate::Result<$crate::Usage>;
            fn usage_account(account: &str) -> $crate::Result<$crate::Usage>;
            fn ack(target: &$crate::Key32, through: u64) -> $crate::Pending<$crate::AckOutcome>;
            fn delete_item(target: &$crate::Key32, seq: u64) -> $crate::Pending<bool>;
            fn sweep(now_ms: u64, dedup_horizon_ms: u64, quotas: $crate::Quotas, retention_ms: u64, max: usize, notice: $crate::NoticeFn) -> $crate::Pending<$crate::SweepReport>;
            fn log_op(kind: &str, detail: &str) -> $crate::Pending<()>;
            fn ops(limit: usize) -> $crate::Result<Vec<$crate::OpEntry>>;
            fn verify_log() -> $crate::Result<$crate::LogVerdict>;
            fn stats() -> $crate::Result<$crate::Stats>;
            fn dump(out: &mut dyn ::std::io::Write, opts: &$crate::DumpOptions) -> $crate::Result<Vec<(String, u64)>>;
            fn backup_to(out: &mut dyn ::std::io::Write, progress: &mut dyn FnMut(u64)) -> $crate::Result<$crate::BackupSummary, $crate::BackupError>;
        }
    };
}

/// The expansion of [`delegate_relay_store!`] (not for direct use).
#[doc(hidden)]
#[macro_export]
macro_rules! __delegate_relay_store {
    ($ty:ty; { $($own:tt)* }; $(fn $name:ident($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {
        impl $crate::RelayStore for $ty {
            $($own)*
            $(
                fn $name(&self, $($arg: $t),*) -> $ret {
                    <$ty>::$name(self, $($arg),*)
                }
            )*
        }
    };
}
