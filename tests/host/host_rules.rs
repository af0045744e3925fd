//! Sender and receiver rules of spec §3/§4 through the real commands: a rejected result leaves the
//! row pending until a later accept; a changed relay key stops relay use until confirmed with
//! `--key`; refused items are quarantined with their reason, never dropped; the sender's own
//! deadline raises "undelivered/unconfirmed" with no word from the relay; the host store is
//! owner-only whatever the umask, and a loose one is refused naming the `chmod` (issue 24 item 9).

use crate::host_util;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::Duration;

use host_util::{host_key, pair, relay_client, sync_until, HostCli, RelayProc};
use mbx_host::message::{draft_envelope, receipt_wire, ulid};
use relay_wire::canonical::canonical_bytes;
use relay_wire::keys::{b64, SigningKey};
use relay_wire::seal::{seal_envelope, EncSecret};
use serde_json::{json, Value};

#[test]
fn a_rejected_result_leaves_the_row_pending_until_accepted() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &["--max-queue-items", "1"]);
    let (mut a, b) = pair(tmp.path(), &relay);
    // A fixed 1.5 s backoff, long enough to see that `next_at` is respected.
    a.env.push(("MBX_HOST_BACKOFF_MS".into(), "1500".into()));
    a.env
        .push(("MBX_HOST_BACKOFF_CAP_MS".into(), "1500".into()));
    b.sync();
    a.send("beta", "one", "1");
    let file = tmp.path().join("body.txt");
    std::fs::write(&file, "two, from a file").unwrap();
    a.ok(&[
        "send",
        "--to",
        "beta",
        "--subject",
        "two",
        "--file",
        file.to_str().unwrap(),
    ]);
    let r = a.sync();
    assert_eq!(
        r["pushed"], 2,
        "the rejected row is not retried in the same pass: {r}"
    );
    assert_eq!(
        (r["relay_accepted"].as_u64(), r["push_failures"].as_u64()),
        (Some(1), Some(1))
    );
    let st = a.status();
    assert_eq!(st["outbox"]["envelope_pending"], 1, "{st}");
    let pending = st["active"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["state"] == "pending")
        .unwrap()
        .clone();
    assert!(
        pending["last_error"].as_str().unwrap().contains("quota"),
        "{pending}"
    );
    assert!(
        pending["seq"].is_null(),
        "no accept recorded for a rejected result"
    );
    // beta drains its queue; alpha's row is not due yet, so nothing is pushed.
    assert_eq!(b.sync()["received"], 1);
    assert_eq!(a.sync()["pushed"], 0, "next_at is respected");
    std::thread::sleep(Duration::from_millis(1_600));
    let r = a.sync();
    assert_eq!(
        (r["pushed"].as_u64(), r["relay_accepted"].as_u64()),
        (Some(1), Some(1)),
        "{r}"
    );
    assert!(sync_until(&[&b, &a], 10, || a.count("envelope_done") == 2));
    let inbox = b.ok(&["inbox"]);
    assert_eq!(inbox["messages"].as_array().unwrap().len(), 2);
    assert!(inbox["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["body"] == "two, from a file"));
}

#[test]
fn a_changed_relay_key_stops_relay_use_until_confirmed() {
    let tmp = tempfile::tempdir().unwrap();
    let mut first = RelayProc::start(tmp.path(), &[]);
    let (a, _b) = pair(tmp.path(), &first);
    a.sync();
    let old_fp = a.status()["relay"]["fingerprint"]
        .as_str()
        .unwrap()
        .to_string();
    let port = first.port;
    first.kill9();
    // Another relay (another store, another key) at the same URL.
    let second = RelayProc::start_on(tmp.path(), port, "other-store", &[]);
    a.send("beta", "held", "x");
    let err = a.run(&["sync"]).unwrap_err();
    assert!(
        err.contains("now presents key") && err.contains(&old_fp),
        "{err}"
    );
    let st = a.status();
    assert_eq!(st["alerts"][0]["kind"], "relay-key-changed");
    let new_fp = st["relay"]["offered_key"].as_str().unwrap().to_string();
    assert_ne!(new_fp, old_fp);
    // Relay use stays stopped, without even asking the relay, until the owner confirms; the
    // message names the command with this host's --dir.
    let confirm = format!(
        "mbx-relay host --dir {} relay set {} --key {new_fp}",
        a.dir.display(),
        second.url()
    );
    assert!(a.run(&["sync"]).unwrap_err().contains(&confirm));
    assert_eq!(a.count("envelope_draft"), 1);
    assert!(
        a.run(&["relay", "set", &second.url()]).is_err(),
        "no silent re-pin on trust"
    );
    assert!(a
        .run(&["relay", "set", &second.url(), "--key", &old_fp])
        .is_err());
    let set = a.ok(&["relay", "set", &second.url(), "--key", &new_fp]);
    assert_eq!(set["fingerprint"], new_fp.as_str());
    let r = a.sync();
    assert!(r["enrolled"].as_bool().unwrap());
    assert_eq!(a.status()["relay"]["fingerprint"], new_fp.as_str());
}

/// Push one item to `target` as `from` (with its real key), bypassing the host's own checks.
fn push_as(
    relay: &RelayProc,
    from: &HostCli,
    kind: &str,
    item_id: &str,
    target: &str,
    wire: &[u8],
) {
    let key = host_key(from);
    let client = relay_client(relay, &from.name, &key);
    let body = json!({"items": [{"kind": kind, "item_id": item_id,
        "targets": [{"host_pubkey": target, "wire_b64": b64(wire)}]}]});
    let a = client.post("/v2/relay/items", &body, true).unwrap();
    assert_eq!(a.status, 200);
    assert_eq!(a.body["results"][0]["status"], "accepted", "{}", a.body);
}

fn sealed_wire(from: &str, to: &str, enc_pub: &[u8; 32], signer: &SigningKey) -> (String, Vec<u8>) {
    let id = ulid(mbx_host::now_ms());
    let draft = draft_envelope(&id, from, to, "forged", "secret", mbx_host::now_ms()).unwrap();
    let env = seal_envelope(draft, enc_pub, from, signer).unwrap();
    (id, canonical_bytes(&env))
}

#[test]
fn refused_items_are_quarantined_with_their_reason_and_never_block_the_queue() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    a.sync();
    let bpk = b.pubkey();
    let akey = host_key(&a);
    let benc =
        EncSecret::from_b64(&std::fs::read_to_string(b.dir.join("enc.key")).unwrap()).unwrap();

    // Sealed for another enc key, properly signed by alpha.
    let (id1, w1) = sealed_wire("alpha", "beta", &EncSecret::generate().public(), &akey);
    push_as(&relay, &a, "envelope", &id1, &bpk, &w1);
    // Sealed for beta but host-signed by a key that is not alpha's.
    let (id2, w2) = sealed_wire("alpha", "beta", &benc.public(), &SigningKey::generate());
    push_as(&relay, &a, "envelope", &id2, &bpk, &w2);
    // Sealed for beta and signed by alpha, but addressed to another host.
    let (id3, w3) = sealed_wire("alpha", "gamma", &benc.public(), &akey);
    push_as(&relay, &a, "envelope", &id3, &bpk, &w3);
    // Signed by alpha but claiming another sending host.
    let (id4, w4) = sealed_wire("gamma", "beta", &benc.public(), &akey);
    push_as(&relay, &a, "envelope", &id4, &bpk, &w4);
    // A valid receipt from alpha for a message beta never sent.
    let (rid, rw) = receipt_wire(&akey, &ulid(1), "alpha", 1, mbx_host::now_ms()).unwrap();
    push_as(&relay, &a, "receipt", &rid, &bpk, &rw);
    // And one good message behind them.
    let good = a.send("beta", "good", "fine");
    a.sync();

    let r = b.sync();
    assert_eq!(
        (r["quarantined"].as_u64(), r["received"].as_u64()),
        (Some(5), Some(1)),
        "{r}"
    );
    assert_eq!(b.inbox_ids(), vec![good]);
    let q = b.ok(&["quarantine"]);
    let reasons: Vec<(String, String)> = q["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["item_id"].as_str().unwrap().to_string(),
                i["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let reason = |id: &str| {
        reasons
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, r)| r.clone())
            .unwrap_or_default()
    };
    assert!(reason(&id1).starts_with("undecryptable"), "{reasons:?}");
    assert_eq!(reason(&id2), "bad signature");
    assert_eq!(reason(&id3), "not addressed to this host");
    assert!(
        reason(&id4).starts_with("from does not name the sending host"),
        "{reasons:?}"
    );
    assert!(
        reason(&rid).starts_with("not a message this host sent"),
        "{reasons:?}"
    );
    for i in q["items"].as_array().unwrap() {
        assert!(i["bytes"].as_u64().unwrap() > 0, "the wire bytes are kept");
        assert!(i["seq"].as_u64().unwrap() > 0);
    }
    // Quarantined items are done: the checkpoint passed them and the relay was acked.
    assert_eq!(r["received_through"], r["acked_through"]);
    assert_eq!(b.sync()["quarantined"], 0);
}

#[test]
fn the_senders_own_deadline_raises_unconfirmed_without_the_relay() {
    let tmp = tempfile::tempdir().unwrap();
    // Retention 1 s, and no sweep (so no expiry notice) during the test.
    let relay = RelayProc::start(tmp.path(), &["--retention", "1s", "--sweep-interval", "1h"]);
    let (mut a, b) = pair(tmp.path(), &relay);
    // The spec's grace is 24 h; this test shrinks it to nothing.
    a.env
        .push(("MBX_HOST_DEADLINE_GRACE_MS".into(), "0".into()));
    b.sync();
    let id = a.send("beta", "unanswered", "x");
    assert_eq!(a.sync()["relay_accepted"], 1);
    assert_eq!(a.count("envelope_relay-accepted"), 1);
    let deadline = a.status()["active"][0]["deadline"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!deadline.is_empty());
    std::thread::sleep(Duration::from_millis(1_200));
    let r: Value = a.sync();
    assert_eq!(r["unconfirmed"], 1, "{r}");
    let st = a.status();
    assert_eq!(st["outbox"]["envelope_unconfirmed"], 1);
    let text = st["alerts"][0]["text"].as_str().unwrap().to_string();
    assert!(
        text.contains("Undelivered/unconfirmed to beta") && text.contains(&id),
        "{text}"
    );
    assert!(
        text.contains("older than 0.5.3"),
        "no receipt ever came from beta: {text}"
    );
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The `store permissions` check of `host doctor --json`: (exit code, ok, detail).
fn permissions_check(h: &HostCli) -> (Option<i32>, bool, String) {
    let out = h.run_fp(&["doctor"], None);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "store permissions")
        .unwrap_or_else(|| panic!("no store permissions check: {v}"))
        .clone();
    (
        out.status.code(),
        c["ok"].as_bool().unwrap(),
        format!("{} {}", c["detail"], c["fix"]),
    )
}

#[test]
fn the_host_store_is_owner_only_under_a_022_umask_and_a_loose_one_is_refused_naming_the_chmod() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let a = HostCli::init_under_umask(tmp.path(), "alpha", Some(0o022));
    let b = HostCli::init_under_umask(tmp.path(), "beta", Some(0o022));
    a.ok(&["peer", "add", "beta", &b.pubkey()]);
    b.ok(&["peer", "add", "alpha", &a.pubkey()]);
    a.ok(&["relay", "set", &relay.url()]);
    b.ok(&["relay", "set", &relay.url()]);
    b.sync();
    let id = a.send("beta", "private", "a body nobody else may read");
    assert!(
        sync_until(&[&a, &b], 5, || a.count("envelope_done") == 1),
        "{}",
        a.status()
    );
    assert_eq!(b.inbox_ids(), vec![id]);
    for h in [&a, &b] {
        let all = relay_testkit::files::modes(&h.dir);
        let files = all.iter().filter(|(p, _)| p.is_file()).count();
        assert!(files >= 5, "the engine wrote its files: {all:?}");
        for (p, mode) in &all {
            let want = if p.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(*mode, want, "{} is {mode:o}", p.display());
        }
        eprintln!(
            "{} under umask 022: {} directories 0700, {files} files 0600",
            h.name,
            all.len() - files
        );
    }
    assert!(permissions_check(&b).1, "store permissions check fails");

    // A loose directory, store directory or key file: every command refuses, naming the fix.
    let state = b.dir.join("state");
    let key = b.dir.join("host.key");
    for (path, mode, fix) in [
        (&b.dir, 0o755, "700"),
        (&state, 0o750, "700"),
        (&key, 0o644, "600"),
    ] {
        chmod(path, mode);
        let want = format!("chmod {fix} {}", path.display());
        for cmd in [
            &["inbox"][..],
            &["status"],
            &["sync"],
            &["send", "--to", "alpha", "--subject", "s", "--body", "b"],
        ] {
            let e = b.run(cmd).unwrap_err();
            assert!(
                e.contains(&want) && e.contains("other users"),
                "{cmd:?}: {e}"
            );
        }
        let (code, ok, detail) = permissions_check(&b);
        assert_eq!((code, ok), (Some(1), false), "{detail}");
        assert!(detail.contains(&want), "{detail}");
        chmod(path, if fix == "700" { 0o700 } else { 0o600 });
    }
    assert_eq!(b.inbox_ids().len(), 1, "nothing changed while refused");

    // A loose file deeper in the store: the directories keep it private; doctor finds it.
    let deep = relay_testkit::files::modes(&state)
        .into_iter()
        .map(|(p, _)| p)
        .find(|p| p.is_file())
        .unwrap();
    chmod(&deep, 0o644);
    let (code, ok, detail) = permissions_check(&b);
    assert_eq!((code, ok), (Some(1), false), "{detail}");
    assert!(
        detail.contains(&format!("chmod 600 {}", deep.display())),
        "{detail}"
    );
    chmod(&deep, 0o600);
    assert!(permissions_check(&b).1, "store permissions check fails");
}
