//! Spec §5 crash windows with real processes: the relay and the host CLI run as children and stop
//! themselves at named failpoints (abort, as abrupt as `kill -9`). Needs `--features
//! mbx-relay/failpoints` (the README test command); without it these tests are not built.
//! Each window also runs with the host directories on `powercut` and a power cut after every
//! crash (issue 26): what the host had committed must survive, not only what the page cache held.
#![cfg(feature = "failpoints")]

use crate::host_util;

use std::path::Path;
use std::time::Duration;

use host_util::{pair, past_backoff, sync_until, RelayProc};
use relay_testkit::powercut::Powercut;

/// After a crash: a power cut too, when the hosts are on a powercut mount.
fn cut(pc: &mut Option<&mut Powercut>) {
    if let Some(pc) = pc {
        pc.cut();
    }
}

/// A window: hosts under `root`, the relay, the mount the hosts are on (if any).
type Window = fn(&Path, &mut RelayProc, Option<&mut Powercut>);

/// Every window, for the power-cut run.
const WINDOWS: [(&str, Window); 5] = [
    (
        "relay commits, answer lost",
        relay_commits_but_the_response_is_lost_in,
    ),
    (
        "sender dies before recording",
        sender_dies_after_push_before_recording_in,
    ),
    ("relay dies before commit", relay_dies_before_commit_in),
    (
        "receiver dies before checkpoint",
        receiver_dies_after_receive_before_checkpoint_in,
    ),
    (
        "receiver checkpoints, ack lost",
        receiver_checkpoints_but_the_ack_is_lost_in,
    ),
];

/// Runs one window the kill -9 way: hosts and relay in a fresh temp dir, no power cut.
fn killed(w: Window) {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    w(tmp.path(), &mut relay, None);
}

/// Every window with the hosts on one powercut mount (each in its own directory) and a power
/// cut after each crash; the relay's store stays on ordinary disk (its own power-cut tests are
/// in the relay's test binary).
#[test]
fn the_crash_windows_with_a_power_cut_after_each_crash() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let mut pc = Powercut::mount(&relay_testkit::bins::path("powercut"), &[]);
    for (i, (what, w)) in WINDOWS.iter().enumerate() {
        let root = pc.path().join(format!("w{i}"));
        // The test's own directory is made durable by the test; what `init` creates in it is
        // the host's to make durable.
        std::fs::create_dir(&root).unwrap();
        relay_os::durable_dir::sync_dir(pc.path()).unwrap();
        eprintln!("window {what}");
        w(&root, &mut relay, Some(&mut pc));
    }
}

/// The relay commits the push and dies before answering: the sender's retry is a duplicate with
/// the same seq, the row settles, and the receiver gets the message once.
#[test]
fn relay_commits_but_the_response_is_lost() {
    killed(relay_commits_but_the_response_is_lost_in);
}

fn relay_commits_but_the_response_is_lost_in(
    root: &Path,
    relay: &mut RelayProc,
    mut pc: Option<&mut Powercut>,
) {
    let (a, b) = pair(root, relay);
    b.sync(); // enrol, enc ad, allowlist
    let id = a.send("beta", "one", "first body");
    relay.kill9();
    relay.spawn(Some("relay-after-commit"));
    assert!(a.run(&["sync"]).is_err(), "the push answer is lost");
    assert!(
        relay.wait_exit(Duration::from_secs(10)),
        "relay stopped at its failpoint"
    );
    cut(&mut pc);
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
    killed(sender_dies_after_push_before_recording_in);
}

fn sender_dies_after_push_before_recording_in(
    root: &Path,
    relay: &mut RelayProc,
    mut pc: Option<&mut Powercut>,
) {
    let (a, b) = pair(root, relay);
    b.sync();
    a.send("beta", "one", "body");
    a.crash_at(&["sync"], "host-after-push-before-record");
    cut(&mut pc);
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
    killed(relay_dies_before_commit_in);
}

fn relay_dies_before_commit_in(root: &Path, relay: &mut RelayProc, mut pc: Option<&mut Powercut>) {
    let (a, b) = pair(root, relay);
    b.sync();
    a.send("beta", "one", "body");
    relay.kill9();
    relay.spawn(Some("relay-before-commit"));
    assert!(a.run(&["sync"]).is_err());
    assert!(relay.wait_exit(Duration::from_secs(10)));
    cut(&mut pc);
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
    killed(receiver_dies_after_receive_before_checkpoint_in);
}

fn receiver_dies_after_receive_before_checkpoint_in(
    root: &Path,
    relay: &mut RelayProc,
    mut pc: Option<&mut Powercut>,
) {
    let (a, b) = pair(root, relay);
    b.sync();
    let ids = [a.send("beta", "one", "1"), a.send("beta", "two", "2")];
    assert_eq!(a.sync()["relay_accepted"], 2);
    b.crash_at(&["sync"], "host-after-receive-before-checkpoint");
    cut(&mut pc);
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
    killed(receiver_checkpoints_but_the_ack_is_lost_in);
}

fn receiver_checkpoints_but_the_ack_is_lost_in(
    root: &Path,
    relay: &mut RelayProc,
    mut pc: Option<&mut Powercut>,
) {
    let (a, b) = pair(root, relay);
    b.sync();
    a.send("beta", "one", "1");
    a.sync();
    b.crash_at(&["sync"], "host-after-checkpoint-before-ack");
    cut(&mut pc);
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
