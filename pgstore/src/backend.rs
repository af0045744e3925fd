//! `impl RelayStore for PgStore`: the trait calls the store's operations (`ops/`). An
//! operation this backend did not implement would answer a clear error, never a wrong answer,
//! and be named in [`UNIMPLEMENTED`] (empty now: backup was the last).

use std::io::Write;
use std::sync::Arc;

use relay_store::{
    AckOutcome, BackupError, BackupSummary, ChallengeBook, CommitStats, Cursor, DedupRow,
    DumpOptions, EncAd, EncAdV2, EncAds, EnrolOutcome, EnrolRequest, Enrolment, HostFilter,
    HostRow, IdleReport, InsertOutcome, InsertRequest, Key32, LogVerdict, Meta, NoticeFn, OpEntry,
    Page, Pending, Quotas, RebindOutcome, RelayStore, Result, RevokeOutcome, RevokeRequest,
    SenderList, SenderListOutcome, Stats, SweepReport, Usage,
};

use crate::ops::lease::PgChallenges;
use crate::store::PgStore;

/// The operations this backend does not implement yet; `serve --store postgres://` names them
/// at start when there are any.
pub const UNIMPLEMENTED: &[&str] = &[];

impl RelayStore for PgStore {
    fn meta(&self) -> Result<Meta> {
        PgStore::meta(self)
    }
    fn pin_relay_pubkey(&self, pk: Key32) -> Pending<()> {
        PgStore::pin_relay_pubkey(self, pk)
    }
    fn rotate_epoch(&self, reason: &str) -> Pending<String> {
        PgStore::rotate_epoch(self, reason)
    }
    fn heartbeat(&self, now_ms: u64) -> Pending<()> {
        PgStore::heartbeat(self, now_ms)
    }
    fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Pending<bool> {
        PgStore::try_lease(self, name, holder, ttl_ms)
    }
    fn shared_challenges(&self) -> Option<Arc<dyn ChallengeBook>> {
        Some(PgChallenges::shared(self))
    }
    fn enrol(&self, req: EnrolRequest) -> Pending<EnrolOutcome> {
        PgStore::enrol(self, req)
    }
    fn enrolment(&self, key: &Key32) -> Result<Option<Enrolment>> {
        PgStore::enrolment(self, key)
    }
    fn live_enrolments_by_name(&self, name: &str, limit: usize) -> Result<Vec<Enrolment>> {
        PgStore::live_enrolments_by_name(self, name, limit)
    }
    fn live_enrolment_count(&self) -> Result<u64> {
        PgStore::live_enrolment_count(self)
    }
    fn enrolments_by_fingerprint(&self, prefix: &str, limit: usize) -> Result<Vec<Enrolment>> {
        PgStore::enrolments_by_fingerprint(self, prefix, limit)
    }
    fn live_keys(&self, keys: &[Key32]) -> Result<Vec<Key32>> {
        PgStore::live_keys(self, keys)
    }
    fn record_seen(&self, seen: Vec<(Key32, u32)>) -> Pending<u64> {
        PgStore::record_seen(self, seen)
    }
    fn expire_idle(
        &self,
        now_ms: u64,
        idle_ms: u64,
        after: Option<Key32>,
        max: usize,
    ) -> Pending<IdleReport> {
        PgStore::expire_idle(self, now_ms, idle_ms, after, max)
    }
    fn rebind(&self, old: Key32, new: Key32) -> Pending<RebindOutcome> {
        PgStore::rebind(self, old, new)
    }
    fn revoke_key(&self, req: RevokeRequest, notice: NoticeFn) -> Pending<RevokeOutcome> {
        PgStore::revoke_key(self, req, notice)
    }
    fn hosts(
        &self,
        filter: &HostFilter,
        each: &mut dyn FnMut(&HostRow) -> Result<()>,
    ) -> Result<u64> {
        PgStore::hosts(self, filter, each)
    }
    fn put_enc_ad(&self, ad: EncAd) -> Pending<()> {
        PgStore::put_enc_ad(self, ad)
    }
    fn put_enc_ad_v2(&self, ad: EncAdV2) -> Pending<bool> {
        PgStore::put_enc_ad_v2(self, ad)
    }
    fn enc_ad(&self, key: &Key32) -> Result<Option<EncAd>> {
        PgStore::enc_ad(self, key)
    }
    fn enc_ads(&self, key: &Key32) -> Result<EncAds> {
        PgStore::enc_ads(self, key)
    }
    fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome> {
        PgStore::put_sender_list(self, list)
    }
    fn sender_list(&self, target: &Key32) -> Result<Option<SenderList>> {
        PgStore::sender_list(self, target)
    }
    fn insert(&self, req: InsertRequest) -> Pending<InsertOutcome> {
        PgStore::insert(self, req)
    }
    fn insert_many(&self, reqs: Vec<InsertRequest>) -> Pending<Vec<InsertOutcome>> {
        PgStore::insert_many(self, reqs)
    }
    fn dedup(&self, sender: &Key32, item_id: &str, target: &Key32) -> Result<Option<DedupRow>> {
        PgStore::dedup(self, sender, item_id, target)
    }
    fn pull(&self, target: &Key32, after: u64, limit: usize, max_bytes: u64) -> Result<Page> {
        PgStore::pull(self, target, after, limit, max_bytes)
    }
    fn cursor(&self, target: &Key32) -> Result<Cursor> {
        PgStore::cursor(self, target)
    }
    fn usage_target(&self, target: &Key32) -> Result<Usage> {
        PgStore::usage_target(self, target)
    }
    fn usage_sender(&self, sender: &Key32, target: &Key32) -> Result<Usage> {
        PgStore::usage_sender(self, sender, target)
    }
    fn usage_account(&self, account: &str) -> Result<Usage> {
        PgStore::usage_account(self, account)
    }
    fn ack(&self, target: &Key32, through: u64) -> Pending<AckOutcome> {
        PgStore::ack(self, target, through)
    }
    fn delete_item(&self, target: &Key32, seq: u64) -> Pending<bool> {
        PgStore::delete_item(self, target, seq)
    }
    fn sweep(
        &self,
        now_ms: u64,
        dedup_horizon_ms: u64,
        quotas: Quotas,
        retention_ms: u64,
        max: usize,
        notice: NoticeFn,
    ) -> Pending<SweepReport> {
        PgStore::sweep(
            self,
            now_ms,
            dedup_horizon_ms,
            quotas,
            retention_ms,
            max,
            notice,
        )
    }
    fn log_op(&self, kind: &str, detail: &str) -> Pending<()> {
        PgStore::log_op(self, kind, detail)
    }
    fn ops(&self, limit: usize) -> Result<Vec<OpEntry>> {
        PgStore::ops(self, limit)
    }
    fn verify_log(&self) -> Result<LogVerdict> {
        PgStore::verify_log(self)
    }
    fn stats(&self) -> Result<Stats> {
        PgStore::stats(self)
    }
    fn dump(&self, out: &mut dyn Write, opts: &DumpOptions) -> Result<Vec<(String, u64)>> {
        PgStore::dump(self, out, opts)
    }
    fn backup_to(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupSummary, BackupError> {
        PgStore::backup_to(self, out, progress)
    }
    fn commit_stats(&self) -> CommitStats {
        CommitStats::default()
    }
    fn reopen_count(&self) -> u64 {
        0
    }
    fn close(&self) -> Result<()> {
        self.inner.shutdown();
        Ok(())
    }
}
