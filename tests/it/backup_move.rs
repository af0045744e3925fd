//! Moving a relay between backends with `relay-tool backup` / `restore` (the logical backup,
//! format 5): a fjall relay's store restores into PostgreSQL and `serve --store postgres://`
//! serves the same mail under a new epoch; that database backs up and restores into a store
//! directory again. A damaged or truncated file is refused with a clear error and creates
//! nothing. Real processes, a throwaway PostgreSQL cluster.

use crate::common;

use std::path::Path;

use common::*;
use relay_testkit::cluster::PgCluster;
use relay_wire::keys::SigningKey;
use serde_json::{json, Value};

/// A relay with the relay key `seed` on `store` (`--store` value) or a fresh directory.
fn relay_on(store: Option<&str>, dir: Option<&Path>, seed: &str) -> Relay {
    let mut args: Vec<&str> = GENEROUS.to_vec();
    if let Some(s) = store {
        args.extend(["--store", s]);
    }
    let mut opts = RelayOpts::args(&args).env("MBX_RELAY_KEY", seed);
    if let Some(d) = dir {
        opts = opts.store(d);
    }
    Relay::launch(opts).expect("relay starts")
}

fn tool_ok(args: &[&str]) -> String {
    let out = relay_tool(args);
    assert!(
        out.status.success(),
        "relay-tool {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn tool_fails(args: &[&str]) -> (Option<i32>, String) {
    let out = relay_tool(args);
    assert!(!out.status.success(), "relay-tool {args:?} succeeded");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What each host pulls from the start (seqs, ids, wire bytes, times: all of it).
fn mailboxes(relay: &Relay, hosts: &[&Host]) -> Vec<Vec<Value>> {
    hosts.iter().map(|h| h.pull_all(relay, 0)).collect()
}

#[test]
fn a_backup_moves_a_relay_from_fjall_to_postgres_and_back() {
    let Some(pg) = PgCluster::start_or_skip("backup_move") else {
        return;
    };
    let key = SigningKey::generate();
    let seed = key.seed_b64();
    let work = tempfile::tempdir().expect("tempdir");

    // A fjall relay with mail queued both ways, one item acked.
    let mut fjall = relay_on(None, None, &seed);
    let (alice, bob) = (
        Host::enrolled(&fjall, "alice"),
        Host::enrolled(&fjall, "bob"),
    );
    let items: Vec<Value> = (0..3).map(|_| envelope_item(&alice, &[&bob])).collect();
    for it in &items {
        assert_eq!(alice.push_one(&fjall, it)["status"], json!("accepted"));
    }
    assert_eq!(
        bob.push_one(&fjall, &envelope_item(&bob, &[&alice]))["status"],
        json!("accepted")
    );
    let first = bob.pull_all(&fjall, 0)[0]["seq"].clone();
    bob.ack(&fjall, &fjall.epoch(), first).ok();
    let before = mailboxes(&fjall, &[&alice, &bob]);
    assert_eq!((before[0].len(), before[1].len()), (1, 2), "{before:?}");
    let fjall_epoch = fjall.epoch();
    let dir = fjall.store_dir().to_str().expect("utf-8").to_string();
    fjall.terminate(std::time::Duration::from_secs(20));

    // fjall -> file -> PostgreSQL.
    let file1 = work.path().join("from-fjall.mbxbak");
    let file1s = file1.to_str().expect("utf-8");
    tool_ok(&["backup", "--store-dir", &dir, file1s]);
    assert!(tool_ok(&["verify", file1s]).contains("backup OK"));
    let url = pg.fresh_db();
    let out = tool_ok(&["restore", "--store", &url, file1s]);
    assert!(out.contains("new epoch"), "{out}");
    let (code, err) = tool_fails(&["restore", "--store", &url, file1s]);
    assert!(err.contains("already holds a relay"), "{code:?} {err}");

    let pgr = relay_on(Some(&url), None, &seed);
    assert_ne!(pgr.epoch(), fjall_epoch, "a restore rotates the epoch");
    assert_eq!(
        mailboxes(&pgr, &[&alice, &bob]),
        before,
        "hosts pull the same items (same seqs) from PostgreSQL"
    );
    assert_eq!(
        alice.push_one(&pgr, &items[1])["status"],
        json!("duplicate"),
        "dedup rows moved with the items"
    );
    let log = tool_ok(&["log", "--store", &url, "--limit", "1"]);
    assert!(log.contains("restore"), "{log}");
    assert!(tool_ok(&["log", "--verify", "--store", &url]).contains("verif"));

    // PostgreSQL -> file (beside the running relay) -> a store directory.
    let file2 = work.path().join("from-pg.mbxbak");
    let file2s = file2.to_str().expect("utf-8");
    tool_ok(&["backup", "--store", &url, file2s]);
    let back = work.path().join("back");
    let backs = back.to_str().expect("utf-8");
    tool_ok(&["restore", "--store-dir", backs, file2s]);
    let pg_epoch = pgr.epoch();
    drop(pgr);
    let again = relay_on(None, Some(&back), &seed);
    assert!(![fjall_epoch, pg_epoch].contains(&again.epoch()));
    assert_eq!(mailboxes(&again, &[&alice, &bob]), before);
    assert_eq!(
        alice.push_one(&again, &items[2])["status"],
        json!("duplicate")
    );

    // A damaged or truncated file is refused, naming the damage, and creates nothing.
    let good = std::fs::read(&file2).expect("read");
    let bad = work.path().join("bad.mbxbak");
    let bads = bad.to_str().expect("utf-8");
    let mut flipped = good.clone();
    let at = good.len() / 2;
    flipped[at] ^= 0x40;
    std::fs::write(&bad, &flipped).expect("write");
    let empty_url = pg.fresh_db();
    let (code, err) = tool_fails(&["restore", "--store", &empty_url, bads]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("damaged backup at byte offset"), "{err}");
    std::fs::write(&bad, &good[..good.len() - 100]).expect("write");
    let (code, err) = tool_fails(&["restore", "--store", &empty_url, bads]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("truncated backup"), "{err}");
    let none = work.path().join("none");
    let (_, err) = tool_fails(&[
        "restore",
        "--store-dir",
        none.to_str().expect("utf-8"),
        bads,
    ]);
    assert!(err.contains("truncated backup"), "{err}");
    assert!(!none.exists(), "a refused restore created the directory");
    // A raw-row backup of an older fjall relay (format 1) is refused by PostgreSQL, saying how
    // to move it.
    let old = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("keyspace/tests/fixtures/schema1-format1.mbxbak");
    let (_, err) = tool_fails(&[
        "restore",
        "--store",
        &empty_url,
        old.to_str().expect("utf-8"),
    ]);
    assert!(
        err.contains("restores only into a store directory"),
        "{err}"
    );
    // The database the refused restores aimed at is still empty: a good restore goes in.
    tool_ok(&["restore", "--store", &empty_url, file2s]);
}
