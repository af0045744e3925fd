//! Host key rotation (spec §2 "Rotation" T030, §4 retired keys, §8 republish after rotation)
//! through the real commands and a real relay: `host rotate` moves the queue, resets the receive
//! position, republishes the enc ad under the new key and keeps the old key as retired; a crash
//! between any two steps is finished by the next `host rotate` or `host sync`; a peer's
//! `host peer rotate` retires the old key, which still verifies receipts, and swaps the key in the
//! allowlist it publishes.

use crate::host_util;

use std::path::Path;

use host_util::{host_key, paired, relay_client, HostCli, RelayProc};
#[cfg(feature = "failpoints")]
use relay_testkit::powercut::Powercut;
use relay_wire::keys::SigningKey;
use serde_json::Value;

/// The relay's signed info as `key` sees it (`you` only while that key is enrolled and live).
fn info_as(relay: &RelayProc, name: &str, key: &SigningKey) -> Value {
    let c = relay_client(relay, name, key);
    c.get("/v2/relay/info", None, true).unwrap().body
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The retired key file `rotate` reported, checked private and holding the old key.
fn assert_retired_file(h: &HostCli, out: &Value, old: &SigningKey) {
    let file = h.dir.join(out["retired_file"].as_str().unwrap());
    assert_eq!(mode(&file), 0o600, "retired key file is private");
    let kept = SigningKey::from_key_file(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(
        kept.public(),
        old.public(),
        "the old key is kept, not forgotten"
    );
    assert_eq!(mode(&h.dir.join("host.key")), 0o600);
    assert!(
        !h.dir.join("host.key.new").exists(),
        "no half-installed key"
    );
}

/// After a completed rotation: the relay knows only the new key, with our enc ad republished.
fn assert_rotated_on_relay(relay: &RelayProc, h: &HostCli, old: &SigningKey, new_pub: &str) {
    let new = host_key(h);
    assert_eq!(new.public_b64(), new_pub, "host.key holds the new key");
    let you = &info_as(relay, &h.name, &new)["you"];
    assert_eq!(you["pubkey"], new_pub, "the new key is enrolled: {you}");
    let st = h.status();
    let enc_pub = st["enc_ad"]["enc_pub"].as_str().unwrap().to_string();
    assert_eq!(
        you["enc_ad"]["enc_pub"],
        enc_pub.as_str(),
        "v2 ad republished"
    );
    assert_eq!(you["enc_ad"]["v1"], enc_pub.as_str(), "v1 pair republished");
    assert!(
        info_as(relay, &h.name, old).get("you").is_none(),
        "the old key is revoked on the relay"
    );
}

#[test]
fn a_rotated_host_gets_its_queue_back_republishes_its_enc_ad_and_keeps_the_old_key_retired() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    b.send("alpha", "before", "read before the rotation");
    b.sync();
    assert_eq!(a.sync()["received"], 1);
    assert!(a.status()["received_through"].as_u64().unwrap() > 0);
    let queued = b.send("alpha", "queued", "waits on the relay across the rotation");
    b.sync();
    let old = host_key(&a);

    let out = a.ok(&["rotate"]);
    let new_pub = out["new_pubkey"].as_str().unwrap().to_string();
    assert_ne!(new_pub, old.public_b64());
    assert_eq!(out["moved"], 1, "the relay moved the queued item: {out}");
    assert_eq!(
        a.status()["received_through"],
        0,
        "the receive position restarts: the relay re-sequenced the queue"
    );
    assert_retired_file(&a, &out, &old);
    assert_rotated_on_relay(&relay, &a, &old, &new_pub);
    let keys = &a.status()["keys"];
    assert_eq!(
        keys["retired"][0]["pubkey"],
        old.public_b64().as_str(),
        "{keys}"
    );
    assert_eq!(keys["rotation_pending"], Value::Null);

    // The peer takes the rotation record (both keys signed it; `rotate` wrote it owner-only into
    // the host directory) and retires the old key.
    let record = std::path::PathBuf::from(out["record_file"].as_str().unwrap());
    assert_eq!(record.parent(), Some(a.dir.as_path()), "{out}");
    assert_eq!(mode(&record), 0o600);
    let pr = b.ok(&[
        "peer",
        "rotate",
        "alpha",
        "--record",
        record.to_str().unwrap(),
    ]);
    assert_eq!(pr["pubkey"], new_pub.as_str());
    assert_eq!(pr["retired"][0], old.public_b64().as_str());
    b.sync();

    let r = a.sync();
    assert_eq!(r["received"], 1, "the re-sequenced item arrives: {r}");
    assert!(a.inbox_ids().contains(&queued));
    b.sync();
    assert_eq!(b.count("envelope_done"), 2, "both delivery receipts settle");

    // Mail from the rotated host reaches the peer (its allowlist names the new key).
    let back = a.send("beta", "after", "from the new key");
    a.sync();
    b.sync();
    assert!(b.inbox_ids().contains(&back));
}

/// Every crash window of `host rotate`, with a real child-process abort between steps; the next
/// `host rotate` or `host sync` (alternately) completes the rotation, the queued message arrives.
#[cfg(feature = "failpoints")]
#[test]
fn a_crash_between_any_two_rotation_steps_is_finished_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    rotation_windows(tmp.path(), None);
}

/// The rotation's crash windows with the host directories on `powercut` and a power cut after
/// each crash (issue 26): the staged key, the intent and the swap survive what was fsync'd.
#[cfg(feature = "failpoints")]
#[test]
fn a_rotation_crashed_and_power_cut_between_any_two_steps_is_finished_by_the_next_run() {
    let tmp = tempfile::tempdir().unwrap();
    let mut pc = Powercut::mount(&relay_testkit::bins::path("powercut"), &[]);
    rotation_windows(tmp.path(), Some(&mut pc));
}

/// Each window in its own pair of hosts under `tmp`, or on the mount `pc` with a cut after
/// each crash; the relay's store stays under `tmp`.
#[cfg(feature = "failpoints")]
fn rotation_windows(tmp: &Path, mut pc: Option<&mut Powercut>) {
    let relay = RelayProc::start(tmp, &[]);
    let windows = [
        ("host-rotate-after-new-key", "rotate"),
        ("host-rotate-after-intent", "sync"),
        ("host-rotate-after-post", "rotate"),
        ("host-rotate-after-record", "sync"),
        ("host-rotate-after-swap", "rotate"),
        ("host-rotate-after-publish", "sync"),
    ];
    for (i, (failpoint, resume)) in windows.iter().enumerate() {
        let base = pc.as_ref().map_or(tmp, |pc| pc.path());
        let root = base.join(format!("w{i}"));
        std::fs::create_dir_all(&root).unwrap();
        // The test's own directory is made durable by the test (init's are the host's).
        relay_os::durable_dir::sync_dir(base).unwrap();
        let (a, b) = paired(&root, &relay);
        let id = b.send("alpha", "queued", "crosses the rotation");
        b.sync();
        let old = host_key(&a);
        a.crash_at(&["rotate"], failpoint);
        if let Some(pc) = pc.as_mut() {
            pc.cut();
        }
        if *failpoint != "host-rotate-after-new-key" {
            assert!(
                a.status()["keys"]["rotation_pending"].is_string(),
                "{failpoint}: status shows the interrupted rotation"
            );
        }
        let staged = std::fs::read_to_string(a.dir.join("host.key.new"))
            .ok()
            .map(|t| SigningKey::from_key_file(&t).unwrap().public_b64());
        let out = a.ok(&[resume]);
        // `rotate` prints the rotation; `sync` prints it under `rotation_finished`.
        let done = out.get("rotation_finished").cloned().unwrap_or(out);
        let new_pub = done["new_pubkey"]
            .as_str()
            .unwrap_or_else(|| panic!("{failpoint}: {resume} finished no rotation: {done}"))
            .to_string();
        if let Some(staged) = staged {
            assert_eq!(
                staged, new_pub,
                "{failpoint}: the staged key is the one used"
            );
        }
        if *failpoint == "host-rotate-after-post" {
            assert!(
                done["relay"].as_str().unwrap().contains("taken it already"),
                "{failpoint}: the replay answered 404 is recognised as done: {done}"
            );
        }
        assert_retired_file(&a, &done, &old);
        assert_rotated_on_relay(&relay, &a, &old, &new_pub);
        b.ok(&["peer", "rotate", "alpha", &new_pub]);
        a.sync();
        assert!(
            a.inbox_ids().contains(&id),
            "{failpoint}: the queued message arrives after resuming with {resume}"
        );
        assert!(
            a.run(&["rotate"]).is_ok(),
            "{failpoint}: a later rotation starts cleanly"
        );
    }
}

/// Spec §4: a receipt is checked against the peer's pinned AND retired keys. Beta sent its
/// receipt (signed by its old key), then rotated; alpha, having retired that key, still settles.
#[test]
fn a_delivery_receipt_is_checked_against_the_peers_pinned_and_retired_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    a.send("beta", "hi", "body");
    a.sync();
    assert_eq!(
        b.sync()["received"],
        1,
        "beta pushes its receipt signed by its old key"
    );
    let out = b.ok(&["rotate"]);
    let new_pub = out["new_pubkey"].as_str().unwrap();
    let pr = a.ok(&["peer", "rotate", "beta", new_pub]);
    assert_eq!(
        pr["rows_moved"], 1,
        "the waiting row follows the new key: {pr}"
    );
    let r = a.sync();
    assert_eq!(r["receipts_settled"], 1, "{r}");
    assert_eq!(r["quarantined"], 0, "{r}");
    assert_eq!(a.count("envelope_done"), 1);
}

/// Spec §4, the same rule for mail: an envelope beta pushed with its old key before rotating
/// stays in alpha's queue under that key; alpha, having retired it, still receives the message.
#[test]
fn an_envelope_pushed_before_the_peer_rotated_is_received_under_the_retired_key() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    let id = b.send("alpha", "hi", "sent by the old key");
    assert_eq!(b.sync()["relay_accepted"], 1);
    // As text, `rotate` names the record file and the verified `peer rotate --record` first.
    let mut cmd = std::process::Command::new(host_util::BIN);
    cmd.arg("host").arg("--dir").arg(&b.dir).arg("rotate");
    b.prepare(&mut cmd);
    let rotated = cmd.output().unwrap();
    assert!(rotated.status.success(), "{rotated:?}");
    let text = String::from_utf8(rotated.stdout).unwrap();
    let record = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("mbx-relay host --dir PEER_DIR peer rotate beta --record ")
        })
        .unwrap_or_else(|| panic!("no --record command in:\n{text}"))
        .to_owned();
    assert!(
        text.contains(&format!("{}", b.dir.join(&record).display())),
        "{text}"
    );
    let pr = a.ok(&[
        "peer",
        "rotate",
        "beta",
        "--record",
        b.dir.join(&record).to_str().unwrap(),
    ]);
    let new_pub = pr["pubkey"].as_str().unwrap().to_owned();
    assert_eq!(new_pub, host_key(&b).public_b64());
    let r = a.sync();
    assert_eq!(
        (r["received"].as_u64(), r["quarantined"].as_u64()),
        (Some(1), Some(0)),
        "{r}"
    );
    assert!(a.inbox_ids().contains(&id));
    b.sync();
    assert_eq!(
        b.count("envelope_done"),
        1,
        "alpha's receipt reaches beta's new key"
    );
}

/// Spec §2: the allowlist this host publishes names the peer's new key once `peer rotate` ran,
/// so the rotated peer's pushes are accepted; the old key is not pinned any more.
#[test]
fn peer_rotate_swaps_the_key_in_the_allowlist_this_host_publishes() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    let old_b = b.pubkey();
    let new_b = b.ok(&["rotate"])["new_pubkey"]
        .as_str()
        .unwrap()
        .to_string();
    a.ok(&["peer", "rotate", "beta", &new_b]);
    let r = a.sync();
    assert!(r.get("waiting").is_some());
    let id = b.send("alpha", "after", "from beta's new key");
    let r = b.sync();
    assert_eq!(
        r["relay_accepted"], 1,
        "accepted under alpha's new list: {r}"
    );
    a.sync();
    assert!(a.inbox_ids().contains(&id));
    // The old key is retired, not pinned: it cannot be added back as another peer silently.
    let e = a.run(&["peer", "add", "beta", &old_b]).unwrap_err();
    assert!(e.contains("already pinned to another key"), "{e}");
    // A bad record changes nothing.
    let bad = tmp.path().join("bad.json");
    std::fs::write(&bad, "{\"rotation\":{}}").unwrap();
    let e = a
        .run(&["peer", "rotate", "beta", "--record", bad.to_str().unwrap()])
        .unwrap_err();
    assert!(e.contains("bad rotation record"), "{e}");
    assert_eq!(a.ok(&["status"])["name"], "alpha");
}

/// A rotation the relay refuses for good (409: the new key is revoked there) is abandoned: the
/// host keeps its key and goes on syncing, instead of retrying a refused record forever.
#[test]
fn a_rotation_the_relay_refuses_for_good_is_abandoned_and_the_host_keeps_its_key() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, _b) = paired(tmp.path(), &relay);
    let out = a.ok(&["rotate"]);
    let current = out["new_pubkey"].as_str().unwrap().to_string();
    // Stage the revoked old key as the next key (as a leftover file would be).
    let retired = a.dir.join(out["retired_file"].as_str().unwrap());
    std::fs::copy(&retired, a.dir.join("host.key.new")).unwrap();
    let e = a.run(&["rotate"]).unwrap_err();
    assert!(
        e.contains("the new key was revoked here") && e.contains("abandoned"),
        "{e}"
    );
    assert_eq!(a.pubkey(), current, "the host keeps its key");
    assert_eq!(a.status()["keys"]["rotation_pending"], Value::Null);
    assert!(!a.dir.join("host.key.new").exists());
    a.sync();
}

/// A delivery receipt built before the rotation but not pushed yet is signed again by the new
/// key (the relay takes receipts only signed by the pushing host), so it still settles the row.
#[cfg(feature = "failpoints")]
#[test]
fn a_receipt_not_yet_pushed_when_the_host_rotates_is_signed_again_by_the_new_key() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    a.send("beta", "hi", "body");
    a.sync();
    // Beta receives and checkpoints, and dies before acking and pushing its receipt.
    b.crash_at(&["sync"], "host-after-checkpoint-before-ack");
    assert_eq!(b.count("receipt_pending"), 1);
    let new_pub = b.ok(&["rotate"])["new_pubkey"]
        .as_str()
        .unwrap()
        .to_string();
    a.ok(&["peer", "rotate", "beta", &new_pub]);
    a.sync();
    let r = b.sync();
    assert_eq!(
        r["push_failures"], 0,
        "the relay takes the re-signed receipt: {r}"
    );
    assert_eq!(b.count("receipt_done"), 1);
    let r = a.sync();
    assert_eq!(r["receipts_settled"], 1, "{r}");
    assert_eq!(a.count("envelope_done"), 1);
}
