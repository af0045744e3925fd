//! Last seen, the enrolment listing and idle-enrolment expiry, on a clock-injected store.

use crate::common;

use common::*;
use relay_keyspace::*;

const T0: u64 = 1_700_000_000_000;
const IDLE_90D: u64 = 90 * DAY_MS;

fn rows(store: &Store, filter: &HostFilter) -> Vec<HostRow> {
    let mut out = Vec::new();
    let n = store
        .hosts(filter, &mut |r| {
            out.push(r.clone());
            Ok(())
        })
        .unwrap();
    assert_eq!(n, out.len() as u64);
    out
}

fn row(store: &Store, pk: &Key32) -> Option<HostRow> {
    rows(store, &HostFilter::default())
        .into_iter()
        .find(|r| r.enrolment.host_pubkey == *pk)
}

fn list(target: Key32, senders: Vec<Key32>) -> SenderList {
    SenderList {
        target,
        senders,
        iat_ms: T0,
        record: b"{}".to_vec(),
        sig: "sig".into(),
    }
}

#[test]
fn last_seen_is_written_at_most_once_per_key_per_day() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let (a, stranger) = (key(1), key(2));
    enrol(&store, a, "alpha");
    let today = utc_day(T0);
    assert_eq!(
        row(&store, &a).unwrap().last_seen_day,
        None,
        "seen at enrolment"
    );
    assert_eq!(store.record_seen(vec![(a, today)]).wait().unwrap(), 1);
    assert_eq!(store.record_seen(vec![(a, today)]).wait().unwrap(), 0);
    assert_eq!(
        store.record_seen(vec![(a, today - 1)]).wait().unwrap(),
        0,
        "never backwards"
    );
    assert_eq!(
        store.record_seen(vec![(stranger, today)]).wait().unwrap(),
        0,
        "not enrolled"
    );
    assert_eq!(row(&store, &a).unwrap().last_seen_day, Some(today));
    assert_eq!(store.record_seen(vec![(a, today + 1)]).wait().unwrap(), 1);
    assert_eq!(row(&store, &a).unwrap().last_seen_day, Some(today + 1));
    // The row is a distinct key form in `enrolments`: the dump names it.
    let seen: Vec<_> = rows_of(&store, "enrolments")
        .into_iter()
        .filter(|(k, _)| k.get("last_seen").is_some())
        .collect();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].1["day"], u64::from(today + 1));
}

#[test]
fn hosts_lists_every_enrolment_with_its_figures_and_filters() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let (a, b, c, d) = (key(1), key(2), key(3), key(4));
    enrol(&store, a, "Alpha");
    enrol(&store, b, "beta");
    enrol(&store, c, "gamma");
    insert(&store, a, "m1", &[(b, b"hello")]);
    store
        .put_enc_ad(EncAd {
            host_pubkey: b,
            enc_pub: "e".into(),
            sig: "s".into(),
            at_ms: T0 + 5,
        })
        .wait()
        .unwrap();
    clock.advance(40 * DAY_MS);
    store
        .record_seen(vec![(c, utc_day(clock.now_ms()))])
        .wait()
        .unwrap();
    // Rotating c to d revokes c; d is seen today.
    store.rebind(c, d).wait().unwrap();

    let all = rows(&store, &HostFilter::default());
    assert_eq!(all.len(), 4);
    let rb = row(&store, &b).unwrap();
    assert_eq!(rb.queue, Usage { items: 1, bytes: 5 });
    assert_eq!(rb.enc_ad_v1_at_ms, Some(T0 + 5));
    assert_eq!(rb.enc_ad_v2_at_ms, None);
    assert_eq!(rb.last_seen_ms(), T0, "never seen: enrolment time");
    let rc = row(&store, &c).unwrap();
    assert!(rc.enrolment.revoked_at_ms.is_some());
    assert_eq!(
        rc.last_seen_day, None,
        "rotation moves last seen off the old key"
    );
    assert_eq!(
        row(&store, &d).unwrap().last_seen_day,
        Some(utc_day(clock.now_ms()))
    );

    let by_name = rows(
        &store,
        &HostFilter {
            name: Some("ALPHA".into()),
            ..Default::default()
        },
    );
    assert_eq!(by_name.len(), 1);
    assert_eq!(by_name[0].enrolment.host_pubkey, a);
    let revoked = rows(
        &store,
        &HostFilter {
            revoked_only: true,
            ..Default::default()
        },
    );
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0].enrolment.host_pubkey, c);
    let idle30 = rows(
        &store,
        &HostFilter {
            seen_at_or_before_ms: Some(clock.now_ms() - 30 * DAY_MS),
            ..Default::default()
        },
    );
    let mut idle_keys: Vec<Key32> = idle30.iter().map(|r| r.enrolment.host_pubkey).collect();
    idle_keys.sort();
    assert_eq!(idle_keys, vec![a, b, c], "d was seen today");
}

/// The rule itself (which keys go, what goes with them, the log) is the conformance suite's
/// `keys::idle_expiry_takes_only_live_idle_keys_with_empty_queues`; this checks the keyspace's
/// own index: the expired key's sender-index rows leave, another key's list naming it stays.
#[test]
fn idle_expiry_leaves_no_sender_index_row_of_the_expired_key() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(dir.path(), clock.clone());
    let (idle, friend) = (key(1), key(6));
    enrol(&store, idle, "idle");
    enrol(&store, friend, "friend");
    store
        .put_sender_list(list(idle, vec![friend]))
        .wait()
        .unwrap();
    store
        .put_sender_list(list(friend, vec![idle]))
        .wait()
        .unwrap();
    assert_eq!(rows_of(&store, "sender_index").len(), 2);
    clock.advance(IDLE_90D + DAY_MS);
    let now = clock.now_ms();
    store
        .record_seen(vec![(friend, utc_day(now))])
        .wait()
        .unwrap();
    assert_eq!(expire_idle_all(&store, now, IDLE_90D, 1).0, 1);
    let index: Vec<_> = rows_of(&store, "sender_index");
    assert_eq!(
        index.len(),
        1,
        "only friend's list (naming idle, kept) is indexed: {index:?}"
    );
    assert_eq!(
        store.sender_list(&friend).unwrap().unwrap().senders,
        vec![idle]
    );
    check_invariants(&store);
}

#[test]
fn backups_carry_last_seen() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let store = open_with(&dir.path().join("s"), clock.clone());
    let a = key(1);
    enrol(&store, a, "alpha");
    store
        .record_seen(vec![(a, utc_day(T0) + 3)])
        .wait()
        .unwrap();
    let file = dir.path().join("b.bak");
    let mut f = std::fs::File::create(&file).unwrap();
    store.backup_to(&mut f, &mut |_| {}).unwrap();
    drop(f);
    verify_backup(&file).unwrap();
    store.close().unwrap();
    let restored = dir.path().join("r");
    restore_backup(&file, &restored).unwrap();
    let store = open_with(&restored, clock);
    assert_eq!(
        row(&store, &a).unwrap().last_seen_day,
        Some(utc_day(T0) + 3)
    );
}
