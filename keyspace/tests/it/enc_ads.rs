//! Encryption-key ads in the store: the v2 ad lives beside the v1 pair of the same key (its own
//! row in `enc_ads`), each write leaves the other alone, the last write wins, a rotation deletes
//! both, a reopen and a backup/restore keep both, and dump and stats show them.

use crate::common;

use common::*;
use relay_keyspace::*;

fn v1(pk: Key32, enc: &str) -> EncAd {
    EncAd {
        host_pubkey: pk,
        enc_pub: enc.into(),
        sig: format!("sig-{enc}"),
        at_ms: 5,
    }
}

fn v2(pk: Key32, record: &str, at_ms: u64) -> EncAdV2 {
    EncAdV2 {
        host_pubkey: pk,
        record: record.as_bytes().to_vec(),
        sig: format!("sig-{record}"),
        at_ms,
    }
}

/// Stores a v2 ad of a live key (asserts it was stored).
fn put_v2(store: &Store, ad: EncAdV2) {
    assert!(store.put_enc_ad_v2(ad).wait().unwrap(), "stored");
}

#[test]
fn dump_and_stats_show_each_kind_and_a_reopen_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(dir.path(), TestClock::new(1));
    enrol(&store, key(1), "a");
    enrol(&store, key(2), "b");
    store.put_enc_ad(v1(key(1), "E1")).wait().unwrap();
    put_v2(&store, v2(key(1), "{\"x\":\"é\"}", 3));
    put_v2(&store, v2(key(2), "{}", 4));
    let s = store.stats().unwrap();
    assert_eq!((s.enc_ads_v1, s.enc_ads_v2), (1, 2));
    let rows = rows_of(&store, "enc_ads");
    assert_eq!(rows.len(), 3);
    let hex1: String = key(1).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        rows[0].0,
        serde_json::json!({"host_pubkey": hex1, "kind": "v1"})
    );
    assert_eq!(rows[0].1["enc_pub"], "E1");
    assert_eq!(
        rows[1].0,
        serde_json::json!({"host_pubkey": hex1, "kind": "v2"})
    );
    assert_eq!(rows[1].1["record"], "{\"x\":\"é\"}");
    assert_eq!(rows[1].1["sig"], "sig-{\"x\":\"é\"}");
    assert_eq!(rows[1].1["at_ms"], 3);
    assert_eq!(rows[2].0["kind"], "v2");
    store.close().unwrap();
    let store = open_with(dir.path(), TestClock::new(2));
    let ads = store.enc_ads(&key(1)).unwrap();
    assert_eq!(ads.v1, Some(v1(key(1), "E1")));
    assert_eq!(ads.v2, Some(v2(key(1), "{\"x\":\"é\"}", 3)));
}

#[test]
fn backup_and_restore_carry_both_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_with(&dir.path().join("live"), TestClock::new(1));
    enrol(&store, key(1), "h");
    store.put_enc_ad(v1(key(1), "E1")).wait().unwrap();
    put_v2(&store, v2(key(1), "{\"v\":2}", 3));
    let file = dir.path().join("b.mbxb");
    let mut f = std::fs::File::create(&file).unwrap();
    let summary = store.backup_to(&mut f, &mut |_| {}).unwrap();
    drop(f);
    let counts: std::collections::BTreeMap<_, _> = summary.counts.iter().cloned().collect();
    assert_eq!((counts["enc_ads_v1"], counts["enc_ads_v2"]), (1, 1));
    assert_eq!(verify_backup(&file).unwrap(), summary);
    let restored = dir.path().join("restored");
    restore_backup(&file, &restored).unwrap();
    store.close().unwrap();
    let r = open_with(&restored, TestClock::new(2));
    let ads = r.enc_ads(&key(1)).unwrap();
    assert_eq!(ads.v1, Some(v1(key(1), "E1")));
    assert_eq!(ads.v2, Some(v2(key(1), "{\"v\":2}", 3)));
}
