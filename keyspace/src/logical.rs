//! The logical backup (format 6, `relay_store::backup`; format 5 restores too) of a fjall store: the partitions of one
//! snapshot read as typed records, and a new store built from such records (the indexes,
//! counters and usage rows derived from them, as the operations would have written them).

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use fjall::Readable;
use relay_store::backup::{
    BackupReader, BackupWriter, DedupGone, DedupRecord, EnrolmentRecord, Header, ItemRow,
    MetaRecord, QueueRecord, Record,
};

use crate::codec::{self, meta_key, EncAdKey, ItemRecord, StoredOp, UsageScope};
use crate::migrate::DirectBatch;
use crate::parts::{Part, Parts};
use crate::reader::{self, meta_u64, Reader, SnapView};
use relay_store::{BackupError, BackupSummary, Key32, StoreError, Usage, SCHEMA_VERSION};

/// Rows per restore batch.
const RESTORE_CHUNK: usize = 4_096;
/// Records between two progress calls.
const PROGRESS_EVERY: u64 = 4_096;

fn corrupt(what: &str) -> BackupError {
    BackupError::Store(StoreError::Corrupt(format!(
        "a {what} row with a malformed key"
    )))
}

/// Write the snapshot `v` as a format-5 backup.
pub(crate) fn write(
    v: &SnapView,
    created_ms: u64,
    out: &mut dyn Write,
    progress: &mut dyn FnMut(u64),
) -> Result<BackupSummary, BackupError> {
    let meta = reader::meta(v)?;
    let ops_head: Option<[u8; 32]> = v
        .get(Part::Meta, meta_key::OPS_HEAD)?
        .map(|b| codec::dec(&b, "meta ops_head"))
        .transpose()?;
    let ops_checkpoint: Option<(u64, [u8; 32])> = v
        .get(Part::Meta, meta_key::OPS_CHECKPOINT)?
        .map(|b| codec::dec(&b, "meta ops_checkpoint"))
        .transpose()?;
    let mut w = BackupWriter::start(
        out,
        Header {
            schema_version: SCHEMA_VERSION,
            relay_pubkey: meta.relay_pubkey,
            epoch: meta.epoch.clone(),
            created_ms,
            backend: "fjall".into(),
        },
    )?;
    w.record(&Record::Meta(MetaRecord {
        epoch: meta.epoch,
        relay_pubkey: meta.relay_pubkey,
        created_ms: meta.created_ms,
        heartbeat_ms: meta.heartbeat_ms,
        ops_next: meta_u64(v, meta_key::OPS_NEXT)?.unwrap_or(0),
        ops_head,
        ops_checkpoint,
    }))?;
    let mut put = |w: &mut BackupWriter<'_>, r: Record| -> Result<(), BackupError> {
        w.record(&r)?;
        if w.records_written().is_multiple_of(PROGRESS_EVERY) {
            progress(w.bytes_written());
        }
        Ok(())
    };
    let (lo, hi) = codec::enrol_rows();
    for g in v.snap.range(v.parts.ks(Part::Enrolments), lo..hi) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let pk = codec::enrol_key_parse(&k).ok_or_else(|| corrupt("enrolment"))?;
        let last_seen_day = v
            .get(Part::Enrolments, &codec::seen_key(&pk))?
            .map(|d| codec::dec::<u32>(&d, "enrolments last seen"))
            .transpose()?;
        put(
            &mut w,
            Record::Enrolment(EnrolmentRecord {
                enrolment: codec::dec_enrolment(&val)?,
                last_seen_day,
            }),
        )?;
    }
    // v1 ads first, then v2 (kinds come in order).
    for want_v2 in [false, true] {
        for g in v.snap.iter(v.parts.ks(Part::EncAds)) {
            let (k, val) = g.into_inner().map_err(crate::engine_error)?;
            match (codec::enc_ad_key_parse(&k), want_v2) {
                (Some(EncAdKey::V1(_)), false) => {
                    put(&mut w, Record::EncAd(codec::dec(&val, "enc_ads")?))?;
                }
                (Some(EncAdKey::V2(_)), true) => {
                    put(&mut w, Record::EncAdV2(codec::dec(&val, "enc_ads v2")?))?;
                }
                (None, _) => return Err(corrupt("enc ad")),
                _ => {}
            }
        }
    }
    for g in v.snap.iter(v.parts.ks(Part::SenderLists)) {
        let (_, val) = g.into_inner().map_err(crate::engine_error)?;
        put(
            &mut w,
            Record::SenderList(codec::dec(&val, "sender_lists")?),
        )?;
    }
    for g in v.snap.iter(v.parts.ks(Part::Seqs)) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let target: Key32 = k[..].try_into().map_err(|_| corrupt("seqs"))?;
        put(
            &mut w,
            Record::Queue(QueueRecord {
                target,
                head_seq: codec::dec(&val, "seqs")?,
                acked_through: reader::acked_through(v, &target)?,
            }),
        )?;
    }
    for g in v.snap.iter(v.parts.ks(Part::Items)) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let (target, seq) = codec::item_key_parse(&k).ok_or_else(|| corrupt("items"))?;
        let r: ItemRecord = codec::dec(&val, "items")?;
        put(
            &mut w,
            Record::Item(ItemRow {
                target,
                seq,
                kind: r.kind,
                item_id: r.item_id,
                sender: r.sender,
                wire: r.wire,
                wire_hash: r.wire_hash,
                accepted_at_ms: r.accepted_at_ms,
                expires_at_ms: r.expires_at_ms,
                account: r.account,
            }),
        )?;
    }
    for g in v.snap.iter(v.parts.ks(Part::Dedup)) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let (target, sender, item_id) =
            codec::dedup_key_parse(&k).ok_or_else(|| corrupt("dedup"))?;
        put(
            &mut w,
            Record::Dedup(DedupRecord {
                target,
                sender,
                item_id,
                row: codec::dec(&val, "dedup")?,
            }),
        )?;
    }
    for g in v.snap.iter(v.parts.ks(Part::DedupExpiry)) {
        let (k, _) = g.into_inner().map_err(crate::engine_error)?;
        let (gone_at_ms, dkey) =
            codec::expiry_dedup_parse(&k).ok_or_else(|| corrupt("dedup_expiry"))?;
        let (target, sender, item_id) =
            codec::dedup_key_parse(dkey).ok_or_else(|| corrupt("dedup_expiry"))?;
        put(
            &mut w,
            Record::DedupGone(DedupGone {
                target,
                sender,
                item_id,
                gone_at_ms,
            }),
        )?;
    }
    for g in v.snap.iter(v.parts.ks(Part::Ops)) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let seq = codec::ops_key_parse(&k).ok_or_else(|| corrupt("ops"))?;
        let e: StoredOp = codec::dec(&val, "ops")?;
        put(
            &mut w,
            Record::Op(relay_store::OpEntry {
                seq,
                at_ms: e.at_ms,
                kind: e.kind,
                detail: e.detail,
                hash: e.hash,
            }),
        )?;
    }
    for g in v
        .snap
        .prefix(v.parts.ks(Part::Enrolments), codec::INVITE_PREFIX)
    {
        let (_, val) = g.into_inner().map_err(crate::engine_error)?;
        put(&mut w, Record::Invite(codec::dec(&val, "invite")?))?;
    }
    for g in v
        .snap
        .prefix(v.parts.ks(Part::Enrolments), codec::DENY_PREFIX)
    {
        let (_, val) = g.into_inner().map_err(crate::engine_error)?;
        put(&mut w, Record::Deny(codec::dec(&val, "deny entry")?))?;
    }
    let summary = w.finish()?;
    progress(summary.file_bytes);
    Ok(summary)
}

/// Builds a store's rows from records: the stored rows as each operation writes them, plus the
/// derived ones (name index, last seen, sender index, expiry index, usage, counters).
struct Fill<'a> {
    parts: &'a Parts,
    batch: DirectBatch<'a>,
    pending: usize,
    usage: HashMap<UsageScope, Usage>,
    live: u64,
    revoked: u64,
    /// Enrolment entries among the relay-log records.
    enrol_entries: u64,
}

impl<'a> Fill<'a> {
    fn put(&mut self, part: Part, key: &[u8], value: Vec<u8>) -> Result<(), BackupError> {
        self.batch.put(part, key, value);
        self.pending += 1;
        if self.pending >= RESTORE_CHUNK {
            std::mem::replace(&mut self.batch, DirectBatch::new(self.parts)).commit()?;
            self.pending = 0;
        }
        Ok(())
    }

    fn record(&mut self, r: Record) -> Result<(), BackupError> {
        match r {
            Record::Meta(m) => {
                self.put(
                    Part::Meta,
                    meta_key::SCHEMA_VERSION,
                    codec::enc(&SCHEMA_VERSION),
                )?;
                self.put(Part::Meta, meta_key::EPOCH, codec::enc(&m.epoch))?;
                self.put(Part::Meta, meta_key::CREATED, codec::enc(&m.created_ms))?;
                if let Some(pk) = m.relay_pubkey {
                    self.put(Part::Meta, meta_key::RELAY_PUBKEY, codec::enc(&pk))?;
                }
                if let Some(h) = m.heartbeat_ms {
                    self.put(Part::Meta, meta_key::HEARTBEAT, codec::enc(&h))?;
                }
                self.put(Part::Meta, meta_key::OPS_NEXT, codec::enc(&m.ops_next))?;
                if let Some(h) = m.ops_head {
                    self.put(Part::Meta, meta_key::OPS_HEAD, codec::enc(&h))?;
                }
                if let Some(cp) = m.ops_checkpoint {
                    self.put(Part::Meta, meta_key::OPS_CHECKPOINT, codec::enc(&cp))?;
                }
            }
            Record::Enrolment(EnrolmentRecord {
                enrolment: e,
                last_seen_day,
            }) => {
                if e.revoked_at_ms.is_none() {
                    self.live += 1;
                    self.put(
                        Part::Enrolments,
                        &codec::name_key(&e.host_name, &e.host_pubkey),
                        Vec::new(),
                    )?;
                } else {
                    self.revoked += 1;
                }
                if let Some(day) = last_seen_day {
                    self.put(
                        Part::Enrolments,
                        &codec::seen_key(&e.host_pubkey),
                        codec::enc(&day),
                    )?;
                }
                self.put(
                    Part::Enrolments,
                    &codec::enrol_key(&e.host_pubkey),
                    codec::enc(&e),
                )?;
            }
            Record::EncAd(ad) => self.put(Part::EncAds, &ad.host_pubkey, codec::enc(&ad))?,
            Record::EncAdV2(ad) => {
                self.put(
                    Part::EncAds,
                    &codec::enc_ad_v2_key(&ad.host_pubkey),
                    codec::enc(&ad),
                )?;
            }
            Record::SenderList(l) => {
                for s in &l.senders {
                    self.put(
                        Part::SenderIndex,
                        &codec::sender_index_key(s, &l.target),
                        Vec::new(),
                    )?;
                }
                self.put(Part::SenderLists, &l.target, codec::enc(&l))?;
            }
            Record::Queue(q) => {
                self.put(Part::Seqs, &q.target, codec::enc(&q.head_seq))?;
                if q.acked_through > 0 {
                    self.put(Part::Acked, &q.target, codec::enc(&q.acked_through))?;
                }
            }
            Record::Item(it) => {
                let bytes = it.wire.len() as u64;
                for scope in
                    crate::ops::queue::scopes(&it.target, &it.sender, it.account.as_deref())
                {
                    let u = self.usage.entry(scope).or_default();
                    u.items += 1;
                    u.bytes += bytes;
                }
                self.put(
                    Part::Expiry,
                    &codec::expiry_item_key(it.expires_at_ms, &it.target, it.seq),
                    Vec::new(),
                )?;
                let key = codec::item_key(&it.target, it.seq);
                let rec = ItemRecord {
                    kind: it.kind,
                    item_id: it.item_id,
                    sender: it.sender,
                    wire: it.wire,
                    wire_hash: it.wire_hash,
                    bytes,
                    accepted_at_ms: it.accepted_at_ms,
                    expires_at_ms: it.expires_at_ms,
                    account: it.account,
                };
                self.put(Part::Items, &key, codec::enc_item(&rec))?;
            }
            Record::Dedup(d) => {
                let key = codec::dedup_key(&d.target, &d.sender, &d.item_id);
                self.put(Part::Dedup, &key, codec::enc(&d.row))?;
            }
            Record::DedupGone(g) => {
                let dkey = codec::dedup_key(&g.target, &g.sender, &g.item_id);
                self.put(
                    Part::DedupExpiry,
                    &codec::expiry_dedup_key(g.gone_at_ms, &dkey),
                    Vec::new(),
                )?;
            }
            Record::Op(e) => {
                self.enrol_entries +=
                    u64::from(relay_store::rules::log::is_enrolment_entry(&e.kind));
                let stored = StoredOp {
                    at_ms: e.at_ms,
                    kind: e.kind,
                    detail: e.detail,
                    hash: e.hash,
                };
                self.put(Part::Ops, &codec::ops_key(e.seq), codec::enc(&stored))?;
            }
            Record::Invite(i) => {
                self.put(
                    Part::Enrolments,
                    &codec::invite_key(&i.hash),
                    codec::enc(&i),
                )?;
            }
            Record::Deny(d) => {
                self.put(
                    Part::Enrolments,
                    &codec::deny_key(&d.subject),
                    codec::enc(&d),
                )?;
            }
        }
        Ok(())
    }

    /// The counters and usage rows gathered on the way.
    fn finish(mut self) -> Result<(), BackupError> {
        let live = self.live;
        let revoked = self.revoked;
        self.put(Part::Meta, meta_key::LIVE_ENROLMENTS, codec::enc(&live))?;
        self.put(
            Part::Meta,
            meta_key::REVOKED_ENROLMENTS,
            codec::enc(&revoked),
        )?;
        let held = self.enrol_entries;
        self.put(Part::Meta, meta_key::OPS_ENROL_HELD, codec::enc(&held))?;
        let usage = std::mem::take(&mut self.usage);
        for (scope, u) in usage {
            self.put(Part::Usage, &codec::usage_key(&scope), codec::enc(&u))?;
        }
        self.batch.commit()?;
        Ok(())
    }
}

/// Write every record of the (verified) logical `file` into the empty store `parts`.
pub(crate) fn fill(file: &Path, parts: &Parts) -> Result<(), BackupError> {
    let mut r = BackupReader::open(file)?;
    let mut f = Fill {
        parts,
        batch: DirectBatch::new(parts),
        pending: 0,
        usage: HashMap::new(),
        live: 0,
        revoked: 0,
        enrol_entries: 0,
    };
    while let Some(rec) = r.next_record()? {
        f.record(rec)?;
    }
    f.finish()
}
