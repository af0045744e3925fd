//! [`RelayStore`] for the fjall [`Store`]: thin delegation to the inherent operations, so the
//! relay reaches this backend through the interface at the cost of one indirect call.
//! One process owns a fjall store (its lock file), so leases are always held and challenges
//! stay in the relay's memory.

use std::io::Write;
use std::sync::Arc;

use relay_store::{
    AckOutcome, BackupError, BackupSummary, ChallengeBook, CommitStats, Cursor, DedupRow,
    DumpOptions, EncAd, EncAdV2, EncAds, EnrolOutcome, EnrolRequest, Enrolment, HostFilter,
    HostRow, IdleReport, InsertOutcome, InsertRequest, Key32, LogVerdict, Meta, NoticeFn, OpEntry,
    Page, Pending, Quotas, RebindOutcome, RelayStore, Result, RevokeOutcome, RevokeRequest,
    SenderList, SenderListOutcome, Stats, SweepReport, Usage,
};

use crate::Store;

impl RelayStore for Store {
    fn meta(&self) -> Result<Meta> {
        Store::meta(self)
    }
    fn pin_relay_pubkey(&self, pk: Key32) -> Pending<()> {
        Store::pin_relay_pubkey(self, pk)
    }
    fn rotate_epoch(&self, reason: &str) -> Pending<String> {
        Store::rotate_epoch(self, reason)
    }
    fn heartbeat(&self, now_ms: u64) -> Pending<()> {
        Store::heartbeat(self, now_ms)
    }
    /// The store lock admits one process: it always holds every lease.
    fn try_lease(&self, _name: &str, _holder: &str, _ttl_ms: u64) -> Pending<bool> {
        Pending::ready(Ok(true))
    }
    /// One process: the relay's in-memory book is the only one.
    fn shared_challenges(&self) -> Option<Arc<dyn ChallengeBook>> {
        None
    }
    fn enrol(&self, req: EnrolRequest) -> Pending<EnrolOutcome> {
        Store::enrol(self, req)
    }
    fn enrolment(&self, key: &Key32) -> Result<Option<Enrolment>> {
        Store::enrolment(self, key)
    }
    fn live_enrolments_by_name(&self, name: &str, limit: usize) -> Result<Vec<Enrolment>> {
        Store::live_enrolments_by_name(self, name, limit)
    }
    fn live_enrolment_count(&self) -> Result<u64> {
        Store::live_enrolment_count(self)
    }
    fn enrolments_by_fingerprint(&self, prefix: &str, limit: usize) -> Result<Vec<Enrolment>> {
        Store::enrolments_by_fingerprint(self, prefix, limit)
    }
    fn record_seen(&self, seen: Vec<(Key32, u32)>) -> Pending<u64> {
        Store::record_seen(self, seen)
    }
    fn expire_idle(
        &self,
        now_ms: u64,
        idle_ms: u64,
        after: Option<Key32>,
        max: usize,
    ) -> Pending<IdleReport> {
        Store::expire_idle(self, now_ms, idle_ms, after, max)
    }
    fn rebind(&self, old: Key32, new: Key32) -> Pending<RebindOutcome> {
        Store::rebind(self, old, new)
    }
    fn revoke_key(&self, req: RevokeRequest, notice: NoticeFn) -> Pending<RevokeOutcome> {
        Store::revoke_key(self, req, notice)
    }
    fn hosts(
        &self,
        filter: &HostFilter,
        each: &mut dyn FnMut(&HostRow) -> Result<()>,
    ) -> Result<u64> {
        Store::hosts(self, filter, each)
    }
    fn put_enc_ad(&self, ad: EncAd) -> Pending<()> {
        Store::put_enc_ad(self, ad)
    }
    fn put_enc_ad_v2(&self, ad: EncAdV2) -> Pending<bool> {
        Store::put_enc_ad_v2(self, ad)
    }
    fn enc_ad(&self, key: &Key32) -> Result<Option<EncAd>> {
        Store::enc_ad(self, key)
    }
    fn enc_ads(&self, key: &Key32) -> Result<EncAds> {
        Store::enc_ads(self, key)
    }
    fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome> {
        Store::put_sender_list(self, list)
    }
    fn sender_list(&self, target: &Key32) -> Result<Option<SenderList>> {
        Store::sender_list(self, target)
    }
    fn insert(&self, req: InsertRequest) -> Pending<InsertOutcome> {
        Store::insert(self, req)
    }
    fn insert_many(&self, reqs: Vec<InsertRequest>) -> Pending<Vec<InsertOutcome>> {
        Store::insert_many(self, reqs)
    }
    fn dedup(&self, sender: &Key32, item_id: &str, target: &Key32) -> Result<Option<DedupRow>> {
        Store::dedup(self, sender, item_id, target)
    }
    fn pull(&self, target: &Key32, after: u64, limit: usize, max_bytes: u64) -> Result<Page> {
        Store::pull(self, target, after, limit, max_bytes)
    }
    fn cursor(&self, target: &Key32) -> Result<Cursor> {
        Store::cursor(self, target)
    }
    fn usage_target(&self, target: &Key32) -> Result<Usage> {
        Store::usage_target(self, target)
    }
    fn usage_sender(&self, sender: &Key32, target: &Key32) -> Result<Usage> {
        Store::usage_sender(self, sender, target)
    }
    fn usage_account(&self, account: &str) -> Result<Usage> {
        Store::usage_account(self, account)
    }
    fn ack(&self, target: &Key32, through: u64) -> Pending<AckOutcome> {
        Store::ack(self, target, through)
    }
    fn delete_item(&self, target: &Key32, seq: u64) -> Pending<bool> {
        Store::delete_item(self, target, seq)
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
        Store::sweep(
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
        Store::log_op(self, kind, detail)
    }
    fn ops(&self, limit: usize) -> Result<Vec<OpEntry>> {
        Store::ops(self, limit)
    }
    fn verify_log(&self) -> Result<LogVerdict> {
        Store::verify_log(self)
    }
    fn stats(&self) -> Result<Stats> {
        Store::stats(self)
    }
    fn dump(&self, out: &mut dyn Write, opts: &DumpOptions) -> Result<Vec<(String, u64)>> {
        Store::dump(self, out, opts)
    }
    fn backup_to(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupSummary, BackupError> {
        Store::backup_to(self, out, progress)
    }
    fn commit_stats(&self) -> CommitStats {
        Store::commit_stats(self)
    }
    fn reopen_count(&self) -> u64 {
        Store::reopen_count(self)
    }
    fn close(&self) -> Result<()> {
        self.clone().close()
    }
}
