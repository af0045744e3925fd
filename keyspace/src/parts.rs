//! The fjall database and its thirteen partitions (keyspaces).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fjall::compaction::Leveled;
use fjall::config::{CompressionPolicy, FilterPolicy, PinningPolicy};
use fjall::{
    CompressionType, Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions, PersistMode,
};

use relay_store::Result;

/// Memtable of `items` (wire bytes). Counted in wire bytes, but the values go to blob files at
/// flush: the table a flush writes holds only keys and blob pointers (~60 bytes an item), so an
/// 8 MiB memtable made level-0 tables of ~0.5 MB, and every merge of twelve of them rewrote the
/// whole of L1 (all of the queue's keys: their keys are target-ordered, each table spans all of
/// them). Four times the memtable, a quarter of those rewrites per item: growth bench, 600,000
/// queued, relay CPU per batched item 80 -> 96 µs (1.20x) over three rounds with 8 MiB and
/// 80 -> 86 µs (1.08x) with 32 MiB (docs/performance.md). Still under the 64 MiB journal cap.
const ITEMS_MEMTABLE: u64 = 32 * 1024 * 1024;
/// Memtable of every other partition.
const SMALL_MEMTABLE: u64 = 4 * 1024 * 1024;
/// Level-0 tables of the items, dedup and expiry partitions before they are merged into L1
/// (fjall's default: 4).
const L0_TABLES_BEFORE_COMPACTION: u8 = 12;
/// Table size of the items, dedup and expiry partitions (fjall's default: 64 MiB). L1 holds
/// `L0_TABLES_BEFORE_COMPACTION` of them: 48 MiB instead of 768 MiB, so once a partition's keys
/// outgrow it (about 800,000 items' keys) they move on to L2 and deeper in merges of a few
/// tables each, instead of every level-0 merge rewriting one L1 that grows with the queue.
const TABLE_TARGET: u64 = 4 * 1024 * 1024;

/// Leveled compaction that waits for [`L0_TABLES_BEFORE_COMPACTION`] level-0 tables. For the
/// partitions written on every push (items, dedup, expiry): their rows come in no useful key
/// order, so every flushed table overlaps the whole of L1 and each L0 -> L1 compaction rewrites
/// all of L1. Waiting for three times as many tables (still below fjall's write stall at 20)
/// rewrites L1 a third as often; point reads check a few more (pinned) filters.
fn few_l0_merges() -> Arc<Leveled> {
    Arc::new(
        Leveled::default()
            .with_l0_threshold(L0_TABLES_BEFORE_COMPACTION)
            .with_table_target_size(TABLE_TARGET),
    )
}

/// The partition names, in backup/dump order.
pub const PARTITIONS: [&str; 13] = [
    "meta",
    "enrolments",
    "enc_ads",
    "sender_lists",
    "items",
    "dedup",
    "seqs",
    "acked",
    "usage",
    "expiry",
    "ops",
    "dedup_expiry",
    "sender_index",
];

/// A partition, numbered in [`PARTITIONS`] order (the backup file's partition id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub(crate) enum Part {
    Meta = 0,
    Enrolments = 1,
    EncAds = 2,
    SenderLists = 3,
    Items = 4,
    Dedup = 5,
    Seqs = 6,
    Acked = 7,
    Usage = 8,
    Expiry = 9,
    Ops = 10,
    DedupExpiry = 11,
    SenderIndex = 12,
}

impl Part {
    pub(crate) const ALL: [Part; 13] = [
        Part::Meta,
        Part::Enrolments,
        Part::EncAds,
        Part::SenderLists,
        Part::Items,
        Part::Dedup,
        Part::Seqs,
        Part::Acked,
        Part::Usage,
        Part::Expiry,
        Part::Ops,
        Part::DedupExpiry,
        Part::SenderIndex,
    ];

    pub(crate) fn id(self) -> u8 {
        self as u8
    }

    pub(crate) fn name(self) -> &'static str {
        PARTITIONS[self as usize]
    }

    pub(crate) fn by_name(name: &str) -> Option<Part> {
        Part::ALL.iter().copied().find(|p| p.name() == name)
    }
}

/// The open database with a handle per partition.
pub(crate) struct Parts {
    pub db: Database,
    ks: Vec<Keyspace>,
}

impl Parts {
    /// Open (creating when absent) every partition of `db`.
    ///
    /// The options below apply when a partition is created: fjall keeps each keyspace's options
    /// (memtable size, compaction strategy, block and blob settings) in its own meta keyspace and
    /// reopens it with those, ignoring what is passed here. A store created by an older build
    /// opens and runs with its old settings; a backup restored into a new store gets these.
    ///
    /// # Errors
    /// `Engine` when fjall cannot open a keyspace.
    pub(crate) fn open(db: Database) -> Result<Parts> {
        let mut ks = Vec::with_capacity(Part::ALL.len());
        for p in Part::ALL {
            let handle = if p == Part::Items {
                // IMPORTANT: wire bytes are sealed (random): LZ4 only burns CPU on them.
                db.keyspace(p.name(), || {
                    KeyspaceCreateOptions::default()
                        .data_block_compression_policy(CompressionPolicy::disabled())
                        .max_memtable_size(ITEMS_MEMTABLE)
                        .compaction_strategy(few_l0_merges())
                        // Item records (wire bytes, ~1 KiB and up) go to blob files once, at
                        // flush; compaction then moves only keys and blob pointers. Batched
                        // pushes: relay CPU per item 57 → 53 µs at 150,000 queued, and the
                        // saving grows with the store (docs/performance-history.md).
                        .with_kv_separation(Some(
                            KvSeparationOptions::default()
                                .compression(CompressionType::None)
                                .separation_threshold(512),
                        ))
                })
                .map_err(crate::engine_error)?
            } else {
                // Small rows never fill a default (64 MiB) memtable, which would pin journals.
                db.keyspace(p.name(), || {
                    let opts = KeyspaceCreateOptions::default().max_memtable_size(SMALL_MEMTABLE);
                    match p {
                        // Nearly every push looks up a dedup row that is not there: keep the
                        // filters of every level in memory (~10 bits a row) instead of
                        // competing for the small block cache.
                        Part::Dedup => opts
                            .compaction_strategy(few_l0_merges())
                            .filter_block_pinning_policy(PinningPolicy::all(true)),
                        // Time-ordered indexes, written blind and only ever scanned in key
                        // order by the sweep: no filters, and no pinned index blocks (their
                        // tables move down whole and stay in L1, where fjall pins index blocks
                        // by default: with 1,000,000 queued, 69-73 instead of 55 MiB at rest).
                        Part::Expiry | Part::DedupExpiry => opts
                            .compaction_strategy(few_l0_merges())
                            .filter_policy(FilterPolicy::disabled())
                            .index_block_pinning_policy(PinningPolicy::all(false)),
                        // Small per-host rows (usage, seqs, enrolments, ...) read on every
                        // push: their index and filter blocks stay in memory at every level.
                        // IMPORTANT: fjall fills levels from the bottom and pins these blocks
                        // only in L0/L1 by default; with 100,000 hosts, once `usage` sat in a
                        // deep level each push's quota read loaded and checksummed its index
                        // block through the small block cache again: relay CPU per batched
                        // item 87 -> 481 µs at 800,000 queued (growth bench, 97 % of the
                        // relay's CPU in `reader::usage`, docs/performance-history.md).
                        _ => opts
                            .index_block_pinning_policy(PinningPolicy::all(true))
                            .filter_block_pinning_policy(PinningPolicy::all(true)),
                    }
                })
                .map_err(crate::engine_error)?
            };
            ks.push(handle);
        }
        Ok(Parts { db, ks })
    }

    pub(crate) fn ks(&self, p: Part) -> &Keyspace {
        &self.ks[p as usize]
    }
}

/// Longest wait at close for memtables to be written out as tables.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

impl Parts {
    /// Hand every partition's non-empty memtable to fjall's flush workers without waiting.
    /// False (logged) if fjall refused; the journal keeps the rows either way.
    pub(crate) fn rotate_memtables(&self) -> bool {
        for ks in &self.ks {
            if let Err(e) = ks.rotate_memtable() {
                tracing::warn!(error = %e, "flushing memtables failed; the journal keeps their data");
                return false;
            }
        }
        true
    }

    /// Write every partition's memtable out as a table (at close: less journal to replay).
    /// Best effort: a failure leaves the data in the journal, which is durable anyway.
    ///
    /// Bounded: fjall's own `rotate_memtable_and_wait` waits forever when a flush worker fails
    /// (disk full: it poisons the database and stops), which hung the close of a full store.
    pub(crate) fn flush_memtables(&self) {
        if !self.rotate_memtables() {
            return;
        }
        let deadline = Instant::now() + FLUSH_WAIT;
        while self.ks.iter().any(|k| k.sealed_memtable_count() > 0) {
            // A failed flush poisons the database: nothing more will be written out.
            if let Err(e) = self.db.persist(PersistMode::Buffer) {
                tracing::warn!(error = %e, "flushing memtables at close failed; the journal keeps their data");
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!("memtables not written out within {FLUSH_WAIT:?} at close; the journal keeps their data");
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
