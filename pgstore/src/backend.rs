//! `impl RelayStore for PgStore`, the one place this backend states the trait's methods: each
//! calls its operation in `ops/` (one file per group). An operation this backend did not
//! implement would answer a clear error, never a wrong answer, and be named in
//! [`UNIMPLEMENTED`] (empty now: backup was the last).

use std::io::Write;
use std::sync::Arc;

use relay_store::{
    AckOutcome, Admission, BackupError, BackupSummary, ChallengeBook, CommitStats, Cursor,
    DedupRow, DenyEntry, DenyOutcome, DenySubject, DumpOptions, EncAd, EncAdV2, EncAds,
    EnrolOutcome, EnrolRequest, Enrolment, HostFilter, HostRow, IdleReport, InsertOutcome,
    InsertRequest, Invite, InviteOutcome, Key32, LogVerdict, Meta, NoticeFn, OpEntry, Page,
    Pending, ProcessRow, Quotas, RebindOutcome, RelayStore, Result, RevokeOutcome, RevokeRequest,
    SenderList, SenderListOutcome, Stats, StoreEvents, SweepReport, Usage,
};

use crate::ops::lease::PgChallenges;
use crate::ops::{
    admin, admission, backup, deny, dump, enrol, invite, lease, lists, meta, oplog, process, queue,
    rebind, sweep,
};
use crate::store::PgStore;

/// The operations this backend does not implement yet; `serve --store postgres://` names them
/// at start when there are any.
pub const UNIMPLEMENTED: &[&str] = &[];

impl RelayStore for PgStore {
    fn meta(&self) -> Result<Meta> {
        meta::meta(self.ctx())
    }
    fn pin_relay_pubkey(&self, pk: Key32) -> Pending<()> {
        meta::pin_relay_pubkey(self.ctx(), pk)
    }
    fn rotate_epoch(&self, reason: &str) -> Pending<String> {
        meta::rotate_epoch(self.ctx(), reason)
    }
    fn heartbeat(&self, now_ms: u64) -> Pending<()> {
        meta::heartbeat(self.ctx(), now_ms)
    }
    fn try_lease(&self, name: &str, holder: &str, ttl_ms: u64) -> Pending<bool> {
        lease::try_lease(self.ctx(), name, holder, ttl_ms)
    }
    fn shared_challenges(&self) -> Option<Arc<dyn ChallengeBook>> {
        Some(PgChallenges::shared(self.ctx()))
    }
    fn watch(&self) -> Option<StoreEvents> {
        Some(crate::watch::start_watch(self.ctx()))
    }
    fn beat_process(&self, row: ProcessRow) -> Pending<()> {
        process::beat_process(self.ctx(), row)
    }
    fn leave_process(&self, id: &str) -> Pending<()> {
        process::leave_process(self.ctx(), id)
    }
    fn processes(&self) -> Result<Vec<ProcessRow>> {
        process::processes(self.ctx())
    }
    fn queue_heads(&self, keys: &[Key32]) -> Result<Vec<(Key32, u64)>> {
        process::queue_heads(self.ctx(), keys)
    }
    fn enrol(&self, req: EnrolRequest) -> Pending<EnrolOutcome> {
        enrol::enrol(self.ctx(), req)
    }
    fn enrolment(&self, key: &Key32) -> Result<Option<Enrolment>> {
        enrol::enrolment(self.ctx(), key)
    }
    fn live_enrolments_by_name(&self, name: &str, limit: usize) -> Result<Vec<Enrolment>> {
        enrol::live_enrolments_by_name(self.ctx(), name, limit)
    }
    fn enrolment_async(&self, key: &Key32) -> Pending<Option<Enrolment>> {
        enrol::enrolment_async(self.ctx(), key)
    }
    fn live_enrolment_count(&self) -> Result<u64> {
        enrol::live_enrolment_count(self.ctx())
    }
    fn enrolments_by_fingerprint(&self, prefix: &str, limit: usize) -> Result<Vec<Enrolment>> {
        enrol::enrolments_by_fingerprint(self.ctx(), prefix, limit)
    }
    fn live_enrolments_by_client(&self, client_id: &str, limit: usize) -> Result<Vec<Enrolment>> {
        enrol::live_enrolments_by_client(self.ctx(), client_id, limit)
    }
    fn live_keys(&self, keys: &[Key32]) -> Result<Vec<Key32>> {
        enrol::live_keys(self.ctx(), keys)
    }
    fn record_seen(&self, seen: Vec<(Key32, u32)>) -> Pending<u64> {
        enrol::record_seen(self.ctx(), seen)
    }
    fn expire_idle(
        &self,
        now_ms: u64,
        idle_ms: u64,
        after: Option<Key32>,
        max: usize,
    ) -> Pending<IdleReport> {
        admin::expire_idle(self.ctx(), now_ms, idle_ms, after, max)
    }
    fn rebind(&self, old: Key32, new: Key32) -> Pending<RebindOutcome> {
        rebind::rebind(self.ctx(), old, new)
    }
    fn revoke_key(&self, req: RevokeRequest, notice: NoticeFn) -> Pending<RevokeOutcome> {
        rebind::revoke_key(self.ctx(), req, notice)
    }
    fn put_invite(&self, invite: Invite, max: u64) -> Pending<InviteOutcome> {
        invite::put_invite(self.ctx(), invite, max)
    }
    fn put_deny(&self, entry: DenyEntry, max: u64) -> Pending<DenyOutcome> {
        deny::put_deny(self.ctx(), entry, max)
    }
    fn denied(&self, subjects: &[DenySubject], now_ms: u64) -> Result<bool> {
        deny::denied(self.ctx(), subjects, now_ms)
    }
    fn hosts(
        &self,
        filter: &HostFilter,
        each: &mut dyn FnMut(&HostRow) -> Result<()>,
    ) -> Result<u64> {
        admin::hosts(self.ctx(), filter, each)
    }
    fn put_enc_ad(&self, ad: EncAd) -> Pending<()> {
        lists::put_enc_ad(self.ctx(), ad)
    }
    fn put_enc_ad_v2(&self, ad: EncAdV2) -> Pending<bool> {
        lists::put_enc_ad_v2(self.ctx(), ad)
    }
    fn enc_ad(&self, key: &Key32) -> Result<Option<EncAd>> {
        lists::enc_ad(self.ctx(), key)
    }
    fn enc_ads(&self, key: &Key32) -> Result<EncAds> {
        lists::enc_ads(self.ctx(), key)
    }
    fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome> {
        lists::put_sender_list(self.ctx(), list)
    }
    fn sender_list(&self, target: &Key32) -> Result<Option<SenderList>> {
        lists::sender_list(self.ctx(), target)
    }
    fn admission(&self, target: &Key32) -> Result<Admission> {
        admission::admission(self.ctx(), target)
    }
    fn admissions(&self, targets: &[Key32]) -> Pending<Vec<Admission>> {
        admission::admissions(self.ctx(), targets)
    }
    fn insert(&self, req: InsertRequest) -> Pending<InsertOutcome> {
        self.inner.inserts.insert(req)
    }
    fn insert_many(&self, reqs: Vec<InsertRequest>) -> Pending<Vec<InsertOutcome>> {
        self.inner.inserts.insert_many(reqs)
    }
    fn dedup(&self, sender: &Key32, item_id: &str, target: &Key32) -> Result<Option<DedupRow>> {
        queue::dedup(self.ctx(), sender, item_id, target)
    }
    fn pull(&self, target: &Key32, after: u64, limit: usize, max_bytes: u64) -> Result<Page> {
        queue::pull(self.ctx(), target, after, limit, max_bytes)
    }
    fn cursor(&self, target: &Key32) -> Result<Cursor> {
        queue::cursor(self.ctx(), target)
    }
    fn usage_target(&self, target: &Key32) -> Result<Usage> {
        queue::usage_target(self.ctx(), target)
    }
    fn usage_sender(&self, sender: &Key32, target: &Key32) -> Result<Usage> {
        queue::usage_sender(self.ctx(), sender, target)
    }
    fn usage_account(&self, account: &str) -> Result<Usage> {
        queue::usage_account(self.ctx(), account)
    }
    fn ack(&self, target: &Key32, through: u64) -> Pending<AckOutcome> {
        queue::ack(self.ctx(), target, through)
    }
    fn delete_item(&self, target: &Key32, seq: u64) -> Pending<bool> {
        queue::delete_item(self.ctx(), target, seq)
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
        sweep::sweep(
            self.ctx(),
            now_ms,
            dedup_horizon_ms,
            quotas,
            retention_ms,
            max,
            notice,
        )
    }
    fn log_op(&self, kind: &str, detail: &str) -> Pending<()> {
        oplog::log_op(self.ctx(), kind, detail)
    }
    fn ops(&self, limit: usize) -> Result<Vec<OpEntry>> {
        oplog::ops(self.ctx(), limit)
    }
    fn newest_op_of(&self, kind: &str) -> Result<Option<OpEntry>> {
        oplog::newest_of(self.ctx(), kind)
    }
    fn verify_log(&self) -> Result<LogVerdict> {
        oplog::verify_log(self.ctx())
    }
    fn stats(&self) -> Result<Stats> {
        admin::stats(self.ctx())
    }
    fn dump(&self, out: &mut dyn Write, opts: &DumpOptions) -> Result<Vec<(String, u64)>> {
        dump::dump(self.ctx(), out, opts)
    }
    fn backup_to(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupSummary, BackupError> {
        backup::backup_to(self.ctx(), out, progress)
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
