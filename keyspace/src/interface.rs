//! [`RelayStore`] for the fjall [`Store`], the one place this backend states the trait's
//! methods: a write submits its operation (`ops/`, one file each) to the writer and resolves
//! once its group is durable; a read answers from the last durable snapshot (`reader`, `read`,
//! `hosts`, `stats`, `dump`, `logical`).
//! One process owns a fjall store (its lock file), so leases are always held and challenges
//! stay in the relay's memory.

use std::io::Write;
use std::sync::Arc;

use relay_store::{
    AckOutcome, BackupError, BackupSummary, ChallengeBook, CommitStats, Cursor, DedupRow,
    DenyEntry, DenyOutcome, DenySubject, DumpOptions, EncAd, EncAdV2, EncAds, EnrolOutcome,
    EnrolRequest, Enrolment, HostFilter, HostRow, IdleReport, InsertOutcome, InsertRequest, Invite,
    InviteOutcome, Key32, LogVerdict, Meta, NoticeFn, OpEntry, Page, Pending, Quotas,
    RebindOutcome, RelayStore, Result, RevokeOutcome, RevokeRequest, SenderList, SenderListOutcome,
    Stats, SweepReport, Usage,
};

use crate::codec::{self, UsageScope};
use crate::ops::{
    ack, deny, enc_ad_v2, enrol, idle, insert, invite, lists, meta, oplog, rebind, revoke, seen,
    sweep,
};
use crate::{dump, hosts, read, reader, stats, Store};

impl RelayStore for Store {
    fn meta(&self) -> Result<Meta> {
        reader::meta(&*self.view()?)
    }
    fn pin_relay_pubkey(&self, pk: Key32) -> Pending<()> {
        self.submit(move |tx| meta::pin_relay_pubkey(tx, &pk))
    }
    fn rotate_epoch(&self, reason: &str) -> Pending<String> {
        let reason = reason.to_string();
        self.submit(move |tx| meta::rotate_epoch(tx, &reason))
    }
    fn heartbeat(&self, now_ms: u64) -> Pending<()> {
        self.submit(move |tx| {
            meta::heartbeat(tx, now_ms);
            Ok(())
        })
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
        self.submit(move |tx| enrol::enrol(tx, req))
    }
    fn enrolment(&self, key: &Key32) -> Result<Option<Enrolment>> {
        reader::enrolment(&*self.view()?, key)
    }
    fn live_enrolments_by_name(&self, name: &str, limit: usize) -> Result<Vec<Enrolment>> {
        reader::live_by_name(&*self.view()?, name, limit)
    }
    /// O(1): a counter.
    fn live_enrolment_count(&self) -> Result<u64> {
        enrol::live_count(&*self.view()?)
    }
    fn enrolments_by_fingerprint(&self, prefix: &str, limit: usize) -> Result<Vec<Enrolment>> {
        read::enrolments_by_fingerprint(&*self.view()?, prefix, limit)
    }
    fn live_enrolments_by_client(&self, client_id: &str, limit: usize) -> Result<Vec<Enrolment>> {
        read::live_enrolments_by_client(&*self.view()?, client_id, limit)
    }
    fn record_seen(&self, seen: Vec<(Key32, u32)>) -> Pending<u64> {
        self.submit(move |tx| seen::record_seen(tx, &seen))
    }
    fn expire_idle(
        &self,
        now_ms: u64,
        idle_ms: u64,
        after: Option<Key32>,
        max: usize,
    ) -> Pending<IdleReport> {
        self.submit(move |tx| idle::expire_idle(tx, now_ms, idle_ms, after.as_ref(), max))
    }
    fn rebind(&self, old: Key32, new: Key32) -> Pending<RebindOutcome> {
        self.submit(move |tx| rebind::rebind(tx, &old, &new))
    }
    fn revoke_key(&self, req: RevokeRequest, notice: NoticeFn) -> Pending<RevokeOutcome> {
        self.submit(move |tx| revoke::revoke_key(tx, &req, &notice))
    }
    fn put_invite(&self, invite: Invite, max: u64) -> Pending<InviteOutcome> {
        self.submit(move |tx| invite::put_invite(tx, &invite, max))
    }
    fn put_deny(&self, entry: DenyEntry, max: u64) -> Pending<DenyOutcome> {
        self.submit(move |tx| deny::put_deny(tx, &entry, max))
    }
    fn denied(&self, subjects: &[DenySubject], now_ms: u64) -> Result<bool> {
        deny::denied(&*self.view()?, subjects, now_ms)
    }
    fn hosts(
        &self,
        filter: &HostFilter,
        each: &mut dyn FnMut(&HostRow) -> Result<()>,
    ) -> Result<u64> {
        hosts::hosts(&*self.view()?, filter, each)
    }

    fn put_enc_ad(&self, ad: EncAd) -> Pending<()> {
        self.submit(move |tx| {
            lists::put_enc_ad(tx, &ad);
            Ok(())
        })
    }
    fn put_enc_ad_v2(&self, ad: EncAdV2) -> Pending<bool> {
        self.submit(move |tx| enc_ad_v2::put_enc_ad_v2(tx, &ad))
    }
    fn enc_ad(&self, key: &Key32) -> Result<Option<EncAd>> {
        reader::enc_ad(&*self.view()?, key)
    }
    /// From one durable snapshot.
    fn enc_ads(&self, key: &Key32) -> Result<EncAds> {
        reader::enc_ads(&*self.view()?, key)
    }
    fn put_sender_list(&self, list: SenderList) -> Pending<SenderListOutcome> {
        self.submit(move |tx| lists::put_sender_list(tx, &list))
    }
    fn sender_list(&self, target: &Key32) -> Result<Option<SenderList>> {
        reader::sender_list(&*self.view()?, target)
    }

    fn insert(&self, req: InsertRequest) -> Pending<InsertOutcome> {
        self.submit(move |tx| insert::insert_one(tx, req))
    }
    /// Each item its own atomic operation, all in the same commit group.
    fn insert_many(&self, reqs: Vec<InsertRequest>) -> Pending<Vec<InsertOutcome>> {
        self.submit(move |tx| {
            reqs.into_iter()
                .map(|r| insert::insert_one(tx, r))
                .collect()
        })
    }
    fn dedup(&self, sender: &Key32, item_id: &str, target: &Key32) -> Result<Option<DedupRow>> {
        reader::dedup_row(&*self.view()?, &codec::dedup_key(target, sender, item_id))
    }
    /// What the page's items need for their ack is kept for it (`pulled`).
    fn pull(&self, target: &Key32, after: u64, limit: usize, max_bytes: u64) -> Result<Page> {
        let (page, hints) = read::pull(&*self.view()?, target, after, limit, max_bytes)?;
        self.inner.pulled.note(target, hints);
        Ok(page)
    }
    fn cursor(&self, target: &Key32) -> Result<Cursor> {
        read::cursor(&*self.view()?, target)
    }
    fn usage_target(&self, target: &Key32) -> Result<Usage> {
        reader::usage(&*self.view()?, &UsageScope::Target(*target))
    }
    fn usage_sender(&self, sender: &Key32, target: &Key32) -> Result<Usage> {
        let scope = UsageScope::Sender {
            target: *target,
            sender: *sender,
        };
        reader::usage(&*self.view()?, &scope)
    }
    fn usage_account(&self, account: &str) -> Result<Usage> {
        reader::usage(&*self.view()?, &UsageScope::Account(account.to_string()))
    }
    fn ack(&self, target: &Key32, through: u64) -> Pending<AckOutcome> {
        let target = *target;
        let pulled = Arc::clone(&self.inner.pulled);
        self.submit(move |tx| ack::ack(tx, &target, through, &pulled))
    }
    fn delete_item(&self, target: &Key32, seq: u64) -> Pending<bool> {
        let target = *target;
        self.submit(move |tx| ack::delete_item(tx, &target, seq))
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
        let args = sweep::SweepArgs {
            now_ms,
            dedup_horizon_ms,
            quotas,
            retention_ms,
            max: max.max(1),
        };
        self.submit(move |tx| sweep::sweep(tx, &args, &notice))
    }

    /// Bounded by the store's `LogRetention`.
    fn log_op(&self, kind: &str, detail: &str) -> Pending<()> {
        let (kind, detail) = (kind.to_string(), detail.to_string());
        self.submit(move |tx| oplog::append(tx, &kind, &detail))
    }
    fn ops(&self, limit: usize) -> Result<Vec<OpEntry>> {
        oplog::newest(&*self.view()?, limit)
    }
    fn newest_op_of(&self, kind: &str) -> Result<Option<OpEntry>> {
        oplog::newest_of(&*self.view()?, kind)
    }
    /// From the checkpoint over the durable snapshot, naming the first entry that does not
    /// match.
    fn verify_log(&self) -> Result<LogVerdict> {
        oplog::verify(&*self.view()?)
    }
    fn stats(&self) -> Result<Stats> {
        stats::stats(&*self.view()?)
    }
    fn dump(&self, out: &mut dyn Write, opts: &DumpOptions) -> Result<Vec<(String, u64)>> {
        dump::dump(&*self.view()?, out, opts)
    }
    /// One consistent snapshot, online (writers keep running), in the logical format 5 every
    /// backend reads (`relay_store::backup`). Records nothing itself (callers log the backup).
    fn backup_to(
        &self,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<BackupSummary, BackupError> {
        let v = self.view()?;
        let created_ms = self.inner.clock.now_ms();
        crate::logical::write(&v, created_ms, out, progress)
    }
    /// Operations per fsync and fsync latency.
    fn commit_stats(&self) -> CommitStats {
        self.inner.counters.snapshot()
    }
    /// fjall refuses writes after a failed one until reopened; the writer does it in-process.
    fn reopen_count(&self) -> u64 {
        self.inner
            .recovery
            .reopens
            .load(std::sync::atomic::Ordering::Relaxed)
    }
    /// Operations already submitted finish first; then the writer stops and the lock goes.
    fn close(&self) -> Result<()> {
        self.inner.shutdown()
    }
}
