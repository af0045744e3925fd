//! Insert, pull, ack, cursor, dedup, enrolment and meta basics.

mod common;

use common::*;
use relay_keyspace::*;

#[test]
fn insert_pull_ack_roundtrip() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(1_000);
    let store = open_with(dir.path(), clock.clone());
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "target");
    let a = stored_seqs(&insert(&store, s, "A", &[(t, b"one")]));
    let b = stored_seqs(&insert(&store, s, "B", &[(t, b"two")]));
    assert_eq!(a[0].seq, 1_000);
    assert_eq!(b[0].seq, 1_001);
    let page = store.pull(&t, 0, 10, 1 << 20).unwrap();
    assert_eq!(page.items.len(), 2);
    assert_eq!(page.items[0].wire, b"one");
    assert_eq!(page.items[1].item_id, "B");
    assert_eq!(page.head_seq, 1_001);
    assert!(!page.more);
    let page = store.pull(&t, 0, 1, 1 << 20).unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(page.more);
    assert_eq!(
        store.ack(&t, 1_002).wait().unwrap(),
        AckOutcome::BeyondHead { head_seq: 1_001 }
    );
    assert_eq!(
        store.ack(&t, 1_000).wait().unwrap(),
        AckOutcome::Acked {
            acked_through: 1_000,
            deleted: 1,
            head_seq: 1_001
        }
    );
    assert_eq!(
        store.cursor(&t).unwrap(),
        Cursor {
            head_seq: 1_001,
            acked_through: 1_000
        }
    );
    let page = store.pull(&t, 0, 10, 1 << 20).unwrap();
    assert_eq!(
        page.items.iter().map(|i| i.seq).collect::<Vec<_>>(),
        vec![1_001]
    );
    assert_eq!(
        store.usage_target(&t).unwrap(),
        Usage { items: 1, bytes: 3 }
    );
    check_invariants(&store);
    store.close().unwrap();
}

#[test]
fn byte_budget_always_returns_one_item() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(5));
    let (s, t) = (key(1), key(2));
    enrol(&store, t, "t");
    insert(&store, s, "A", &[(t, &[7u8; 100])]);
    insert(&store, s, "B", &[(t, &[7u8; 100])]);
    let page = store.pull(&t, 0, 10, 10).unwrap();
    assert_eq!(page.items.len(), 1);
    assert!(page.more);
    let page = store.pull(&t, 0, 10, 200).unwrap();
    assert_eq!(page.items.len(), 2);
}

#[test]
fn meta_epoch_heartbeat_and_pin() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(77));
    let m = store.meta().unwrap();
    assert_eq!(m.schema_version, SCHEMA_VERSION);
    assert_eq!(m.created_ms, 77);
    assert_eq!(m.epoch.len(), 36);
    store.heartbeat(123).wait().unwrap();
    assert_eq!(store.meta().unwrap().heartbeat_ms, Some(123));
    let e2 = store.rotate_epoch("test").wait().unwrap();
    assert_ne!(e2, m.epoch);
    assert_eq!(store.meta().unwrap().epoch, e2);
    assert_eq!(store.ops(10).unwrap()[0].kind, "epoch-rotate");
    store.pin_relay_pubkey(key(9)).wait().unwrap();
    store.pin_relay_pubkey(key(9)).wait().unwrap();
    match store.pin_relay_pubkey(key(8)).wait() {
        Err(StoreError::RelayKeyMismatch {
            stored_fp,
            given_fp,
        }) => {
            assert_eq!(stored_fp, fingerprint(&key(9)));
            assert_eq!(given_fp.len(), 19);
            assert_ne!(stored_fp, given_fp);
        }
        other => panic!("expected a key mismatch, got {other:?}"),
    }
    assert_eq!(store.meta().unwrap().relay_pubkey, Some(key(9)));
    store.close().unwrap();
    // Epoch survives a reopen.
    let store = open_with(dir.path(), TestClock::new(78));
    assert_eq!(store.meta().unwrap().epoch, e2);
}

#[test]
fn enc_ads_and_sender_lists() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    let ad = EncAd {
        host_pubkey: key(1),
        enc_pub: "E1".into(),
        sig: "S".into(),
        at_ms: 1,
    };
    store.put_enc_ad(ad.clone()).wait().unwrap();
    assert_eq!(store.enc_ad(&key(1)).unwrap(), Some(ad));
    assert_eq!(store.enc_ad(&key(2)).unwrap(), None);
    let list = |iat| SenderList {
        target: key(1),
        senders: vec![key(3)],
        iat_ms: iat,
        record: b"{}".to_vec(),
        sig: "s".into(),
    };
    assert_eq!(
        store.put_sender_list(list(10)).wait().unwrap(),
        SenderListOutcome::Stored
    );
    assert_eq!(
        store.put_sender_list(list(10)).wait().unwrap(),
        SenderListOutcome::NotNewer
    );
    assert_eq!(
        store.put_sender_list(list(9)).wait().unwrap(),
        SenderListOutcome::NotNewer
    );
    assert_eq!(
        store.put_sender_list(list(11)).wait().unwrap(),
        SenderListOutcome::Stored
    );
    assert_eq!(store.sender_list(&key(1)).unwrap().unwrap().iat_ms, 11);
}
