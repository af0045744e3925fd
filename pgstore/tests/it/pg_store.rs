//! The PostgreSQL store against a real throwaway cluster: durability refusal, migrations, and
//! the store rules on the operations it implements (the conformance suite covers the rest).

use std::sync::Arc;

use relay_pgstore::PgStore;
use relay_store::{
    AckOutcome, ChallengeIssue, EnrolOutcome, EnrolRequest, InsertOutcome, InsertRequest, ItemKind,
    LogVerdict, NewItem, NewTarget, OpenOptions, Quotas, RelayStore,
};
use relay_testkit::cluster::PgCluster;
use sha2::{Digest, Sha256};

fn quotas() -> Quotas {
    Quotas {
        max_queue_items: 3,
        max_queue_bytes: 1 << 20,
        max_sender_items: 100,
        max_sender_bytes: 1 << 20,
        max_account_items: 100,
        max_account_bytes: 1 << 20,
    }
}

pub(crate) fn enrol_req(k: u8) -> EnrolRequest {
    EnrolRequest {
        host_pubkey: [k; 32],
        host_name: format!("host{k}"),
        owner_fp: "owner".into(),
        account: None,
        authorized_by: "host-key".into(),
        authority_rank: 0,
        max_live: 100,
        invite: relay_store::InviteClaim::NotNeeded,
        org: None,
        client_id: None,
        denied_if: Vec::new(),
    }
}

pub(crate) fn item(id: &str, sender: u8, targets: &[u8], wire: &[u8]) -> InsertRequest {
    InsertRequest {
        item: NewItem {
            kind: ItemKind::Envelope,
            item_id: id.into(),
            sender: [sender; 32],
            targets: targets
                .iter()
                .map(|t| NewTarget {
                    target: [*t; 32],
                    wire: wire.to_vec(),
                    wire_hash: Sha256::digest(wire).into(),
                })
                .collect(),
        },
        quotas: quotas(),
        retention_ms: 60_000,
        require_live_sender: false,
    }
}

fn open(url: &str) -> Arc<dyn RelayStore> {
    Arc::new(PgStore::open(url, OpenOptions::default()).expect("open the postgres store"))
}

#[test]
fn a_session_without_synchronous_commit_is_refused_naming_the_setting() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = format!("{}?options=-c%20synchronous_commit%3Doff", pg.fresh_db());
    let err = PgStore::open(&url, OpenOptions::default())
        .err()
        .expect("a store whose commits are not durable must not open");
    assert!(err.to_string().contains("synchronous_commit"), "{err}");
}

#[test]
fn mail_rules_hold_on_postgres() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = pg.fresh_db();
    let s = open(&url);
    // A second open of the same database migrates nothing and shares the epoch.
    let epoch = s.meta().unwrap().epoch;
    assert_eq!(open(&url).meta().unwrap().epoch, epoch);

    s.pin_relay_pubkey([9; 32]).wait().unwrap();
    assert!(
        s.pin_relay_pubkey([8; 32]).wait().is_err(),
        "another relay key is refused"
    );

    for k in [1, 2, 3] {
        assert_eq!(
            s.enrol(enrol_req(k)).wait().unwrap(),
            EnrolOutcome::Enrolled
        );
    }
    assert_eq!(
        s.enrol(enrol_req(1)).wait().unwrap(),
        EnrolOutcome::AlreadyEnrolled
    );
    assert_eq!(s.live_enrolment_count().unwrap(), 3);

    // Fan-out to two targets: both seqs >= now, the same item again is a duplicate.
    let wire = b"\x00exact bytes\xff".to_vec();
    let out = s.insert(item("a", 1, &[2, 3], &wire)).wait().unwrap();
    let InsertOutcome::Stored { targets, .. } = out else {
        panic!("{out:?}")
    };
    assert!(targets.iter().all(|t| !t.duplicate));
    let again = s.insert(item("a", 1, &[2, 3], &wire)).wait().unwrap();
    let InsertOutcome::Stored { targets: dup, .. } = again else {
        panic!("{again:?}")
    };
    assert!(dup.iter().all(|t| t.duplicate));
    assert_eq!(dup[0].seq, targets[0].seq);
    // Same id, other bytes: a conflict, and nothing of it is stored.
    let c = s.insert(item("a", 1, &[2], b"other")).wait().unwrap();
    assert_eq!(c, InsertOutcome::Conflict { target: [2; 32] });
    // A target not enrolled: nothing stored for any target.
    let n = s.insert(item("b", 1, &[2, 7], &wire)).wait().unwrap();
    assert_eq!(n, InsertOutcome::TargetNotEnrolled { target: [7; 32] });
    assert_eq!(s.usage_target(&[2; 32]).unwrap().items, 1);

    // Quota: 3 items per queue, inclusive; a batch answers each item on its own.
    let outs = s
        .insert_many(vec![
            item("c", 1, &[2], &wire),
            item("d", 1, &[2], &wire),
            item("e", 1, &[2], &wire),
        ])
        .wait()
        .unwrap();
    assert!(matches!(outs[0], InsertOutcome::Stored { .. }));
    assert!(matches!(outs[1], InsertOutcome::Stored { .. }));
    assert!(
        matches!(outs[2], InsertOutcome::Quota { .. }),
        "{:?}",
        outs[2]
    );

    let page = s.pull(&[2; 32], 0, 10, 1 << 20).unwrap();
    assert_eq!(page.items.len(), 3);
    assert_eq!(page.items[0].wire, wire, "bytes stored exactly");
    assert!(page.items.windows(2).all(|w| w[0].seq < w[1].seq));
    let head = page.head_seq;
    assert_eq!(page.items[2].seq, head);
    let small = s.pull(&[2; 32], 0, 2, 1).unwrap();
    assert_eq!(
        small.items.len(),
        1,
        "at least one item, then the byte bound"
    );
    assert!(small.more);

    assert_eq!(
        s.ack(&[2; 32], head + 1).wait().unwrap(),
        AckOutcome::BeyondHead { head_seq: head }
    );
    let acked = s.ack(&[2; 32], page.items[1].seq).wait().unwrap();
    assert_eq!(
        acked,
        AckOutcome::Acked {
            acked_through: page.items[1].seq,
            deleted: 2,
            head_seq: head
        }
    );
    assert_eq!(s.usage_target(&[2; 32]).unwrap().items, 1);
    assert_eq!(s.usage_sender(&[1; 32], &[2; 32]).unwrap().items, 1);
    let rest = s.pull(&[2; 32], 0, 10, 1 << 20).unwrap();
    assert_eq!(rest.items.len(), 1);
    // A dedup row outlives the ack: the same item again is a duplicate, not a new item.
    let late = s.insert(item("a", 1, &[2], &wire)).wait().unwrap();
    assert!(matches!(late, InsertOutcome::Stored { ref targets, .. } if targets[0].duplicate));

    // The relay log is chained over the enrolments and re-enrolments.
    s.rotate_epoch("test").wait().unwrap();
    assert_ne!(s.meta().unwrap().epoch, epoch);
    match s.verify_log().unwrap() {
        LogVerdict::Intact { entries, .. } => assert_eq!(entries, 4),
        v => panic!("{v:?}"),
    }
}

#[test]
fn leases_and_challenges_are_shared_by_processes_on_one_database() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = pg.fresh_db();
    let (a, b) = (open(&url), open(&url));
    assert!(a.try_lease("sweep", "a", 60_000).wait().unwrap());
    assert!(
        !b.try_lease("sweep", "b", 60_000).wait().unwrap(),
        "held by a"
    );
    assert!(
        a.try_lease("sweep", "a", 60_000).wait().unwrap(),
        "a renews"
    );
    assert!(a.try_lease("sweep", "a", 0).wait().unwrap());
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(
        b.try_lease("sweep", "b", 60_000).wait().unwrap(),
        "expired: b takes it"
    );

    let (ca, cb) = (
        a.shared_challenges().unwrap(),
        b.shared_challenges().unwrap(),
    );
    let now = 1_000;
    assert_eq!(
        ca.issue([1; 32], "c1".into(), now, 5_000, 1)
            .wait()
            .unwrap(),
        ChallengeIssue::Issued
    );
    assert_eq!(
        cb.issue([2; 32], "c2".into(), now, 5_000, 1)
            .wait()
            .unwrap(),
        ChallengeIssue::Full,
        "the cap counts the other process's challenges"
    );
    assert_eq!(
        cb.pending(&[1; 32], now).wait().unwrap().as_deref(),
        Some("c1")
    );
    assert_eq!(
        cb.pending(&[1; 32], now + 5_000).wait().unwrap(),
        None,
        "expired"
    );
    cb.consume(&[1; 32], "wrong").wait().unwrap();
    assert!(ca.pending(&[1; 32], now).wait().unwrap().is_some());
    cb.consume(&[1; 32], "c1").wait().unwrap();
    assert_eq!(
        ca.pending(&[1; 32], now).wait().unwrap(),
        None,
        "single use"
    );
}

#[test]
fn a_conflict_storm_on_one_target_gives_unique_seqs_and_loses_nothing() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = pg.fresh_db();
    let s = open(&url);
    const SENDERS: u8 = 8;
    const EACH: usize = 40;
    assert_eq!(
        s.enrol(enrol_req(200)).wait().unwrap(),
        EnrolOutcome::Enrolled
    );
    for k in 0..SENDERS {
        s.enrol(enrol_req(k + 1)).wait().unwrap();
    }
    let mut big = quotas();
    big.max_queue_items = 1_000_000;
    // Two handles (as two relay processes), every sender pushing to the one target at once.
    let other = open(&url);
    let threads: Vec<_> = (0..SENDERS)
        .map(|k| {
            let store = if k % 2 == 0 {
                Arc::clone(&s)
            } else {
                Arc::clone(&other)
            };
            std::thread::spawn(move || {
                let mut seqs = Vec::new();
                for n in 0..EACH {
                    let mut req = item(&format!("{k}-{n}"), k + 1, &[200], b"storm");
                    req.quotas = big;
                    match store.insert(req).wait().expect("insert under contention") {
                        InsertOutcome::Stored { targets, .. } => seqs.push(targets[0].seq),
                        other => panic!("{other:?}"),
                    }
                }
                seqs
            })
        })
        .collect();
    let mut seqs: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    let n = seqs.len();
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(seqs.len(), n, "a seq was handed out twice");
    assert_eq!(n, usize::from(SENDERS) * EACH);
    let page = s.pull(&[200; 32], 0, 10_000, u64::MAX).unwrap();
    assert_eq!(page.items.len(), n, "every accepted item is queued");
    assert_eq!(s.usage_target(&[200; 32]).unwrap().items, n as u64);
}

#[test]
fn a_dump_lists_every_table_from_one_snapshot_with_wire_bytes_only_when_asked() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let s = open(&pg.fresh_db());
    for k in [1, 2] {
        s.enrol(enrol_req(k)).wait().unwrap();
    }
    s.insert(item("a", 1, &[2], b"wire-bytes")).wait().unwrap();
    let mut out = Vec::new();
    let counts = s
        .dump(&mut out, &relay_store::DumpOptions::default())
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let n = |t: &str| counts.iter().find(|(name, _)| name == t).map(|(_, n)| *n);
    assert_eq!(
        (n("enrolments"), n("items"), n("dedup")),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(
        lines.len() as u64,
        counts.iter().map(|(_, n)| n).sum::<u64>()
    );
    let item_line = lines.iter().find(|l| l["partition"] == "items").unwrap();
    assert!(item_line["key"]["seq"].is_i64(), "{item_line}");
    assert!(
        item_line["value"].get("wire").is_none(),
        "no wire bytes unless asked"
    );
    let mut out = Vec::new();
    let opts = relay_store::DumpOptions {
        partition: Some("items".into()),
        with_wire: true,
    };
    s.dump(&mut out, &opts).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(
        text.contains(&format!("\\\\x{}", "776972652d6279746573")),
        "{text}"
    );
    let bad = relay_store::DumpOptions {
        partition: Some("nope".into()),
        with_wire: false,
    };
    assert!(s.dump(&mut Vec::new(), &bad).is_err());
}

#[test]
fn push_batches_over_the_same_targets_in_other_orders_never_deadlock() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = pg.fresh_db();
    let s = open(&url);
    for k in 1..=6 {
        s.enrol(enrol_req(k)).wait().unwrap();
    }
    let other = open(&url);
    let threads: Vec<_> = (0..6u8)
        .map(|w| {
            let store = if w % 2 == 0 {
                Arc::clone(&s)
            } else {
                Arc::clone(&other)
            };
            std::thread::spawn(move || {
                for b in 0..8 {
                    // Each batch visits the targets in another order (and records sightings,
                    // which write the same enrolment rows in their own order).
                    let reqs: Vec<_> = (0..24u8)
                        .map(|n| {
                            let target = 1 + (n + w + b) % 6;
                            let mut r = item(&format!("{w}-{b}-{n}"), 1 + w % 6, &[target], b"x");
                            r.quotas.max_queue_items = 1_000_000;
                            r
                        })
                        .collect();
                    let outs = store.insert_many(reqs).wait().expect("a batch commits");
                    assert!(outs
                        .iter()
                        .all(|o| matches!(o, InsertOutcome::Stored { .. })));
                    let seen: Vec<_> = (1..=6u8)
                        .rev()
                        .map(|k| ([k; 32], 20_000 + u32::from(b)))
                        .collect();
                    store.record_seen(seen).wait().expect("sightings commit");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("no batch failed");
    }
    let total: u64 = (1..=6u8)
        .map(|k| s.usage_target(&[k; 32]).unwrap().items)
        .sum();
    assert_eq!(total, 6 * 8 * 24);
}

#[test]
fn relay_processes_starting_together_on_an_empty_database_all_open_it() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    for _ in 0..3 {
        let url = pg.fresh_db();
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                std::thread::spawn(move || PgStore::open(&url, OpenOptions::default()).map(|_| ()))
            })
            .collect();
        for o in opens {
            o.join().unwrap().expect("every process opens the database");
        }
    }
}

/// Runs `sql` on the database at `url` (for rows and columns the store's interface hides).
fn exec_sql(url: &str, sql: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let conn = tokio::spawn(conn);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = conn.await;
    });
}

/// Migration 3 counts the relay log's enrolment entries of a schema-2 database (whose log
/// holds them uncounted), in the transaction that records the version: the bookkeeping check
/// then agrees with the entries, and the enrolment budget starts from the right count.
#[test]
fn migration_3_counts_the_relay_logs_enrolment_entries() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = pg.fresh_db();
    let s = open(&url);
    for k in [1, 2, 3] {
        assert_eq!(
            s.enrol(enrol_req(k)).wait().unwrap(),
            EnrolOutcome::Enrolled
        );
    }
    s.log_op("note", "not an enrolment").wait().unwrap();
    RelayStore::close(&*s).unwrap();
    // Back to schema 2, as a store written before the budget.
    exec_sql(
        &url,
        "DROP INDEX enrolments_live_client; \
         ALTER TABLE enrolments DROP COLUMN org, DROP COLUMN client_id; \
         DROP TABLE deny_list; DROP TABLE invites; DROP TABLE processes; \
         ALTER TABLE meta DROP COLUMN ops_enrol_held; \
         DELETE FROM schema_version WHERE version >= 3",
    );
    let s = PgStore::open(&url, OpenOptions::default()).expect("open migrates");
    assert_eq!(
        s.bookkeeping_errors_for_tests().unwrap(),
        Vec::<String>::new()
    );
    RelayStore::close(&s).unwrap();
    exec_sql(&url, "UPDATE meta SET ops_enrol_held = 0");
    let s = PgStore::open(&url, OpenOptions::default()).expect("open");
    let errors = s.bookkeeping_errors_for_tests().unwrap();
    assert!(
        errors.len() == 1
            && errors[0].starts_with("the relay log's enrolment count differs from its entries"),
        "the check sees a wrong count: {errors:?}"
    );
    RelayStore::close(&s).unwrap();
}

#[test]
fn pushes_arriving_together_share_a_transaction_and_each_gets_its_own_outcome() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let url = pg.fresh_db();
    let s = open(&url);
    for k in [1, 2] {
        s.enrol(enrol_req(k)).wait().unwrap();
    }
    let mut big = quotas();
    big.max_queue_items = 1_000_000;
    let push = |id: &str, targets: &[u8], wire: &[u8]| {
        let mut r = item(id, 1, targets, wire);
        r.quotas = big;
        s.insert(r)
    };
    let before = relay_pgstore::pool_figures().unwrap_or_default();
    // Every answer is asked for before any is awaited: they queue behind the first groups.
    let mut pending: Vec<_> = (0..40)
        .map(|n| push(&format!("g{n}"), &[2], b"w"))
        .collect();
    pending.push(push("g0", &[2], b"w"));
    pending.push(push("g1", &[2], b"other"));
    pending.push(push("to-nobody", &[9], b"w"));
    let out: Vec<InsertOutcome> = pending.into_iter().map(|p| p.wait().unwrap()).collect();
    let after = relay_pgstore::pool_figures().unwrap();
    let groups = after.insert_groups - before.insert_groups;
    let pushes = after.grouped_pushes - before.grouped_pushes;
    assert!(pushes >= 43, "every push went through a group: {pushes}");
    assert!(
        groups < pushes,
        "{pushes} pushes in {groups} transactions: none shared one"
    );

    let stored = |o: &InsertOutcome| match o {
        InsertOutcome::Stored { targets, .. } => Some((targets[0].seq, targets[0].duplicate)),
        _ => None,
    };
    // g0 twice: stored once, the other a duplicate of the same seq (whichever ran first).
    let mut g0 = [stored(&out[0]).unwrap(), stored(&out[40]).unwrap()];
    g0.sort_by_key(|x| x.1);
    assert_eq!((g0[0].1, g0[1].1), (false, true));
    assert_eq!(g0[0].0, g0[1].0);
    // g1 with other bytes: one of the two is a conflict, the other stored.
    let g1 = [&out[1], &out[41]];
    assert_eq!(g1.iter().filter(|o| stored(o).is_some()).count(), 1);
    assert_eq!(
        g1.iter()
            .filter(|o| matches!(o, InsertOutcome::Conflict { .. }))
            .count(),
        1
    );
    assert_eq!(
        out[42],
        InsertOutcome::TargetNotEnrolled { target: [9; 32] }
    );
    let mut seqs: Vec<u64> = out[..40].iter().filter_map(stored).map(|x| x.0).collect();
    let g1_stored = stored(&out[1]).is_some();
    assert_eq!(seqs.len(), if g1_stored { 40 } else { 39 });
    seqs.sort_unstable();
    seqs.dedup();
    assert_eq!(
        seqs.len(),
        if g1_stored { 40 } else { 39 },
        "a seq was handed out twice"
    );
    let page = s.pull(&[2; 32], 0, 10_000, u64::MAX).unwrap();
    assert_eq!(page.items.len(), 40, "each item queued once");
    assert_eq!(s.usage_target(&[2; 32]).unwrap().items, 40);
}

/// Store `(id, sender, target)` items that expire at once, each stored.
fn store_expiring(s: &dyn RelayStore, items: impl Iterator<Item = (String, u8, u8)>) {
    let reqs: Vec<InsertRequest> = items
        .map(|(id, sender, target)| {
            let mut r = item(&id, sender, &[target], b"w");
            r.quotas.max_queue_items = 10_000;
            r.quotas.max_sender_items = 10_000;
            r.retention_ms = 1;
            r
        })
        .collect();
    let n = reqs.len();
    let out = s.insert_many(reqs).wait().unwrap();
    let stored = out
        .iter()
        .filter(|o| matches!(o, InsertOutcome::Stored { .. }))
        .count();
    assert_eq!(stored, n, "{:?}", out.last());
}

/// Sweep calls far in the future, without notices: (expired, more) of each until none is left.
fn sweep_calls(s: &dyn RelayStore) -> Vec<(u64, bool)> {
    let later = u64::try_from(i64::MAX / 2).unwrap();
    let mut calls = Vec::new();
    loop {
        let r = s
            .sweep(later, 0, quotas(), 1, 1_000, Box::new(|_, _| None))
            .wait()
            .unwrap();
        calls.push((r.expired, r.more));
        if !r.more || calls.len() > 10 {
            return calls;
        }
    }
}

#[test]
fn a_sweep_call_expires_at_most_1000_items_and_says_there_is_more() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let s = open(&pg.fresh_db());
    for k in [1, 2] {
        s.enrol(enrol_req(k)).wait().unwrap();
    }
    store_expiring(&*s, (0..1_050).map(|n| (format!("x{n}"), 1, 2)));
    assert_eq!(sweep_calls(&*s), vec![(1_000, true), (50, false)]);
    assert_eq!(s.usage_target(&[2; 32]).unwrap().items, 0);
}

/// Each item queued for the sender of the one before it (in key order) leaves in a run of its
/// own (its notice must not see the next one go): a call takes out at most 100 runs.
#[test]
fn a_sweep_call_takes_out_at_most_100_runs_and_says_there_is_more() {
    let Some(pg) = PgCluster::start_or_skip("pg_store") else {
        return;
    };
    let s = open(&pg.fresh_db());
    for k in 1..=121 {
        let req = EnrolRequest {
            max_live: 1_000,
            ..enrol_req(k)
        };
        s.enrol(req).wait().unwrap();
    }
    store_expiring(&*s, (1..=120).map(|n| (format!("x{n}"), n + 1, n)));
    assert_eq!(sweep_calls(&*s), vec![(100, true), (20, false)]);
    assert!((1..=120).all(|k| s.usage_target(&[k; 32]).unwrap().items == 0));
}
