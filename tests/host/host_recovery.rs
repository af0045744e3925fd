//! Recovery across relay epochs (spec §5): a restore drill (backup, more mail, restore with a new
//! epoch) after which senders re-push what has no delivery receipt and receivers re-pull from 0,
//! leaving every message in the inbox exactly once; and the relay's expiry notice.

use crate::host_util;
use relay_keyspace::RelayStore;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use host_util::{pair, relay_tool, HostCli, RelayProc};
use serde_json::Value;

/// Back the relay store up to `file`: with `relay-tool backup` while the relay runs, or (when
/// relay-tool was not built) with the keyspace library while it is briefly stopped.
fn backup(relay: &mut RelayProc, file: &Path) {
    if let Some(tool) = relay_tool() {
        let out = Command::new(tool)
            .arg("backup")
            .arg("--store-dir")
            .arg(&relay.store)
            .arg(file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "backup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return;
    }
    relay.kill9();
    let opts = relay_keyspace::OpenOptions {
        create: false,
        ..Default::default()
    };
    let store = relay_keyspace::Store::open(&relay.store, opts).expect("open relay store");
    let mut f = std::fs::File::create(file).unwrap();
    store.backup_to(&mut f, &mut |_| {}).expect("backup");
    f.sync_all().unwrap();
    store.close().unwrap();
    relay.spawn(None);
}

/// Stop the relay and restore `file` into its store (new epoch), then start it again.
fn restore(relay: &mut RelayProc, file: &Path) {
    relay.kill9();
    if let Some(tool) = relay_tool() {
        let out = Command::new(tool)
            .arg("restore")
            .arg("--store-dir")
            .arg(&relay.store)
            .arg(file)
            .arg("--discard-old")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "restore: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        let fresh = relay.store.with_extension("restored");
        relay_keyspace::restore_backup(file, &fresh).expect("restore");
        std::fs::copy(relay.store.join("relay.key"), fresh.join("relay.key")).unwrap();
        std::fs::rename(&relay.store, relay.store.with_extension("old")).unwrap();
        std::fs::rename(&fresh, &relay.store).unwrap();
    }
    relay.spawn(None);
}

/// Sync one host, adding its report into `totals` (a failed pass adds nothing).
fn sync_into(h: &HostCli, totals: &mut Value) {
    if let Ok(r) = h.run(&["sync"]) {
        for k in ["received", "duplicates", "epoch_changes", "quarantined"] {
            totals[k] = (totals[k].as_u64().unwrap_or(0) + r[k].as_u64().unwrap_or(0)).into();
        }
    }
}

#[test]
fn restore_drill_repushes_and_repulls_every_message_exactly_once() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    let mut tb = serde_json::json!({});
    let mut ta = serde_json::json!({});
    sync_into(&b, &mut tb);
    let mut ids = vec![
        a.send("beta", "before 1", "b1"),
        a.send("beta", "before 2", "b2"),
    ];
    for _ in 0..3 {
        sync_into(&a, &mut ta);
        sync_into(&b, &mut tb);
    }
    assert_eq!(a.count("envelope_done"), 2);

    let file = tmp.path().join("relay.backup");
    backup(&mut relay, &file);

    // After the backup: m3..m5 are relay-accepted and reach beta, whose delivery receipts are
    // accepted by the relay but not pulled by alpha before the restore loses them.
    ids.push(a.send("beta", "after 1", "a1"));
    ids.push(a.send("beta", "after 2", "a2"));
    ids.push(a.send("beta", "after 3", "a3"));
    sync_into(&a, &mut ta);
    sync_into(&b, &mut tb);
    assert_eq!(a.count("envelope_relay-accepted"), 3);
    assert_eq!(
        b.count("receipt_done"),
        5,
        "beta's receipts were relay-accepted"
    );
    assert_eq!(tb["received"], 5);

    restore(&mut relay, &file);
    let settled = (0..10).any(|_| {
        sync_into(&a, &mut ta);
        sync_into(&b, &mut tb);
        a.count("envelope_done") == 5 && b.count("receipt_pending") == 0
    });
    assert!(settled, "alpha: {}\nbeta: {}", a.status(), b.status());

    let mut got = b.inbox_ids();
    got.sort();
    ids.sort();
    assert_eq!(got, ids, "every message in beta's inbox exactly once");
    assert_eq!(b.status()["quarantine"], 0);
    let st = a.status();
    assert_eq!(st["relay"]["epoch"], b.status()["relay"]["epoch"]);
    assert!(a.status()["alerts"].as_array().unwrap().is_empty());
    assert!(
        ta["epoch_changes"].as_u64().unwrap() >= 1 && tb["epoch_changes"].as_u64().unwrap() >= 1
    );
    assert_eq!(tb["received"], 5, "nothing was received twice as new");
}

#[test]
fn an_expiry_notice_ends_the_row_with_an_alert() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &["--retention", "1s", "--sweep-interval", "1s"]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    let id = a.send("beta", "never read", "x");
    assert_eq!(a.sync()["relay_accepted"], 1);
    let expired = (0..40).any(|_| {
        std::thread::sleep(Duration::from_millis(250));
        a.sync()["expired"].as_u64() == Some(1)
    });
    assert!(
        expired,
        "the relay's expiry notice arrives: {}",
        relay.log_text()
    );
    let st = a.status();
    assert_eq!(st["outbox"]["envelope_expired"], 1);
    let alerts = st["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 1);
    let text = alerts[0]["text"].as_str().unwrap();
    assert!(
        text.contains("Undelivered to beta") && text.contains(&id),
        "{text}"
    );
    assert!(b.inbox_ids().is_empty());
}

/// Copy a directory tree (the relay is stopped), as a volume snapshot would.
fn copy_tree(from: &Path, to: &Path) {
    let out = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cp: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A file-copy restore that keeps the epoch (no rotate-epoch): the hosts see the relay's head
/// below their checkpoints, reset to 0 and re-pull, and the sender re-pushes what the copy lost.
#[test]
fn a_restore_that_kept_its_epoch_is_detected_by_the_head() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    let (mut ta, mut tb) = (serde_json::json!({}), serde_json::json!({}));
    sync_into(&b, &mut tb);
    let mut ids = vec![a.send("beta", "before", "b1")];
    for _ in 0..3 {
        sync_into(&a, &mut ta);
        sync_into(&b, &mut tb);
    }
    assert_eq!(a.count("envelope_done"), 1);
    let epoch = a.status()["relay"]["epoch"].clone();

    relay.kill9();
    let snapshot = tmp.path().join("snapshot");
    copy_tree(&relay.store, &snapshot);
    relay.spawn(None);

    // After the copy: m2 is delivered and confirmed, m3 is only relay-accepted.
    ids.push(a.send("beta", "after 1", "a1"));
    for _ in 0..3 {
        sync_into(&a, &mut ta);
        sync_into(&b, &mut tb);
    }
    assert_eq!(a.count("envelope_done"), 2);
    ids.push(a.send("beta", "after 2", "a2"));
    sync_into(&a, &mut ta);
    assert_eq!(a.count("envelope_relay-accepted"), 1);

    relay.kill9();
    std::fs::rename(&relay.store, tmp.path().join("lost")).unwrap();
    std::fs::rename(&snapshot, &relay.store).unwrap();
    relay.spawn(None);

    let mut rewinds = 0;
    let settled = (0..10).any(|_| {
        for h in [&b, &a] {
            if let Ok(r) = h.run(&["sync"]) {
                rewinds += r["rewinds"].as_u64().unwrap();
            }
        }
        a.count("envelope_done") == 3 && b.count("receipt_pending") == 0
    });
    assert!(settled, "alpha: {}\nbeta: {}", a.status(), b.status());
    assert!(
        rewinds >= 2,
        "both hosts saw the head below their checkpoint ({rewinds})"
    );
    assert_eq!(a.status()["relay"]["epoch"], epoch, "the epoch was kept");
    let mut got = b.inbox_ids();
    got.sort();
    ids.sort();
    assert_eq!(got, ids);
}

/// The relay forgot the hosts' enrolments but kept its epoch (a copy made before they enrolled):
/// the cached enrolled flag is wrong, the relay answers 401, and the hosts enrol again.
#[test]
fn a_401_makes_the_host_enrol_again() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    relay.kill9();
    let snapshot = tmp.path().join("snapshot");
    copy_tree(&relay.store, &snapshot);
    relay.spawn(None);
    let (a, b) = pair(tmp.path(), &relay);
    assert!(b.sync()["enrolled"].as_bool().unwrap());
    assert!(a.sync()["enrolled"].as_bool().unwrap());
    assert!(
        !a.sync()["enrolled"].as_bool().unwrap(),
        "cached while nothing changed"
    );

    relay.kill9();
    std::fs::rename(&relay.store, tmp.path().join("lost")).unwrap();
    std::fs::rename(&snapshot, &relay.store).unwrap();
    relay.spawn(None);

    let id = a.send("beta", "after amnesia", "x");
    let r = b.sync();
    assert!(r["enrolled"].as_bool().unwrap(), "beta enrolled again: {r}");
    assert_eq!(r["epoch_changes"], 0);
    let r = a.sync();
    assert!(
        r["enrolled"].as_bool().unwrap(),
        "alpha enrolled again: {r}"
    );
    assert_eq!(r["relay_accepted"], 1);
    let r = b.sync();
    assert_eq!(r["received"], 1, "{r}\n{}", b.status());
    assert_eq!(b.inbox_ids(), vec![id]);
}
