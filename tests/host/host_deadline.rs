//! The sender's deadline (spec §3): accepted_at + retention + grace, fixed at the FIRST valid
//! accept. A new epoch re-arms relay-accepted rows and they are pushed again (spec §5); the accept
//! of that re-push must not move the deadline out, or repeated epoch changes would postpone the
//! "undelivered/unconfirmed" alert for ever.

use crate::host_util;
use relay_keyspace::RelayStore;

use std::time::Duration;

use host_util::{pair, HostCli, RelayProc};
use serde_json::Value;

/// Stop the relay, give its store a new epoch (as `relay-tool rotate-epoch` does), start it again.
fn rotate_epoch(relay: &mut RelayProc) -> String {
    relay.kill9();
    let opts = relay_keyspace::OpenOptions {
        create: false,
        ..Default::default()
    };
    let store = relay_keyspace::Store::open(&relay.store, opts).expect("open relay store");
    let epoch = store.rotate_epoch("test").wait().expect("rotate epoch");
    store.close().unwrap();
    relay.spawn(None);
    epoch
}

/// The outbox row of message `id` from `status`.
fn row(h: &HostCli, id: &str) -> Value {
    let st = h.status();
    st["active"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["item_id"] == id)
        .unwrap_or_else(|| panic!("no active row {id}: {st}"))
        .clone()
}

#[test]
fn a_re_push_after_an_epoch_change_keeps_the_deadline_of_the_first_accept() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync(); // beta enrols and publishes its enc ad; it never syncs again (no receipt)
    let id = a.send("beta", "hello", "body");
    a.sync();
    let first = row(&a, &id);
    assert_eq!(first["state"], "relay-accepted", "{first}");
    let deadline = first["deadline"].as_str().unwrap().to_string();

    // Later (so a recomputed deadline would differ), the relay's epoch changes.
    std::thread::sleep(Duration::from_millis(1_100));
    let epoch = rotate_epoch(&mut relay);
    assert_ne!(first["epoch"], epoch.as_str());
    let mut changes = 0;
    let mut again = first.clone();
    for _ in 0..5 {
        changes += a.sync()["epoch_changes"].as_u64().unwrap_or(0);
        again = row(&a, &id);
        if again["epoch"] == epoch.as_str() && again["state"] == "relay-accepted" {
            break;
        }
    }
    assert_eq!(changes, 1, "alpha saw the new epoch once");
    assert_eq!(
        (again["epoch"].as_str(), again["state"].as_str()),
        (Some(epoch.as_str()), Some("relay-accepted")),
        "the row was pushed again and accepted in the new epoch: {again}"
    );
    assert_eq!(
        again["deadline"].as_str(),
        Some(deadline.as_str()),
        "the re-push moved the deadline"
    );

    // A second epoch change: still the first deadline.
    std::thread::sleep(Duration::from_millis(1_100));
    let epoch2 = rotate_epoch(&mut relay);
    for _ in 0..5 {
        a.sync();
        again = row(&a, &id);
        if again["epoch"] == epoch2.as_str() && again["state"] == "relay-accepted" {
            break;
        }
    }
    assert_eq!(again["epoch"].as_str(), Some(epoch2.as_str()), "{again}");
    assert_eq!(again["deadline"].as_str(), Some(deadline.as_str()));
}
