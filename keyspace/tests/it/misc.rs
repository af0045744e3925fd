//! Failed fsync answers errors and the store keeps serving; the ops log bound; stats; dump.

use crate::common;

use common::*;
use relay_keyspace::*;

#[test]
fn failed_fsync_answers_error_never_success_and_store_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1_000));
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    store.inject_persist_failures_for_tests(1);
    let err = store
        .insert(req(item(s, "A", &[(t, b"a")]), big_quotas()))
        .wait();
    assert!(
        matches!(err, Err(StoreError::Engine(ref why)) if why.contains("not durable")),
        "{err:?}"
    );
    // Not durable, so not served.
    assert!(store.pull(&t, 0, 10, u64::MAX).unwrap().items.is_empty());
    assert_eq!(store.cursor(&t).unwrap().head_seq, 0);
    // The next group syncs; the retry is then a duplicate of the (now durable) first attempt.
    insert(&store, s, "B", &[(t, b"b")]);
    let retry = stored_seqs(&insert(&store, s, "A", &[(t, b"a")]));
    assert_eq!(store.pull(&t, 0, 10, u64::MAX).unwrap().items.len(), 2);
    assert!(retry[0].duplicate);
    check_invariants(&store);
}

#[test]
fn stats_and_dump() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(5_000);
    let store = open_with(dir.path(), clock.clone());
    let (s, t1, t2) = (key(1), key(2), key(3));
    enrol(&store, t1, "a");
    enrol(&store, t2, "b");
    insert(&store, s, "x", &[(t1, b"12345"), (t2, b"1")]);
    clock.advance(10);
    insert(&store, s, "y", &[(t1, b"123")]);
    let st = store.stats().unwrap();
    assert_eq!(st.queued, Usage { items: 3, bytes: 9 });
    assert_eq!(st.top_targets[0], (t1, Usage { items: 2, bytes: 8 }));
    assert_eq!(st.dedup_rows, 3);
    assert_eq!(st.oldest_queued_ms, Some(5_000));
    assert_eq!(st.live_enrolments, 2);
    assert!(st.disk_bytes > 0);

    let mut out = Vec::new();
    let counts = store.dump(&mut out, &DumpOptions::default()).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        counts.iter().map(|c| c.1).sum::<u64>() as usize,
        text.lines().count()
    );
    assert!(
        !text.contains("wire_b64"),
        "wire bytes dumped without asking"
    );
    let items = counts.iter().find(|c| c.0 == "items").unwrap().1;
    assert_eq!(items, 3);
    let mut out = Vec::new();
    store
        .dump(
            &mut out,
            &DumpOptions {
                partition: Some("items".into()),
                with_wire: true,
            },
        )
        .unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert!(lines
        .iter()
        .all(|l| l["partition"] == "items" && l["value"]["wire_b64"].is_string()));
    assert_eq!(lines[0]["value"]["item_id"], "x");
    assert!(store
        .dump(
            &mut Vec::new(),
            &DumpOptions {
                partition: Some("nope".into()),
                with_wire: false
            }
        )
        .is_err());
}

/// Times the idle hook of [`writer_runs_the_idle_hook_only_while_idle`] ran.
static IDLE_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn count_idle() {
    IDLE_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// `EngineOptions::on_writer_idle` runs on the writer every `WRITER_IDLE` while no job comes (the
/// relay returns allocator pages there), and the store serves normally around it.
#[test]
fn writer_runs_the_idle_hook_only_while_idle() {
    use std::sync::atomic::Ordering::SeqCst;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open_with(
        dir.path(),
        OpenOptions::default(),
        EngineOptions {
            on_writer_idle: Some(count_idle),
        },
    )
    .unwrap();
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    let busy_from = IDLE_CALLS.load(SeqCst);
    for i in 0..20 {
        insert(&store, s, &format!("I{i}"), &[(t, b"x")]);
    }
    assert!(
        IDLE_CALLS.load(SeqCst) <= busy_from + 1,
        "a busy writer does not run the hook after every job"
    );
    std::thread::sleep(WRITER_IDLE * 3 + WRITER_IDLE / 2);
    let idle = IDLE_CALLS.load(SeqCst) - busy_from;
    assert!(
        (2..=4).contains(&idle),
        "hook ran {idle} times in 3.5 idle periods"
    );
    insert(&store, s, "after", &[(t, b"y")]);
    assert_eq!(store.pull(&t, 0, 100, u64::MAX).unwrap().items.len(), 21);
    check_invariants(&store);
    store.close().unwrap();
}
