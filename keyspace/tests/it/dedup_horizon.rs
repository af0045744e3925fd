//! The dedup horizon counts from ack or expiry (spec §2, §7): a dedup row is kept for retention +
//! 7 days after its item left the queue (acked, expired, purged, deleted), never pruned while the
//! item is queued, and its prune time moves in the same batch as the ack or sweep. Schema 4
//! stores (index keyed by acceptance) are migrated, also after a kill mid-way.

use crate::common;

use common::*;
use relay_keyspace::*;

const DAY: u64 = 24 * 3600 * 1000;
const RETENTION: u64 = 14 * DAY;
/// What the relay adds to the retention (`core/src/config.rs` DEDUP_GRACE).
const GRACE: u64 = 7 * DAY;
/// Day 0 of every test (any time far from the epoch).
const T0: u64 = 1_800_000_000_000;

/// One sweep at the clock's now with the relay's cutoff: now − (retention + 7 days).
fn sweep_now(store: &Store, clock: &TestClock) -> SweepReport {
    let now = clock.0.load(std::sync::atomic::Ordering::SeqCst);
    store
        .sweep(
            now,
            now.saturating_sub(RETENTION + GRACE),
            big_quotas(),
            RETENTION,
            1_000,
            notice_fn(key(100)),
        )
        .wait()
        .unwrap()
}

fn insert_14d(store: &Store, sender: Key32, id: &str, target: Key32) -> InsertOutcome {
    store
        .insert(InsertRequest {
            item: item(sender, id, &[(target, b"wire")]),
            quotas: big_quotas(),
            retention_ms: RETENTION,
            require_live_sender: false,
        })
        .wait()
        .unwrap()
}

/// The prune-index rows as (gone_at, item_id).
fn horizons(store: &Store) -> Vec<(u64, String)> {
    rows_of(store, "dedup_expiry")
        .into_iter()
        .map(|(k, _)| {
            (
                k["dedup_gone_at"].as_u64().unwrap(),
                k["item_id"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

struct Fixture {
    _dir: tempfile::TempDir,
    clock: std::sync::Arc<TestClock>,
    store: Store,
    sender: Key32,
    target: Key32,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let (sender, target) = (key(1), key(2));
    enrol(&store, sender, "sender");
    enrol(&store, target, "target");
    Fixture {
        _dir: dir,
        clock,
        store,
        sender,
        target,
    }
}

/// The issue's case: accepted on day 0, acked on day 13 (retention 14 days), retried on day 20:
/// a duplicate with the original seq. And past the old rule (accept + 21 days) too: the row
/// lives until ack + 21 days.
#[test]
fn a_retry_20_days_after_accept_of_an_item_acked_on_day_13_is_still_a_duplicate() {
    let f = fixture();
    let seq = stored_seqs(&insert_14d(&f.store, f.sender, "m", f.target))[0].seq;
    f.clock.set(T0 + 13 * DAY);
    // Acked after a pull (the ack takes the pulled item's hint, reading no record back).
    let page = f.store.pull(&f.target, 0, 10, u64::MAX).unwrap();
    assert_eq!(page.items.len(), 1);
    f.store.ack(&f.target, seq).wait().unwrap();
    assert_eq!(horizons(&f.store), vec![(T0 + 13 * DAY, "m".to_string())]);

    for day in [20, 21, 25, 33] {
        f.clock.set(T0 + day * DAY + 1);
        assert_eq!(sweep_now(&f.store, &f.clock).dedup_pruned, 0, "day {day}");
        let retry = stored_seqs(&insert_14d(&f.store, f.sender, "m", f.target))[0];
        assert_eq!(
            (retry.duplicate, retry.seq),
            (true, seq),
            "a retry on day {day} must be a duplicate"
        );
    }
    assert!(f
        .store
        .pull(&f.target, seq, 10, u64::MAX)
        .unwrap()
        .items
        .is_empty());
    check_invariants(&f.store);
}

/// After ack + retention + 7 days the row is pruned (and a push of the same id is new mail).
#[test]
fn after_ack_plus_retention_plus_7_days_the_dedup_row_is_pruned() {
    let f = fixture();
    let seq = stored_seqs(&insert_14d(&f.store, f.sender, "m", f.target))[0].seq;
    f.clock.set(T0 + 13 * DAY);
    // Acked without a pull: the ack reads the item's record.
    f.store.ack(&f.target, seq).wait().unwrap();
    let ack_at = T0 + 13 * DAY;

    f.clock.set(ack_at + RETENTION + GRACE);
    assert_eq!(
        sweep_now(&f.store, &f.clock).dedup_pruned,
        0,
        "at the horizon"
    );
    assert!(f.store.dedup(&f.sender, "m", &f.target).unwrap().is_some());
    f.clock.set(ack_at + RETENTION + GRACE + 1);
    assert_eq!(
        sweep_now(&f.store, &f.clock).dedup_pruned,
        1,
        "past the horizon"
    );
    assert!(f.store.dedup(&f.sender, "m", &f.target).unwrap().is_none());
    assert!(horizons(&f.store).is_empty());
    let again = stored_seqs(&insert_14d(&f.store, f.sender, "m", f.target))[0];
    assert!(!again.duplicate && again.seq > seq);
    check_invariants(&f.store);
}

/// A queued item's dedup row has no prune-index row and survives every sweep, however far past
/// its acceptance (a never-expiring item, so no expiry takes it out of the queue).
#[test]
fn a_dedup_row_of_a_queued_item_is_never_pruned() {
    let f = fixture();
    let out = f
        .store
        .insert(InsertRequest {
            item: item(f.sender, "q", &[(f.target, b"wire")]),
            quotas: big_quotas(),
            retention_ms: NEVER_EXPIRES,
            require_live_sender: false,
        })
        .wait()
        .unwrap();
    let seq = stored_seqs(&out)[0].seq;
    assert!(horizons(&f.store).is_empty(), "no prune row while queued");
    for years in [1, 10, 100] {
        f.clock.set(T0 + years * 365 * DAY);
        let r = sweep_now(&f.store, &f.clock);
        assert_eq!((r.expired, r.dedup_pruned), (0, 0), "{years} years");
    }
    // Even with a cutoff beyond every time there is.
    let r = f
        .store
        .sweep(
            u64::MAX - 1,
            u64::MAX,
            big_quotas(),
            RETENTION,
            1_000,
            notice_fn(key(100)),
        )
        .wait()
        .unwrap();
    assert_eq!(r.dedup_pruned, 0);
    assert_eq!(
        f.store
            .dedup(&f.sender, "q", &f.target)
            .unwrap()
            .unwrap()
            .seq,
        seq
    );
    assert_eq!(
        f.store
            .pull(&f.target, 0, 10, u64::MAX)
            .unwrap()
            .items
            .len(),
        1
    );
}

/// An expired item's row counts from its expiry (the sweep that deleted it), not its acceptance.
#[test]
fn the_dedup_row_of_an_expired_item_is_kept_for_the_horizon_after_its_expiry() {
    let f = fixture();
    let seq = stored_seqs(&insert_14d(&f.store, f.sender, "x", f.target))[0].seq;
    let swept_at = T0 + RETENTION + DAY; // the sweep runs a day late
    f.clock.set(swept_at);
    let r = sweep_now(&f.store, &f.clock);
    assert_eq!((r.expired, r.notices), (1, 1), "{r:?}");
    assert_eq!(horizons(&f.store), vec![(swept_at, "x".to_string())]);

    f.clock.set(swept_at + RETENTION + GRACE);
    assert_eq!(sweep_now(&f.store, &f.clock).dedup_pruned, 0);
    let retry = stored_seqs(&insert_14d(&f.store, f.sender, "x", f.target))[0];
    assert_eq!(
        (retry.duplicate, retry.seq),
        (true, seq),
        "a late retry is no re-delivery"
    );
    f.clock.set(swept_at + RETENTION + GRACE + 1);
    // The expiry notice (queued for the sender since) keeps its row; the expired item's goes.
    assert_eq!(sweep_now(&f.store, &f.clock).dedup_pruned, 1);
    assert!(f.store.dedup(&f.sender, "x", &f.target).unwrap().is_none());
}

/// A purge and a single-item delete take items out for good: their horizons start then too.
#[test]
fn purged_and_deleted_items_start_their_horizon_when_they_leave() {
    let f = fixture();
    let a = stored_seqs(&insert_14d(&f.store, f.sender, "a", f.target))[0].seq;
    insert_14d(&f.store, f.sender, "b", f.target);
    f.clock.set(T0 + DAY);
    assert!(f.store.delete_item(&f.target, a).wait().unwrap());
    f.clock.set(T0 + 2 * DAY);
    let out = f
        .store
        .revoke_key(
            RevokeRequest {
                key: f.target,
                revoke: false,
                purge: true,
                reason: "test".into(),
                admin_uid: 0,
                quotas: big_quotas(),
                retention_ms: RETENTION,
            },
            notice_fn(key(100)),
        )
        .wait()
        .unwrap();
    assert!(matches!(out, RevokeOutcome::Done(r) if r.purged_items == 1));
    assert_eq!(
        horizons(&f.store),
        vec![(T0 + DAY, "a".to_string()), (T0 + 2 * DAY, "b".to_string())]
    );
}

/// A rotation moves dedup rows: a moved queued item's row stays unindexed until its ack under the
/// new key; a row whose item was already gone counts from the rotation (its ack time is not kept).
#[test]
fn a_rotation_keeps_the_horizon_rule_for_moved_dedup_rows() {
    let f = fixture();
    let new = key(3);
    let acked = stored_seqs(&insert_14d(&f.store, f.sender, "acked", f.target))[0].seq;
    insert_14d(&f.store, f.sender, "queued", f.target);
    f.clock.set(T0 + DAY);
    f.store.ack(&f.target, acked).wait().unwrap();
    f.clock.set(T0 + 2 * DAY);
    assert_eq!(
        f.store.rebind(f.target, new).wait().unwrap(),
        RebindOutcome::Moved { moved: 1 }
    );
    let rows = rows_of(&f.store, "dedup_expiry");
    let new_hex: String = new.iter().map(|b| format!("{b:02x}")).collect();
    let for_new: Vec<_> = rows
        .iter()
        .filter(|(k, _)| k["target"] == new_hex.as_str())
        .map(|(k, _)| (k["dedup_gone_at"].as_u64().unwrap(), k["item_id"].clone()))
        .collect();
    assert_eq!(for_new, vec![(T0 + 2 * DAY, "acked".into())]);
    let seq = f.store.pull(&new, 0, 10, u64::MAX).unwrap().items[0].seq;
    f.clock.set(T0 + 3 * DAY);
    f.store.ack(&new, seq).wait().unwrap();
    // The old key's stale index row goes with the first sweep past it, alone.
    f.clock.set(T0 + 3 * DAY + RETENTION + GRACE + 1);
    let r = sweep_now(&f.store, &f.clock);
    assert_eq!(r.dedup_pruned, 2, "{r:?}");
    assert!(horizons(&f.store).is_empty());
    assert!(f.store.dedup(&f.sender, "queued", &new).unwrap().is_none());
}

/// A schema-4 store (every dedup row indexed by its acceptance) is migrated at open: rows of
/// queued items lose their index row, rows of gone items count from the migration, and from then
/// on acks and sweeps follow the new rule.
#[test]
fn a_schema_4_dedup_index_is_migrated_to_horizons_from_ack_or_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let (s, t) = (key(1), key(2));
    enrol(&store, s, "s");
    enrol(&store, t, "t");
    let first = stored_seqs(&insert_14d(&store, s, "acked", t))[0].seq;
    insert_14d(&store, s, "queued", t);
    store.ack(&t, first).wait().unwrap();
    store.close().unwrap();
    assert_eq!(testing::downgrade_to_schema_4(dir.path()).unwrap(), 2);

    let opened_at = T0 + 5 * DAY;
    clock.set(opened_at);
    let store = open_with(dir.path(), clock.clone());
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    let entry = &store.ops(1).unwrap()[0];
    assert_eq!(entry.kind, "migrate");
    assert!(
        entry.detail.starts_with(&format!(
            "schema 4 -> {SCHEMA_VERSION} (dedup horizons: 1 rows"
        )),
        "{}",
        entry.detail
    );
    assert_eq!(horizons(&store), vec![(opened_at, "acked".to_string())]);
    // The acked item's row lives until the migration + 21 days (never shorter than the rule);
    // the queued item expires in the meantime and its horizon starts then.
    clock.set(opened_at + RETENTION + GRACE);
    let r = sweep_now(&store, &clock);
    assert_eq!((r.expired, r.dedup_pruned), (1, 0), "{r:?}");
    clock.set(opened_at + RETENTION + GRACE + 1);
    let r = sweep_now(&store, &clock);
    assert_eq!((r.expired, r.dedup_pruned), (0, 1), "{r:?}");
    assert!(store.dedup(&s, "acked", &t).unwrap().is_none());
    assert!(store.dedup(&s, "queued", &t).unwrap().is_some());
    check_invariants(&store);
}

#[test]
#[ignore = "child process of a_dedup_horizon_migration_killed_after_its_first_batch_finishes_at_the_next_open"]
fn horizon_migrate_child() {
    open_child();
}

/// 10,304 dedup rows (more than one batch of 10,000), half of their items acked: a process
/// killed (abort, like `kill -9`) after the first batch leaves a store the next open migrates
/// completely, exactly as an uninterrupted migration would.
#[cfg(feature = "failpoints")]
#[test]
fn a_dedup_horizon_migration_killed_after_its_first_batch_finishes_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let s = key(1);
    let targets: Vec<Key32> = (0..64).map(|i| key(100 + i)).collect();
    for (i, t) in targets.iter().enumerate() {
        enrol(&store, *t, &format!("t{i}"));
    }
    enrol(&store, s, "s");
    let mut heads = Vec::new();
    for i in 0..161 {
        let to: Vec<(Key32, &[u8])> = targets.iter().map(|t| (*t, &b"w"[..])).collect();
        insert(&store, s, &format!("m{i}"), &to);
        if i == 80 {
            heads = targets
                .iter()
                .map(|t| store.cursor(t).unwrap().head_seq)
                .collect();
        }
    }
    // Items m0..=m80 acked on every target: 81 * 64 rows of gone items, 80 * 64 queued.
    for (t, h) in targets.iter().zip(&heads) {
        store.ack(t, *h).wait().unwrap();
    }
    store.close().unwrap();
    assert_eq!(
        testing::downgrade_to_schema_4(dir.path()).unwrap(),
        161 * 64
    );

    open_aborted_at(
        "dedup_horizon::horizon_migrate_child",
        dir.path(),
        "migrate-after-batch",
    );
    assert_eq!(
        testing::raw_rows(dir.path(), "meta")
            .unwrap()
            .iter()
            .find(|(k, _)| k == b"schema_version")
            .map(|(_, v)| v.clone()),
        Some(vec![4]),
        "the version marker moves only in the last batch"
    );
    let opened_at = T0 + DAY;
    clock.set(opened_at);
    let store = open_with(dir.path(), clock.clone());
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    let h = horizons(&store);
    assert_eq!(h.len(), 81 * 64, "one row per gone item, none doubled");
    assert!(h.iter().all(|(at, _)| *at == opened_at));
    let mut ids: Vec<u32> = h.iter().map(|(_, id)| id[1..].parse().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, (0..=80).collect::<Vec<_>>());
    assert_eq!(store.stats().unwrap().dedup_rows, 161 * 64);
    check_invariants(&store);
}

/// A backup of a schema-4 store (format 4, prune index keyed by acceptance) still verifies and
/// restores: the restored store is migrated before it serves, so its gone items count from the
/// restore and its queued item has no prune time.
#[test]
fn a_format_4_backup_of_a_schema_4_store_restores_with_horizons_from_ack_or_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("live");
    let clock = TestClock::new(T0);
    let store = open_with(&live, clock.clone());
    let (s, t) = (key(1), key(2));
    enrol(&store, s, "s");
    enrol(&store, t, "t");
    let first = stored_seqs(&insert_14d(&store, s, "acked", t))[0].seq;
    insert_14d(&store, s, "queued", t);
    store.ack(&t, first).wait().unwrap();
    store.close().unwrap();
    testing::downgrade_to_schema_4(&live).unwrap();
    let file = dir.path().join("f4.mbxbak");
    let mut f = std::fs::File::create(&file).unwrap();
    testing::backup_closed_store(&live, 4, &mut f).unwrap();
    drop(f);
    let summary = verify_backup(&file).unwrap();
    assert_eq!((summary.format_version, summary.schema_version), (4, 4));
    let count = |name: &str| summary.counts.iter().find(|(n, _)| n == name).map(|c| c.1);
    assert_eq!(count("dedup_expiry"), Some(2), "schema 4 indexed both rows");

    let restored = dir.path().join("r");
    let before = SystemClock.now_ms();
    restore_backup(&file, &restored).unwrap();
    let after = SystemClock.now_ms();
    let store = open_with(&restored, clock.clone());
    assert_eq!(store.meta().unwrap().schema_version, SCHEMA_VERSION);
    let h = horizons(&store);
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0].1, "acked");
    assert!((before..=after).contains(&h[0].0), "{h:?}");
    assert!(store.dedup(&s, "queued", &t).unwrap().is_some());
    check_invariants(&store);
}
