//! Disk full (issue 7) against the real binary: the store lives on a size-limited tmpfs; once it
//! fills, pushes are refused with 503 and a clear error (never a success) and `/health` answers
//! 503; no answered success is lost (checked after space returns and after kill -9 restarts);
//! and, the last requirement, the relay serves again without a restart once space
//! returns: the store reopens its database in-process (fjall refuses writes after a failed one).
//!
//! Mounting needs root (CAP_SYS_ADMIN): the tmpfs tests run in the normal test command when this
//! process can mount a tmpfs (CI runs as root), and otherwise print a `SKIPPED` line on stderr
//! and pass. Each tmpfs is 48 MiB and unmounted by a guard's `Drop`, also when the test fails.
//! The last test needs no root and runs by default with the `failpoints` feature: the relay's
//! store fsyncs fail while a trigger file exists (`MBX_FAIL_PERSIST_WHILE`), the same
//! 503-then-recover path end to end through the real `mbx-relay serve`.
use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use relay_core::STORE_UNAVAILABLE;
use serde_json::json;

/// A tmpfs of `size` mounted at `dir`, unmounted on drop (lazily: a process still holding a
/// file there cannot keep it mounted), so a failing test leaves no mount behind.
struct Mount(PathBuf);

impl Mount {
    /// Mount, or say why this process cannot (not root, no `mount`, mounting refused).
    fn try_new(dir: &Path, size: &str) -> Result<Mount, String> {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Mount(dir.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// A 48 MiB tmpfs under `work`, or `None` after printing why the calling test is skipped.
fn tmpfs_or_skip(work: &Path, test: &str) -> Option<(Mount, PathBuf)> {
    let mnt = work.join("mnt");
    match Mount::try_new(&mnt, "48m") {
        Ok(m) => Some((m, mnt)),
        Err(why) => {
            eprintln!(
                "SKIPPED {test}: cannot mount a tmpfs (needs root and a working mount): {why}"
            );
            None
        }
    }
}

/// Fill the filesystem holding `dir` with `filler` until writing fails (the disk is full).
fn fill(filler: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(filler).unwrap();
    let chunk = vec![0xA5u8; 64 * 1024];
    while f.write_all(&chunk).and_then(|()| f.sync_all()).is_ok() {}
    // Whatever the last partial write left is kept: the disk is now full.
}

/// A relay whose store is on a small tmpfs, filled up until pushes are refused: returns the
/// mount, relay, hosts, the item ids accepted (answered 200 "accepted") and the filler file;
/// `None` when no tmpfs can be mounted (the test is skipped, see [`tmpfs_or_skip`]).
fn fill_up(work: &Path, test: &str) -> Option<(Mount, Relay, Host, Host, Vec<String>, PathBuf)> {
    let (m, mnt) = tmpfs_or_skip(work, test)?;
    let store = mnt.join("store");
    let relay = Relay::launch(RelayOpts::args(GENEROUS).store(&store)).expect("relay starts");
    let s = Host::enrolled(&relay, "sender");
    let t = Host::enrolled(&relay, "target");
    let mut accepted: Vec<String> = Vec::new();
    let mut refused = 0;
    let filler = mnt.join("filler");
    fill(&filler);
    // Push ~64 KiB items until the store refuses several: each answer is a durable success or
    // a 503 with an error, nothing else.
    for i in 0..400 {
        let it = envelope_item_sized(&s, &[&t], 64 * 1024);
        let r = s.push(&relay, std::slice::from_ref(&it));
        match r.status {
            200 => {
                let res = &r.json()["results"][0];
                assert_eq!(res["status"], json!("accepted"), "push {i}: {res}");
                accepted.push(it["item_id"].as_str().unwrap().to_string());
            }
            503 => {
                assert_eq!(r.json(), json!({"error": STORE_UNAVAILABLE}), "push {i}");
                refused += 1;
                if refused >= 5 {
                    break;
                }
            }
            other => panic!("push {i}: unexpected {other}: {}", r.text()),
        }
    }
    assert!(
        refused >= 5,
        "the disk never filled ({} accepted)",
        accepted.len()
    );
    let h = relay.get("/health");
    assert_eq!(h.status, 503, "health on a full disk: {}", h.text());
    Some((m, relay, s, t, accepted, filler))
}

/// Every accepted item id is in `t`'s queue.
fn assert_all_pullable(relay: &Relay, t: &Host, accepted: &[String], when: &str) {
    let got: Vec<String> = t
        .pull_all(relay, 0)
        .iter()
        .map(|i| i["item_id"].as_str().unwrap().to_string())
        .collect();
    for id in accepted {
        assert!(got.contains(id), "{when}: accepted item {id} is missing");
    }
}

/// Push one small item, retrying 503s for a few seconds; true once accepted.
fn push_until_accepted(relay: &Relay, s: &Host, t: &Host, accepted: &mut Vec<String>) -> bool {
    for _ in 0..25 {
        let it = envelope_item(s, &[t]);
        let r = s.push(relay, std::slice::from_ref(&it));
        if r.status == 200 {
            assert_eq!(r.json()["results"][0]["status"], json!("accepted"));
            accepted.push(it["item_id"].as_str().unwrap().to_string());
            return true;
        }
        assert_eq!(r.status, 503, "{}", r.text());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    false
}

#[test]
fn a_full_disk_answers_503_and_loses_no_accepted_item_across_a_restart() {
    let work = tempfile::tempdir().unwrap();
    let test = "a_full_disk_answers_503_and_loses_no_accepted_item_across_a_restart";
    let Some((_m, mut relay, s, t, mut accepted, filler)) = fill_up(work.path(), test) else {
        return;
    };
    eprintln!("disk full after {} accepted items", accepted.len());
    std::fs::remove_file(&filler).unwrap();
    relay.restart();
    assert_all_pullable(&relay, &t, &accepted, "after space returned and a restart");
    assert!(push_until_accepted(&relay, &s, &t, &mut accepted));
    assert_eq!(relay.get("/health").status, 200);
    relay.restart();
    assert_all_pullable(&relay, &t, &accepted, "after kill -9");
}

/// After ENOSPC fjall poisons its database; the store reopens it in-process once space
/// returns (the same pid serves again, and says so in its log).
#[test]
fn a_full_disk_serves_again_without_a_restart_once_space_returns() {
    let work = tempfile::tempdir().unwrap();
    let test = "a_full_disk_serves_again_without_a_restart_once_space_returns";
    let Some((_m, relay, s, t, mut accepted, filler)) = fill_up(work.path(), test) else {
        return;
    };
    let pid = relay.pid();
    std::fs::remove_file(&filler).unwrap();
    assert!(
        push_until_accepted(&relay, &s, &t, &mut accepted),
        "the relay did not serve again after space returned (no restart)"
    );
    assert_eq!(relay.get("/health").status, 200);
    assert_all_pullable(&relay, &t, &accepted, "after space returned");
    assert_eq!(relay.pid(), pid, "no restart");
    assert!(
        relay.stderr_log().contains("store database reopened"),
        "the store reopened its database in-process"
    );
}

/// Without root: every store fsync fails while a trigger file exists. Pushes answer 503 with an
/// error (never a success) and `/health` 503; once the file is gone the same process serves
/// again, nothing acknowledged is missing, a refused item retried is stored once, and all of it
/// survives kill -9.
#[cfg(feature = "failpoints")]
#[test]
fn failing_fsyncs_answer_503_then_the_same_process_serves_again() {
    let (mut relay, trigger, _work) = relay_with_fsync_trigger();
    let s = Host::enrolled(&relay, "sender");
    let t = Host::enrolled(&relay, "target");
    let mut accepted = Vec::new();
    assert!(push_until_accepted(&relay, &s, &t, &mut accepted));
    let pid = relay.pid();

    std::fs::write(&trigger, b"").unwrap();
    let mut refused = Vec::new();
    for i in 0..200 {
        let it = envelope_item(&s, &[&t]);
        let r = s.push(&relay, std::slice::from_ref(&it));
        match r.status {
            // Until the watcher (every 20 ms) switched the fault on.
            200 if refused.is_empty() => {
                assert_eq!(r.json()["results"][0]["status"], json!("accepted"));
                accepted.push(it["item_id"].as_str().unwrap().to_string());
            }
            503 => {
                // A fixed text: the cause (engine message, paths) is logged, never answered.
                assert_eq!(r.json(), json!({"error": STORE_UNAVAILABLE}), "push {i}");
                refused.push(it);
                if refused.len() >= 5 {
                    break;
                }
            }
            other => panic!("push {i} while fsyncs fail: {other}: {}", r.text()),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(refused.len() >= 5, "the fault never took effect");
    let h = relay.get("/health");
    assert_eq!(h.status, 503, "health while fsyncs fail");
    assert_eq!(h.json(), json!({"error": STORE_UNAVAILABLE}), "health");
    assert!(
        relay.stderr_log().contains("not durable"),
        "the cause is logged"
    );

    std::fs::remove_file(&trigger).unwrap();
    assert!(
        push_until_accepted(&relay, &s, &t, &mut accepted),
        "the relay did not serve again once fsyncs succeed (no restart)"
    );
    assert_eq!(relay.get("/health").status, 200);
    assert_eq!(relay.pid(), pid, "no restart");
    assert!(relay.stderr_log().contains("store database reopened"));
    assert_all_pullable(&relay, &t, &accepted, "after the fault ended");
    // A refused item retried: stored once, new or a duplicate of the original.
    let r = s.push(&relay, std::slice::from_ref(&refused[0]));
    assert_eq!(r.status, 200, "{}", r.text());
    let status = r.json()["results"][0]["status"].clone();
    assert!(
        status == json!("accepted") || status == json!("duplicate"),
        "{status}"
    );
    accepted.push(refused[0]["item_id"].as_str().unwrap().to_string());
    relay.restart();
    assert_all_pullable(&relay, &t, &accepted, "after kill -9");
    let ids: Vec<String> = t
        .pull_all(&relay, 0)
        .iter()
        .map(|i| i["item_id"].as_str().unwrap().to_string())
        .collect();
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "an item is queued twice");
}
