//! The relay log (`ops`): a hash-chained record of every mutation that is not mail, bounded by
//! age and by count.
//!
//! Entry `n` stores `hash_n = SHA-256(hash_{n-1} ++ canonical_n)`, where `canonical_n` is the
//! fixed binary encoding of the entry (all integers big-endian):
//! `seq u64 | at_ms u64 | len(kind) u32 | kind | len(detail) u32 | detail`. The first entry of a
//! log chains from 32 zero bytes. Meta holds the head (`ops_next`, `ops_head`) and, once old
//! entries were dropped, the checkpoint (`ops_checkpoint`: seq and hash of the last dropped
//! entry) the chain then starts from. Editing, removing or reordering an entry breaks the chain
//! at that entry; removing entries at the end disagrees with the head.
//!
//! One append path serves the writer ([`Tx`]) and the writes made outside it at open and restore
//! (`migrate::DirectBatch`), through [`LogStage`].

use std::ops::Bound;

use fjall::Readable;

use crate::codec::{self, meta_key, StoredOp};
use crate::parts::Part;
use crate::reader::{meta_u64, Reader, SnapView};
use relay_store::{LogCheckpoint, LogRetention, LogVerdict, OpEntry, Result};

/// What appending needs: point reads that see the writes staged so far, and staging.
pub(crate) trait LogStage: Reader {
    fn stage_put(&mut self, part: Part, key: &[u8], value: Vec<u8>);
    fn stage_del(&mut self, part: Part, key: &[u8]);
}

/// A [`LogStage`] that knows the operation's time and the store's log bounds: the writer's
/// transaction (`writer::Tx`), through which every operation appends.
pub(crate) trait LogTx: LogStage {
    /// The operation's time (ms).
    fn now_ms(&self) -> u64;
    /// How long and how many entries the store keeps.
    fn log_retention(&self) -> LogRetention;
}

use relay_store::rules::log::{self as rule, Admission, Trim};

/// Append an entry inside the current operation (dropping entries beyond the store's bounds).
pub(crate) fn append<T: LogTx>(tx: &mut T, kind: &str, detail: &str) -> Result<()> {
    let (at_ms, keep) = (tx.now_ms(), tx.log_retention());
    append_at(tx, at_ms, keep, kind, detail)
}

/// Append an entry dated `at_ms` through any [`LogStage`], then drop what `keep` no longer
/// covers (`relay_store::rules::log`: whether it is appended, its hash, what leaves).
pub(crate) fn append_at<S: LogStage>(
    s: &mut S,
    at_ms: u64,
    keep: LogRetention,
    kind: &str,
    detail: &str,
) -> Result<()> {
    let held_before = meta_u64(s, meta_key::OPS_ENROL_HELD)?.unwrap_or(0);
    let cp = checkpoint(s)?;
    let first = cp.map_or(0, |c| c.seq + 1);
    if rule::admission(kind, held_before, keep) == Admission::IfOldestIsEnrolment
        && !oldest_is_enrolment(s, first)?
    {
        return Ok(());
    }
    let n = meta_u64(s, meta_key::OPS_NEXT)?.unwrap_or(0);
    let hash = rule::next_hash(head(s)?, n, at_ms, kind, detail);
    let entry = StoredOp {
        at_ms,
        kind: kind.into(),
        detail: detail.into(),
        hash,
    };
    s.stage_put(Part::Ops, &codec::ops_key(n), codec::enc(&entry));
    s.stage_put(Part::Meta, meta_key::OPS_NEXT, codec::enc(&(n + 1)));
    s.stage_put(Part::Meta, meta_key::OPS_HEAD, codec::enc(&hash));
    let mut trim = Trim::after_append(kind, first, n + 1, at_ms, keep, held_before);
    drop_old(s, &mut trim, cp)?;
    if trim.held() != held_before {
        s.stage_put(
            Part::Meta,
            meta_key::OPS_ENROL_HELD,
            codec::enc(&trim.held()),
        );
    }
    Ok(())
}

/// Whether the log's oldest entry (at `first`) is an enrolment entry.
fn oldest_is_enrolment(r: &impl Reader, first: u64) -> Result<bool> {
    Ok(match r.get(Part::Ops, &codec::ops_key(first))? {
        Some(v) => rule::is_enrolment_entry(&codec::dec::<StoredOp>(&v, "ops")?.kind),
        None => false,
    })
}

/// The enrolment entries among the `ops` rows, for a store that has no count yet (written
/// before the enrolment budget) or was just filled from a backup.
pub(crate) fn count_enrolment_entries(parts: &crate::parts::Parts) -> Result<u64> {
    let mut n = 0;
    for g in parts.ks(Part::Ops).iter() {
        let (_, v) = g.into_inner().map_err(crate::engine_error)?;
        n += u64::from(rule::is_enrolment_entry(
            &codec::dec::<StoredOp>(&v, "ops")?.kind,
        ));
    }
    Ok(n)
}

/// Drop the oldest entries `trim` lets go (the log's checkpoint now `cp`); the last one dropped
/// becomes the checkpoint.
fn drop_old<S: LogStage>(s: &mut S, trim: &mut Trim, mut cp: Option<LogCheckpoint>) -> Result<()> {
    while let Some(seq) = trim.oldest() {
        // A missing oldest entry is left for `log --verify` to report, never papered over.
        let Some(v) = s.get(Part::Ops, &codec::ops_key(seq))? else {
            break;
        };
        let e: StoredOp = codec::dec(&v, "ops")?;
        if !trim.leaves(e.at_ms, &e.kind) {
            break;
        }
        s.stage_del(Part::Ops, &codec::ops_key(seq));
        cp = Some(LogCheckpoint { seq, hash: e.hash });
    }
    if let (true, Some(c)) = (trim.dropped() > 0, cp) {
        put_checkpoint(s, &c);
    }
    Ok(())
}

/// The chain's head hash (None: nothing was ever appended under schema 4).
pub(crate) fn head(r: &impl Reader) -> Result<Option<[u8; 32]>> {
    r.get(Part::Meta, meta_key::OPS_HEAD)?
        .map(|v| codec::dec(&v, "meta ops_head"))
        .transpose()
}

/// Where the chain starts (None: at seq 0 from the zero hash).
pub(crate) fn checkpoint(r: &impl Reader) -> Result<Option<LogCheckpoint>> {
    let cp: Option<(u64, [u8; 32])> = r
        .get(Part::Meta, meta_key::OPS_CHECKPOINT)?
        .map(|v| codec::dec(&v, "meta ops_checkpoint"))
        .transpose()?;
    Ok(cp.map(|(seq, hash)| LogCheckpoint { seq, hash }))
}

pub(crate) fn put_checkpoint<S: LogStage>(s: &mut S, c: &LogCheckpoint) {
    s.stage_put(
        Part::Meta,
        meta_key::OPS_CHECKPOINT,
        codec::enc(&(c.seq, c.hash)),
    );
}

/// Recomputes a chain from its checkpoint, fed the `ops` rows in key order: decodes each row
/// and hands it to the shared check (`relay_store::rules::log::ChainCheck`). Serves the store's
/// `verify_log` and format-4 backup verification alike.
pub(crate) struct ChainCheck(relay_store::rules::log::ChainCheck);

impl ChainCheck {
    pub(crate) fn new(checkpoint: Option<LogCheckpoint>) -> ChainCheck {
        ChainCheck(relay_store::rules::log::ChainCheck::new(checkpoint))
    }

    /// Check the next stored row (key, value). False once the chain is broken.
    pub(crate) fn row(&mut self, key: &[u8], value: &[u8]) -> bool {
        let Some(seq) = codec::ops_key_parse(key) else {
            return self
                .0
                .fail_next("a row whose key is not a log position".into());
        };
        let e: StoredOp = match codec::dec(value, "ops") {
            Ok(e) => e,
            Err(err) => {
                return self
                    .0
                    .fail_next(format!("entry {seq} does not decode: {err}"))
            }
        };
        self.0.entry(seq, e.at_ms, &e.kind, &e.detail, &e.hash)
    }

    /// The verdict, given the head recorded in meta (`ops_next`, `ops_head`).
    pub(crate) fn finish(self, next: Option<u64>, head: Option<[u8; 32]>) -> LogVerdict {
        self.0.finish(next, head)
    }
}

/// Recompute the chain of a durable snapshot.
pub(crate) fn verify(v: &SnapView) -> Result<LogVerdict> {
    let mut check = ChainCheck::new(checkpoint(v)?);
    for g in v.snap.iter(v.parts.ks(Part::Ops)) {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        if !check.row(&k, &val) {
            break;
        }
    }
    Ok(check.finish(meta_u64(v, meta_key::OPS_NEXT)?, head(v)?))
}

/// The newest `limit` entries of a snapshot, newest first.
pub(crate) fn newest(v: &SnapView, limit: usize) -> Result<Vec<OpEntry>> {
    let mut out = Vec::with_capacity(limit.min(1024));
    if limit > 0 {
        newest_first(v, |e| {
            out.push(e);
            out.len() < limit
        })?;
    }
    Ok(out)
}

/// The newest entry of `kind` in a snapshot (the whole retained log searched, one entry held).
pub(crate) fn newest_of(v: &SnapView, kind: &str) -> Result<Option<OpEntry>> {
    let mut found = None;
    newest_first(v, |e| {
        if e.kind == kind {
            found = Some(e);
        }
        found.is_none()
    })?;
    Ok(found)
}

/// Hand the retained entries to `more`, newest first, while it answers true.
fn newest_first(v: &SnapView, mut more: impl FnMut(OpEntry) -> bool) -> Result<()> {
    let lo = checkpoint(v)?.map_or(0, |c| c.seq + 1);
    let lo = codec::ops_key(lo);
    let range = (Bound::Included(lo.as_slice()), Bound::Unbounded);
    for g in v.snap.range::<&[u8], _>(v.parts.ks(Part::Ops), range).rev() {
        let (k, val) = g.into_inner().map_err(crate::engine_error)?;
        let e: StoredOp = codec::dec(&val, "ops")?;
        let entry = OpEntry {
            seq: codec::ops_key_parse(&k).unwrap_or(u64::MAX),
            at_ms: e.at_ms,
            kind: e.kind,
            detail: e.detail,
            hash: e.hash,
        };
        if !more(entry) {
            break;
        }
    }
    Ok(())
}
