//! Reading a logical backup: every frame checked as it streams past (lengths bounded before
//! allocation, crc32 per frame, order, counts, the whole-file sha256, the relay-log chain).

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::checked::{damaged, CheckedRead};
use super::record::kinds_in;
use super::{
    DedupRecord, Header, ItemRow, Record, RecordKind, FIRST_LOGICAL_FORMAT, LOGICAL_FORMAT_VERSION,
    MAX_RECORD, TAG_RECORD, TAG_TRAILER,
};
use crate::rules::log::ChainCheck;
use crate::{
    BackupError, BackupSummary, Key32, LogCheckpoint, LogVerdict, MAX_ITEM_BYTES_ACCEPTED,
};

/// Lowercase hex.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the writer and the reader both keep track of: counts per kind, the order, meta, the
/// relay-log chain recomputed as its entries pass, and every queue's head seq (queues come
/// before items), so an item above its queue's head is damage in every backend's restore: a
/// restored relay would hand that seq out again. So are a repeated item or dedup row (a
/// restore would count it twice in the queue's usage, which then never drains) and an item
/// larger than any relay accepts.
pub(crate) struct Tally {
    counts: [u64; RecordKind::ALL.len()],
    last: Option<RecordKind>,
    chain: Option<ChainCheck>,
    head: Option<(u64, Option<[u8; 32]>)>,
    queue_heads: HashMap<Key32, u64>,
    /// The previous item's (target, seq): items come in strictly increasing (target, seq)
    /// order from every backend (fjall's key order, PostgreSQL's `ORDER BY target, seq`).
    last_item: Option<(Key32, u64)>,
    /// Dedup rows come grouped by (target, sender) in increasing order; inside a group the
    /// item ids come in the database's collation order, so the group's ids seen so far are
    /// kept (one group at a time: at most the rows of one sender to one target).
    dedup_group: Option<(Key32, Key32)>,
    dedup_ids: HashSet<String>,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            counts: [0; RecordKind::ALL.len()],
            last: None,
            chain: None,
            head: None,
            queue_heads: HashMap::new(),
            last_item: None,
            dedup_group: None,
            dedup_ids: HashSet::new(),
        }
    }

    /// A repeated, out-of-order or oversized item.
    fn item(&mut self, it: &ItemRow) -> Result<(), String> {
        let at = (it.target, it.seq);
        if self.last_item.is_some_and(|last| at <= last) {
            return Err(format!(
                "item seq {} of target {} repeats or is out of (target, seq) order",
                it.seq,
                hex(&it.target[..4])
            ));
        }
        self.last_item = Some(at);
        if it.wire.len() as u64 > MAX_ITEM_BYTES_ACCEPTED {
            return Err(format!(
                "item seq {} holds {} bytes, over the {MAX_ITEM_BYTES_ACCEPTED} any relay accepts",
                it.seq,
                it.wire.len()
            ));
        }
        Ok(())
    }

    /// A repeated dedup row, or one out of (target, sender) order.
    fn dedup(&mut self, d: &DedupRecord) -> Result<(), String> {
        let group = (d.target, d.sender);
        match self.dedup_group {
            Some(g) if group < g => {
                return Err("dedup rows out of (target, sender) order".into());
            }
            Some(g) if group == g => {}
            _ => {
                self.dedup_group = Some(group);
                self.dedup_ids.clear();
            }
        }
        if !self.dedup_ids.insert(d.item_id.clone()) {
            return Err(format!(
                "dedup row of target {} repeats (the same sender and item id twice)",
                hex(&d.target[..4])
            ));
        }
        Ok(())
    }

    /// Account for the next record; `Err(why)` when it breaks the stream's order.
    pub(crate) fn record(&mut self, r: &Record) -> Result<(), String> {
        let kind = r.kind();
        match self.last {
            None if kind != RecordKind::Meta => {
                return Err(format!("the first record is {}, not meta", kind.name()))
            }
            Some(_) if kind == RecordKind::Meta => return Err("a second meta record".into()),
            Some(last) if kind < last => {
                return Err(format!(
                    "{} after {}: records out of order",
                    kind.name(),
                    last.name()
                ))
            }
            _ => {}
        }
        self.last = Some(kind);
        self.counts[kind as usize] += 1;
        match r {
            Record::Meta(m) => {
                let cp = m
                    .ops_checkpoint
                    .map(|(seq, hash)| LogCheckpoint { seq, hash });
                self.chain = Some(ChainCheck::new(cp));
                self.head = Some((m.ops_next, m.ops_head));
            }
            Record::Queue(q) => {
                self.queue_heads.insert(q.target, q.head_seq);
            }
            Record::Item(it) => {
                match self.queue_heads.get(&it.target) {
                    Some(head) if it.seq <= *head => {}
                    _ => {
                        return Err(format!(
                            "item seq {} lies above its queue's head seq (seqs could be handed \
                             out twice)",
                            it.seq
                        ))
                    }
                }
                self.item(it)?;
            }
            Record::Dedup(d) => self.dedup(d)?,
            Record::Op(e) => {
                if let Some(c) = &mut self.chain {
                    c.entry(e.seq, e.at_ms, &e.kind, &e.detail, &e.hash);
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub(crate) fn counts(&self) -> Vec<(String, u64)> {
        RecordKind::ALL
            .iter()
            .map(|k| (k.name().to_string(), self.counts[*k as usize]))
            .collect()
    }

    /// The chain verdict; `Err` when the stream held no meta record.
    pub(crate) fn finish(self) -> Result<LogVerdict, String> {
        match (self.chain, self.head) {
            (Some(c), Some((next, head))) => Ok(c.finish(Some(next), head)),
            _ => Err("the backup holds no meta record".into()),
        }
    }
}

/// The magic and format of a backup file, checked (any format this build knows: 1-5).
///
/// # Errors
/// `BadMagic` for another kind of file, `Truncated`, `Damaged` (format checksum),
/// `NewerFormat`.
pub fn read_format(path: &Path) -> Result<u32, BackupError> {
    CheckedRead::open(path).map(|(_, f)| f)
}

/// Reads a logical backup record by record, checking as it goes. A restore reads it twice:
/// once through [`verify`] (touching nothing when the file is bad), then to build.
pub struct BackupReader {
    c: CheckedRead,
    format: u32,
    header: Header,
    tally: Option<Tally>,
    summary: Option<BackupSummary>,
}

impl BackupReader {
    /// Open a logical (format 5 or 6) file and read its header.
    ///
    /// # Errors
    /// As [`read_format`], `Damaged` when the file is an older (raw, per-backend) format.
    pub fn open(path: &Path) -> Result<BackupReader, BackupError> {
        let (mut c, format) = CheckedRead::open(path)?;
        if !super::is_logical(format) {
            return Err(damaged(
                8,
                format!(
                    "format {format} holds one backend's raw rows, not the logical records of \
                     formats {FIRST_LOGICAL_FORMAT}-{LOGICAL_FORMAT_VERSION}: only a fjall store \
                     restores it"
                ),
            ));
        }
        let (hoff, hb) = c.header_frame()?;
        let header =
            postcard::from_bytes(&hb).map_err(|e| damaged(hoff, format!("bad header: {e}")))?;
        Ok(BackupReader {
            c,
            format,
            header,
            tally: Some(Tally::new()),
            summary: None,
        })
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The next record, or `None` after the trailer checked out (then [`Self::summary`]).
    ///
    /// # Errors
    /// `Damaged` (with the frame's offset), `Truncated`, `CountMismatch`, `Io`.
    pub fn next_record(&mut self) -> Result<Option<Record>, BackupError> {
        if self.summary.is_some() {
            return Ok(None);
        }
        let at = self.c.offset();
        let [tag] = self.c.bytes::<1>()?;
        match tag {
            TAG_RECORD => {
                let [kb] = self.c.bytes::<1>()?;
                let blen = self.c.u32()?;
                let head_crc = self.c.u32()?;
                let mut head = vec![tag, kb];
                head.extend_from_slice(&blen.to_le_bytes());
                if crc32fast::hash(&head) != head_crc {
                    return Err(damaged(at, "record head checksum mismatch"));
                }
                let kind = RecordKind::from_u8(kb, self.format)
                    .ok_or_else(|| damaged(at, format!("unknown record kind {kb}")))?;
                if blen > MAX_RECORD {
                    return Err(damaged(at, format!("record length {blen} out of bounds")));
                }
                let body = self.c.vec(blen)?;
                let crc = self.c.u32()?;
                if crc32fast::hash(&body) != crc {
                    return Err(damaged(at, "record checksum mismatch"));
                }
                let rec = Record::decode(kind, &body, self.format)
                    .map_err(|e| damaged(at, format!("bad {} record: {e}", kind.name())))?;
                if let Some(t) = &mut self.tally {
                    t.record(&rec).map_err(|why| damaged(at, why))?;
                }
                Ok(Some(rec))
            }
            TAG_TRAILER => {
                self.trailer(at)?;
                Ok(None)
            }
            other => Err(damaged(at, format!("unknown record tag {other:#04x}"))),
        }
    }

    fn trailer(&mut self, at: u64) -> Result<(), BackupError> {
        let [n] = self.c.bytes::<1>()?;
        let kinds = kinds_in(self.format);
        if usize::from(n) != kinds {
            return Err(damaged(at, format!("trailer lists {n} record kinds")));
        }
        let mut listed = [0u64; RecordKind::ALL.len()];
        for c in &mut listed[..kinds] {
            *c = u64::from_le_bytes(self.c.bytes()?);
        }
        let sum = self.c.whole_file_sum(at)?;
        let tally = self.tally.take().unwrap_or_else(Tally::new);
        let mut counts = tally.counts();
        counts.truncate(kinds);
        for (i, (name, found)) in counts.iter().enumerate() {
            if listed[i] != *found {
                return Err(BackupError::CountMismatch {
                    partition: name.clone(),
                    expected: listed[i],
                    found: *found,
                });
            }
        }
        self.c.at_end()?;
        let log = tally.finish().map_err(|why| damaged(at, why))?;
        self.summary = Some(BackupSummary {
            format_version: self.format,
            schema_version: self.header.schema_version,
            relay_pubkey: self.header.relay_pubkey,
            epoch: self.header.epoch.clone(),
            created_ms: self.header.created_ms,
            counts,
            checksum: hex(&sum),
            file_bytes: self.c.file_len(),
            log,
        });
        Ok(())
    }

    /// The summary, once [`Self::next_record`] answered `None`.
    pub fn summary(&self) -> Option<&BackupSummary> {
        self.summary.as_ref()
    }
}

/// Check a logical (format 5 or 6) file end to end without any store: magic, format, every frame's crc32,
/// order, counts, the whole-file checksum, and the relay log's chain.
///
/// # Errors
/// A distinct [`BackupError`] for wrong magic, newer format, damage (with offset), truncation.
pub fn verify(path: &Path) -> Result<BackupSummary, BackupError> {
    let mut r = BackupReader::open(path)?;
    while r.next_record()?.is_some() {}
    r.summary
        .take()
        .ok_or_else(|| damaged(r.c.offset(), "the backup ends without its summary"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backup::{ItemRow, MetaRecord, QueueRecord};
    use crate::ItemKind;

    fn meta() -> Record {
        Record::Meta(MetaRecord {
            epoch: "e".into(),
            relay_pubkey: None,
            created_ms: 1,
            heartbeat_ms: None,
            ops_next: 1,
            ops_head: None,
            ops_checkpoint: None,
        })
    }

    fn item(target: u8, seq: u64) -> Record {
        Record::Item(ItemRow {
            target: [target; 32],
            seq,
            kind: ItemKind::Envelope,
            item_id: "i".into(),
            sender: [9; 32],
            wire: b"{}".to_vec(),
            wire_hash: [0; 32],
            accepted_at_ms: 1,
            expires_at_ms: 2,
            account: None,
        })
    }

    fn dedup(target: u8, sender: u8, id: &str) -> Record {
        Record::Dedup(crate::backup::DedupRecord {
            target: [target; 32],
            sender: [sender; 32],
            item_id: id.into(),
            row: crate::DedupRow {
                wire_hash: [0; 32],
                seq: 1,
                accepted_at_ms: 1,
            },
        })
    }

    fn tally_with_queues() -> Tally {
        let mut t = Tally::new();
        t.record(&meta()).unwrap();
        for target in [1, 2] {
            t.record(&Record::Queue(QueueRecord {
                target: [target; 32],
                head_seq: 9,
                acked_through: 0,
            }))
            .unwrap();
        }
        t
    }

    #[test]
    fn a_repeated_or_reordered_item_is_damage() {
        let mut t = tally_with_queues();
        t.record(&item(1, 1)).unwrap();
        t.record(&item(1, 2)).unwrap();
        let e = t.record(&item(1, 2)).unwrap_err();
        assert!(e.contains("repeats"), "{e}");
        let mut t = tally_with_queues();
        t.record(&item(2, 1)).unwrap();
        assert!(t.record(&item(1, 5)).is_err(), "targets out of order");
        let mut t = tally_with_queues();
        t.record(&item(1, 3)).unwrap();
        assert!(t.record(&item(1, 2)).is_err(), "seqs out of order");
    }

    #[test]
    fn an_item_over_the_largest_item_limit_is_damage() {
        let mut t = tally_with_queues();
        let Record::Item(mut it) = item(1, 1) else {
            unreachable!()
        };
        it.wire = vec![b'x'; MAX_ITEM_BYTES_ACCEPTED as usize];
        t.record(&Record::Item(it.clone())).unwrap();
        it.seq = 2;
        it.wire.push(b'x');
        let e = t.record(&Record::Item(it)).unwrap_err();
        assert!(e.contains("over the"), "{e}");
    }

    #[test]
    fn a_repeated_dedup_row_is_damage_in_any_id_order() {
        let mut t = tally_with_queues();
        // ids inside a (target, sender) group may come in any (collation) order
        for (target, sender, id) in [(1, 1, "b"), (1, 1, "a"), (1, 2, "a"), (2, 1, "a")] {
            t.record(&dedup(target, sender, id)).unwrap();
        }
        let e = t.record(&dedup(2, 1, "a")).unwrap_err();
        assert!(e.contains("repeats"), "{e}");
        let mut t = tally_with_queues();
        t.record(&dedup(1, 2, "a")).unwrap();
        assert!(t.record(&dedup(1, 1, "z")).is_err(), "groups out of order");
    }

    #[test]
    fn an_item_above_its_queue_head_or_without_a_queue_is_damage() {
        let mut t = Tally::new();
        t.record(&meta()).unwrap();
        t.record(&Record::Queue(QueueRecord {
            target: [1; 32],
            head_seq: 5,
            acked_through: 0,
        }))
        .unwrap();
        t.record(&item(1, 5)).unwrap();
        let e = t.record(&item(1, 6)).unwrap_err();
        assert!(e.contains("above its queue's head"), "{e}");
        let e = t.record(&item(2, 1)).unwrap_err();
        assert!(e.contains("above its queue's head"), "{e}");
    }
}
