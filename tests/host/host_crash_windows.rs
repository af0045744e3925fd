//! Spec §5 crash windows with real processes: the relay and the host CLI run as children and stop
//! themselves at named failpoints (abort, as abrupt as `kill -9`). Needs `--features
//! mbx-relay/failpoints` (the README test command); without it these tests are not built.
#![cfg(feature = "failpoints")]

use crate::host_util;

use std::time::Duration;

use host_util::{pair, past_backoff, sync_until, RelayProc};

/// The relay commits the push and dies before answering: the sender's retry is a duplicate with
/// the same seq, the row settles, and the receiver gets the message once.
#[test]
fn relay_commits_but_the_response_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync(); // enrol, enc ad, allowlist
    let id = a.send("beta", "one", "first body");
    relay.kill9();
    relay.spawn(Some("relay-after-commit"));
    assert!(a.run(&["sync"]).is_err(), "the push answer is lost");
    assert!(
        relay.wait_exit(Duration::from_secs(10)),
        "relay stopped at its failpoint"
    );
    assert_eq!(
        a.count("envelope_pending"),
        1,
        "a lost response leaves the row pending"
    );

    relay.spawn(None);
    past_backoff();
    let r = a.sync();
    assert_eq!(r["relay_accepted"], 1);
    assert_eq!(
        r["relay_duplicates"], 1,
        "the retry is a duplicate of the committed push"
    );
    let row = &a.status()["active"][0];
    assert_eq!(row["state"], "relay-accepted");
    let seq = row["seq"].as_u64().unwrap();

    let r = b.sync();
    assert_eq!(r["received"], 1);
    let inbox = b.ok(&["inbox"]);
    assert_eq!(inbox["messages"].as_array().unwrap().len(), 1);
    assert_eq!(inbox["messages"][0]["id"], id.as_str());
    assert_eq!(inbox["messages"][0]["body"], "first body");
    assert_eq!(
        inbox["messages"][0]["relay_seq"].as_u64(),
        Some(seq),
        "same seq as the first commit"
    );
    a.sync();
    assert_eq!(
        a.count("envelope_done"),
        1,
        "the delivery receipt settles the row"
    );
}

/// The host receives the accept and dies before recording it: the next push is a duplicate with
/// the same seq (the stored wire bytes are reused, so it is never a conflict).
#[test]
fn sender_dies_after_push_before_recording() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    a.send("beta", "one", "body");
    a.crash_at(&["sync"], "host-after-push-before-record");
    assert_eq!(a.count("envelope_pending"), 1);
    let r = a.sync();
    assert_eq!(
        (r["relay_accepted"].as_u64(), r["relay_duplicates"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(b.sync()["received"], 1);
    a.sync();
    assert_eq!(a.count("envelope_done"), 1);
    assert_eq!(b.inbox_ids().len(), 1);
}

/// The relay dies before committing: the retry is accepted (not a duplicate), exactly once.
#[test]
fn relay_dies_before_commit() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    a.send("beta", "one", "body");
    relay.kill9();
    relay.spawn(Some("relay-before-commit"));
    assert!(a.run(&["sync"]).is_err());
    assert!(relay.wait_exit(Duration::from_secs(10)));
    assert_eq!(a.count("envelope_pending"), 1);
    relay.spawn(None);
    past_backoff();
    let r = a.sync();
    assert_eq!(
        (r["relay_accepted"].as_u64(), r["relay_duplicates"].as_u64()),
        (Some(1), Some(0))
    );
    assert_eq!(b.sync()["received"], 1);
    assert_eq!(b.sync()["received"], 0);
    assert_eq!(b.inbox_ids().len(), 1);
}

/// The receiver commits an item and dies before the checkpoint: it pulls again, the item is a
/// duplicate at receive, and the checkpoint advances.
#[test]
fn receiver_dies_after_receive_before_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    let ids = [a.send("beta", "one", "1"), a.send("beta", "two", "2")];
    assert_eq!(a.sync()["relay_accepted"], 2);
    b.crash_at(&["sync"], "host-after-receive-before-checkpoint");
    let st = b.status();
    assert_eq!(st["inbox"], 1, "the first item was committed");
    assert_eq!(st["received_through"], 0, "but not checkpointed");
    let r = b.sync();
    assert_eq!(
        (r["duplicates"].as_u64(), r["received"].as_u64()),
        (Some(1), Some(1))
    );
    assert!(r["received_through"].as_u64().unwrap() > 0);
    assert_eq!(r["received_through"], r["acked_through"]);
    let mut got = b.inbox_ids();
    got.sort();
    assert_eq!(got, ids.to_vec());
    assert!(sync_until(&[&a, &b], 5, || a.count("envelope_done") == 2));
}

/// The receiver checkpoints and dies before acking: the next pass acks through the checkpoint
/// without receiving anything again.
#[test]
fn receiver_checkpoints_but_the_ack_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    a.send("beta", "one", "1");
    a.sync();
    b.crash_at(&["sync"], "host-after-checkpoint-before-ack");
    let st = b.status();
    let through = st["received_through"].as_u64().unwrap();
    assert!(through > 0);
    assert_eq!(st["acked_through"], 0);
    let r = b.sync();
    assert_eq!(
        (r["received"].as_u64(), r["duplicates"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(
        r["acked_through"].as_u64(),
        Some(through),
        "the next ack covers it"
    );
    assert_eq!(b.inbox_ids().len(), 1);
}
