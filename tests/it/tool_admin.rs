//! End-to-end tests of `relay-tool` against real `mbx-relay serve` processes and real files:
//! online backup under load and restore into a fresh directory (every item accepted before the
//! backup began comes back byte for byte, under a new epoch), damaged and truncated backups
//! (verify fails, restore refuses, the store is untouched), refusals while the relay runs, the
//! relay-key check, and stats/dump agreeing with what was pushed.

use crate::common;

use common::relay_tool as tool;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{envelope_item, item_wire, Host, Relay, RelayOpts, GENEROUS};
use relay_wire::keys::{b64, fingerprint, parse_pubkey};
use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run and require exit code `code`; returns the whole output.
fn tool_exit(args: &[&str], code: i32) -> Output {
    let out = tool(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "relay-tool {args:?}\nstdout:\n{}\nstderr:\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// Run and require exit code `code`; returns stdout.
fn tool_expect(args: &[&str], code: i32) -> String {
    text(&tool_exit(args, code).stdout)
}

/// Run, require exit code `code`, and return stderr.
fn tool_fails(args: &[&str], code: i32) -> String {
    text(&tool_exit(args, code).stderr)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Items pushed and accepted: item_id -> (wire bytes, seq per target pubkey).
type Accepted = BTreeMap<String, (Vec<u8>, BTreeMap<String, u64>)>;

/// Push one envelope for `targets` and record it (asserts it was accepted).
fn push_recorded(relay: &Relay, sender: &Host, targets: &[&Host], into: &mut Accepted) {
    let item = envelope_item(sender, targets);
    let r = sender.push_one(relay, &item);
    assert_eq!(r["status"], "accepted", "{r}");
    let seqs = r["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| {
            (
                t["host_pubkey"].as_str().unwrap().to_string(),
                t["seq"].as_u64().unwrap(),
            )
        })
        .collect();
    into.insert(
        item["item_id"].as_str().unwrap().to_string(),
        (item_wire(&item), seqs),
    );
}

/// Every queued item of `target` on `relay`: item_id -> (wire bytes, seq).
fn queue_of(relay: &Relay, target: &Host) -> BTreeMap<String, (Vec<u8>, u64)> {
    target
        .pull_all(relay, 0)
        .iter()
        .map(|i| {
            let wire = relay_wire::keys::unb64(i["wire_b64"].as_str().unwrap()).unwrap();
            (
                i["item_id"].as_str().unwrap().to_string(),
                (wire, i["seq"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// Assert every accepted item is queued for each of its targets with the same bytes and seq.
fn assert_all_present(relay: &Relay, targets: &[&Host], accepted: &Accepted) {
    for t in targets {
        let queue = queue_of(relay, t);
        for (id, (wire, seqs)) in accepted {
            let Some(seq) = seqs.get(&t.pubkey()) else {
                continue;
            };
            let (got_wire, got_seq) = queue
                .get(id)
                .unwrap_or_else(|| panic!("item {id} for {} missing after restore", t.name));
            assert_eq!(
                got_wire, wire,
                "item {id} for {}: wire bytes differ",
                t.name
            );
            assert_eq!(got_seq, seq, "item {id} for {}: seq differs", t.name);
        }
    }
}

/// A relay whose store lives in `dir`, started with the generous rate limits.
fn relay_at(dir: &Path, key_seed: Option<&str>) -> Relay {
    let mut opts = RelayOpts::args(GENEROUS).store(dir);
    if let Some(k) = key_seed {
        opts = opts.env("MBX_RELAY_KEY", k);
    }
    Relay::launch(opts).expect("relay starts")
}

/// Names in a directory (to prove nothing was created or removed beside a store).
fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

fn stop(relay: &mut Relay) {
    assert_eq!(
        relay.terminate(Duration::from_secs(30)),
        Some(0),
        "clean relay exit"
    );
}

#[test]
fn online_backup_under_load_restores_every_item_accepted_before_it() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let relay = relay_at(&store, None);
    let sender = Host::enrolled(&relay, "sender");
    let loader = Host::enrolled(&relay, "loader");
    let alpha = Host::enrolled(&relay, "alpha");
    let beta = Host::enrolled(&relay, "beta");
    let mut before = Accepted::new();
    for i in 0..40 {
        let targets: Vec<&Host> = if i % 2 == 0 {
            vec![&alpha, &beta]
        } else {
            vec![&alpha]
        };
        push_recorded(&relay, &sender, &targets, &mut before);
    }
    let file = work.path().join("relay.bak");
    let stop_load = AtomicBool::new(false);
    let (backup_out, loaded) = std::thread::scope(|scope| {
        let load = scope.spawn(|| {
            let mut accepted = BTreeSet::new();
            // Bounded: at most 400 batches even if the backup were slow.
            for _ in 0..400 {
                if stop_load.load(Ordering::Relaxed) {
                    break;
                }
                let items: Vec<Value> = (0..5)
                    .map(|_| envelope_item(&loader, &[&alpha, &beta]))
                    .collect();
                for r in loader.push_results(&relay, &items) {
                    if r["status"] == "accepted" {
                        accepted.insert(r["item_id"].as_str().unwrap().to_string());
                    }
                }
            }
            accepted
        });
        // Let the load get going so the backup really runs beside it.
        std::thread::sleep(Duration::from_millis(300));
        let out = tool(&["backup", "--store-dir", s(&store), s(&file)]);
        std::thread::sleep(Duration::from_millis(200));
        stop_load.store(true, Ordering::Relaxed);
        (out, load.join().expect("load thread"))
    });
    assert!(
        backup_out.status.success(),
        "backup failed:\n{}\n{}",
        text(&backup_out.stdout),
        text(&backup_out.stderr)
    );
    let printed = text(&backup_out.stdout);
    assert!(
        printed.contains("online, through the running relay"),
        "{printed}"
    );
    assert!(printed.contains("checksum"), "{printed}");
    assert!(
        !loaded.is_empty(),
        "the load pushed nothing while the backup ran"
    );
    assert!(!common_tmp(&file).exists(), "FILE.tmp left behind");

    // The relay recorded the backup in its log (read through the socket while it runs).
    let log = tool_expect(&["log", "--store-dir", s(&store), "--json"], 0);
    let newest: Value = serde_json::from_str(log.lines().next().expect("a log entry")).unwrap();
    assert_eq!(newest["kind"], "backup", "{log}");

    let verified = tool_expect(&["verify", s(&file)], 0);
    assert!(verified.contains("backup OK"), "{verified}");

    // Restore into a fresh directory and serve it with the same relay key.
    let restored = work.path().join("restored");
    let out = tool_expect(&["restore", "--store-dir", s(&restored), s(&file)], 0);
    assert!(out.contains("new epoch"), "{out}");
    let seed = std::fs::read_to_string(store.join("relay.key")).unwrap();
    let relay2 = relay_at(&restored, Some(seed.trim()));
    assert_eq!(relay2.pubkey(), relay.pubkey());
    assert_ne!(
        relay2.epoch(),
        relay.epoch(),
        "a restore must rotate the epoch"
    );
    assert_all_present(&relay2, &[&alpha, &beta], &before);
    // Nothing appears that was never pushed, and the snapshot is consistent: the usage counters
    // restored with it count exactly the items restored with it.
    let mut queued = 0u64;
    for t in [&alpha, &beta] {
        let queue = queue_of(&relay2, t);
        for id in queue.keys() {
            assert!(
                before.contains_key(id) || loaded.contains(id),
                "unknown item {id}"
            );
        }
        queued += queue.len() as u64;
    }
    let stats: Value = serde_json::from_str(&tool_expect(
        &["stats", "--store-dir", s(&restored), "--json"],
        0,
    ))
    .unwrap();
    assert_eq!(stats["queued_items"], queued, "{stats}");
    assert_eq!(stats["dedup_rows"], queued, "{stats}");
    let log2 = tool_expect(&["log", "--store-dir", s(&restored)], 0);
    assert!(
        log2.lines().next().unwrap_or("").contains("restore"),
        "{log2}"
    );
}

/// A copy of a backup whose header claims format `version` (with a valid header checksum), as a
/// newer relay-tool would write it. Header: magic[8] | format u32 LE | crc32(magic, format) LE.
fn with_format_version(bytes: &[u8], version: u32) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crc32(&out[..12]);
    out[12..16].copy_from_slice(&crc.to_le_bytes());
    out
}

/// CRC-32 (IEEE, as crc32fast computes it), bitwise.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn common_tmp(file: &Path) -> PathBuf {
    let mut s = file.as_os_str().to_os_string();
    s.push(".tmp");
    PathBuf::from(s)
}

#[test]
fn damaged_or_truncated_backups_fail_verify_and_restore_leaves_the_store_untouched() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = relay_at(&store, None);
    let sender = Host::enrolled(&relay, "sender");
    let alpha = Host::enrolled(&relay, "alpha");
    let mut accepted = Accepted::new();
    for _ in 0..10 {
        push_recorded(&relay, &sender, &[&alpha], &mut accepted);
    }
    let good = work.path().join("good.bak");
    tool_expect(&["backup", "--store-dir", s(&store), s(&good)], 0);
    let old_epoch = relay.epoch();
    stop(&mut relay);
    let bytes = std::fs::read(&good).unwrap();

    let flipped = work.path().join("flipped.bak");
    let mut f = bytes.clone();
    let mid = f.len() / 2;
    f[mid] ^= 0x01;
    std::fs::write(&flipped, &f).unwrap();
    let truncated = work.path().join("truncated.bak");
    std::fs::write(&truncated, &bytes[..bytes.len() - 7]).unwrap();
    let not_backup = work.path().join("notes.txt");
    std::fs::write(&not_backup, b"just some text, not a backup\n").unwrap();

    let err = tool_fails(&["verify", s(&flipped)], 3);
    assert!(err.contains("damaged backup at byte offset"), "{err}");
    let err = tool_fails(&["verify", s(&truncated)], 3);
    assert!(err.contains("truncated"), "{err}");
    let err = tool_fails(&["verify", s(&not_backup)], 3);
    assert!(err.contains("wrong magic"), "{err}");
    let newer = work.path().join("newer.bak");
    std::fs::write(&newer, with_format_version(&bytes, 99)).unwrap();
    let err = tool_fails(&["verify", s(&newer)], 3);
    assert!(err.contains("newer than this tool"), "{err}");
    let err = tool_fails(&["verify", s(&work.path().join("absent.bak"))], 1);
    assert!(err.contains("no such file"), "{err}");

    let dump_before = tool_expect(
        &["dump", "--store-dir", s(&store), "--json", "--with-wire"],
        0,
    );
    let beside_before = listing(work.path());
    for bad in [&flipped, &truncated, &not_backup, &newer] {
        let err = tool_fails(&["restore", "--store-dir", s(&store), s(bad)], 3);
        assert!(err.contains("refusing to restore"), "{err}");
        assert_eq!(
            listing(work.path()),
            beside_before,
            "restore of {} left files behind",
            bad.display()
        );
    }
    let dump_after = tool_expect(
        &["dump", "--store-dir", s(&store), "--json", "--with-wire"],
        0,
    );
    assert_eq!(
        dump_before, dump_after,
        "a refused restore changed the store"
    );

    // The good file restores over the stopped store; the old one is kept beside it.
    let out = tool_expect(&["restore", "--store-dir", s(&store), s(&good)], 0);
    assert!(out.contains("old store kept"), "{out}");
    assert!(out.contains("relay.key       copied"), "{out}");
    let kept: Vec<String> = listing(work.path())
        .into_iter()
        .filter(|n| n.starts_with("store.pre-restore-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].ends_with('Z'), "UTC stamp: {kept:?}");
    assert!(work.path().join(&kept[0]).join("db").is_dir());
    let relay2 = relay_at(&store, None);
    assert_ne!(relay2.epoch(), old_epoch);
    assert_all_present(&relay2, &[&alpha], &accepted);
    drop(relay2);

    // --discard-old leaves no copy behind.
    tool_expect(
        &[
            "restore",
            "--store-dir",
            s(&store),
            s(&good),
            "--discard-old",
        ],
        0,
    );
    let kept2 = listing(work.path())
        .into_iter()
        .filter(|n| n.starts_with("store.pre-restore-"))
        .count();
    assert_eq!(kept2, 1, "--discard-old kept the old store");
    assert!(!listing(work.path())
        .iter()
        .any(|n| n.contains("restore-tmp")));

    // A store that no longer opens is what a restore is for: it is replaced (and kept aside).
    std::fs::write(store.join("db").join("version"), b"garbage").unwrap();
    let err = tool_fails(&["stats", "--store-dir", s(&store)], 1);
    assert!(err.contains("damaged"), "{err}");
    let out = tool(&[
        "restore",
        "--store-dir",
        s(&store),
        s(&good),
        "--discard-old",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("does not open"),
        "{}",
        text(&out.stderr)
    );
    let relay3 = relay_at(&store, None);
    assert_all_present(&relay3, &[&alpha], &accepted);
}

#[test]
fn restore_and_rotate_epoch_refuse_while_the_relay_runs() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = relay_at(&store, None);
    let file = work.path().join("b.bak");
    tool_expect(&["backup", "--store-dir", s(&store), s(&file)], 0);
    let pid = relay.pid().expect("running");
    let epoch = relay.epoch();
    let err = tool_fails(&["restore", "--store-dir", s(&store), s(&file)], 4);
    assert!(err.contains(&format!("in use by pid {pid}")), "{err}");
    let err = tool_fails(&["rotate-epoch", "--store-dir", s(&store)], 4);
    assert!(err.contains(&format!("in use by pid {pid}")), "{err}");
    assert_eq!(relay.epoch(), epoch, "a refused command changed the epoch");
    relay.assert_alive();

    stop(&mut relay);
    // With no relay running, backup opens the store itself and logs there.
    let offline = work.path().join("offline.bak");
    let out = tool_expect(&["backup", "--store-dir", s(&store), s(&offline)], 0);
    assert!(out.contains("offline, no relay was running"), "{out}");
    let log = tool_expect(&["log", "--store-dir", s(&store), "--json"], 0);
    let newest: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert_eq!(newest["kind"], "backup", "{log}");
    assert!(
        newest["detail"].as_str().unwrap().contains("offline.bak"),
        "{log}"
    );
    tool_expect(&["verify", s(&offline)], 0);
    let out = tool_expect(&["rotate-epoch", "--store-dir", s(&store)], 0);
    assert!(out.contains(&epoch), "{out}");
    let stats: Value = serde_json::from_str(&tool_expect(
        &["stats", "--store-dir", s(&store), "--json"],
        0,
    ))
    .unwrap();
    assert_ne!(stats["epoch"], Value::from(epoch.clone()));
    let log = tool_expect(&["log", "--store-dir", s(&store), "--json"], 0);
    let newest: Value = serde_json::from_str(log.lines().next().unwrap()).unwrap();
    assert!(
        newest["detail"].as_str().unwrap().contains("rotate-epoch"),
        "{log}"
    );
}

#[test]
fn stats_and_dump_agree_with_what_was_pushed() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = relay_at(&store, None);
    let sender = Host::enrolled(&relay, "sender");
    let alpha = Host::enrolled(&relay, "alpha");
    let beta = Host::enrolled(&relay, "beta");
    let mut accepted = Accepted::new();
    for i in 0..9 {
        let targets: Vec<&Host> = if i < 3 {
            vec![&alpha, &beta]
        } else {
            vec![&alpha]
        };
        push_recorded(&relay, &sender, &targets, &mut accepted);
    }
    // alpha: 9 items, beta: 3 items.
    let queued_bytes: u64 = accepted
        .values()
        .map(|(w, seqs)| w.len() as u64 * seqs.len() as u64)
        .sum();
    let relay_pk = parse_pubkey(&relay.pubkey()).unwrap();
    let epoch = relay.epoch();

    let socket = store.join("admin.sock");
    {
        use std::os::unix::fs::{FileTypeExt, PermissionsExt};
        let m = std::fs::symlink_metadata(&socket).expect("admin socket exists while serving");
        assert!(m.file_type().is_socket());
        assert_eq!(m.permissions().mode() & 0o777, 0o600, "owner-only socket");
    }

    let check_stats = |v: &Value| {
        assert_eq!(v["epoch"], Value::from(epoch.clone()));
        assert_eq!(
            v["relay_key_fingerprint"],
            Value::from(fingerprint(&relay_pk))
        );
        assert_eq!(v["schema_version"], relay_keyspace::SCHEMA_VERSION);
        assert_eq!(v["live_enrolments"], 3);
        assert_eq!(v["revoked_enrolments"], 0);
        assert_eq!(v["queued_items"], 12);
        assert_eq!(v["queued_bytes"], queued_bytes);
        assert_eq!(v["dedup_rows"], 12);
        assert_eq!(
            v["top_targets"][0]["host_pubkey"],
            Value::from(alpha.pubkey())
        );
        assert_eq!(v["top_targets"][0]["items"], 9);
        assert_eq!(v["top_targets"][1]["items"], 3);
        assert!(v["oldest_queued_ms"].as_u64().is_some());
        assert!(v["disk_bytes"].as_u64().unwrap() > 0);
    };
    let online: Value = serde_json::from_str(&tool_expect(
        &["stats", "--store-dir", s(&store), "--json"],
        0,
    ))
    .unwrap();
    check_stats(&online);
    // The running relay reports live enrolments against its cap (the default 100,000).
    assert_eq!(online["max_enrolments"], 100_000, "{online}");
    let human = tool_expect(&["stats", "--store-dir", s(&store)], 0);
    assert!(
        human.contains("3 live of 100000 max (0.0%), 0 revoked"),
        "{human}"
    );
    assert!(human.contains("12 items"), "{human}");

    let dump = tool_expect(
        &[
            "dump",
            "--store-dir",
            s(&store),
            "--partition",
            "items",
            "--with-wire",
            "--json",
        ],
        0,
    );
    let mut seen = 0;
    for line in dump.lines() {
        let v: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(v["partition"], "items");
        let id = v["value"]["item_id"].as_str().unwrap();
        let (wire, _) = accepted
            .get(id)
            .unwrap_or_else(|| panic!("unknown item {id}"));
        assert_eq!(
            v["value"]["wire_b64"],
            Value::from(b64(wire)),
            "wire of {id}"
        );
        seen += 1;
    }
    assert_eq!(seen, 12);
    let readable = tool_expect(
        &["dump", "--store-dir", s(&store), "--partition", "items"],
        0,
    );
    assert_eq!(
        readable.lines().filter(|l| l.starts_with("items ")).count(),
        12,
        "{readable}"
    );
    assert!(readable.contains("-- records: items 12"), "{readable}");
    assert!(
        !readable.contains("wire_b64"),
        "wire bytes only with --with-wire"
    );

    // Offline (relay stopped): the same figures from the store itself.
    stop(&mut relay);
    assert!(
        !socket.exists(),
        "the relay removes its socket on a clean exit"
    );
    let offline: Value = serde_json::from_str(&tool_expect(
        &["stats", "--store-dir", s(&store), "--json"],
        0,
    ))
    .unwrap();
    check_stats(&offline);
    assert_eq!(
        offline["max_enrolments"],
        Value::Null,
        "a stopped store has no cap"
    );
    let dump_offline = tool_expect(
        &[
            "dump",
            "--store-dir",
            s(&store),
            "--partition",
            "items",
            "--with-wire",
            "--json",
        ],
        0,
    );
    assert_eq!(dump_offline, dump, "online and offline dumps differ");
}

#[test]
fn a_backup_of_another_relay_key_is_refused_unless_accepted() {
    let work = tempfile::tempdir().unwrap();
    let a_store = work.path().join("a");
    let b_store = work.path().join("b");
    let mut a = relay_at(&a_store, None);
    let mut b = relay_at(&b_store, None);
    let a_pubkey = a.pubkey();
    assert_ne!(a_pubkey, b.pubkey());
    let file = work.path().join("a.bak");
    tool_expect(&["backup", "--store-dir", s(&a_store), s(&file)], 0);
    stop(&mut a);
    stop(&mut b);
    let before = tool_expect(&["dump", "--store-dir", s(&b_store), "--json"], 0);
    let err = tool_fails(&["restore", "--store-dir", s(&b_store), s(&file)], 3);
    assert!(err.contains("--accept-other-key"), "{err}");
    assert_eq!(
        tool_expect(&["dump", "--store-dir", s(&b_store), "--json"], 0),
        before
    );

    let out = tool_expect(
        &[
            "restore",
            "--store-dir",
            s(&b_store),
            s(&file),
            "--accept-other-key",
        ],
        0,
    );
    assert!(out.contains("NOT copied"), "{out}");
    assert!(
        !b_store.join("relay.key").exists(),
        "b's key must not be paired with a's store"
    );
    let seed = std::fs::read_to_string(a_store.join("relay.key")).unwrap();
    let a2 = relay_at(&b_store, Some(seed.trim()));
    assert_eq!(a2.pubkey(), a_pubkey);
}

#[test]
fn command_line_errors_name_their_cause_and_exit_codes_are_documented() {
    let help = tool_expect(&["--help"], 0);
    for code in [
        "0  success",
        "1  failure while working",
        "2  usage or configuration error",
        "3  a data check failed",
        "4  the store is in use",
    ] {
        assert!(help.contains(code), "--help lacks {code:?}:\n{help}");
    }
    tool_fails(&[], 2);
    tool_fails(&["frobnicate"], 2);
    tool_fails(&["backup"], 2);
    let work = tempfile::tempdir().unwrap();
    let missing = work.path().join("nope");
    let err = tool_fails(&["stats", "--store-dir", s(&missing)], 1);
    assert!(err.contains("does not exist"), "{err}");
    let err = tool_fails(
        &[
            "backup",
            "--store-dir",
            s(&missing),
            s(&work.path().join("x.bak")),
        ],
        1,
    );
    assert!(err.contains("does not exist"), "{err}");
    assert!(!work.path().join("x.bak.tmp").exists());
    let err = tool_fails(
        &[
            "dump",
            "--store-dir",
            s(work.path()),
            "--partition",
            "bogus",
        ],
        2,
    );
    assert!(err.contains("unknown partition"), "{err}");
    let key = tool_expect(&["keygen"], 0);
    assert!(
        key.contains("seed: ") && key.contains("fingerprint: ") && key.contains("public: "),
        "{key}"
    );
}

/// One raw exchange on the admin socket: send `request`, read everything until the relay closes.
fn admin_raw(store: &Path, request: &[u8]) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut c = std::os::unix::net::UnixStream::connect(store.join("admin.sock")).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    // The relay may answer and close before reading everything we send: ignore write errors.
    let _ = c.write_all(request);
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    out
}

#[test]
fn the_admin_socket_refuses_garbage_and_a_stale_socket_is_not_a_running_relay() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut relay = relay_at(&store, None);
    let cases: [&[u8]; 6] = [
        b"hello\n",
        b"backup now\n",
        b"dump partition nope\n",
        b"\xff\xfe\n",
        b"log 0\n",
        &[b'x'; 5000],
    ];
    for req in cases {
        let answer = text(&admin_raw(&store, req));
        assert!(answer.starts_with("error "), "{req:?} -> {answer:?}");
        assert_eq!(
            answer.matches('\n').count(),
            1,
            "one error line: {answer:?}"
        );
    }
    // A client that connects and says nothing is dropped after the request timeout; meanwhile
    // others are served.
    let _silent = std::os::unix::net::UnixStream::connect(store.join("admin.sock")).unwrap();
    let ok = text(&admin_raw(&store, b"stats\n"));
    assert!(ok.starts_with("ok\n") && ok.contains("done {}"), "{ok:?}");
    relay.assert_alive();

    // kill -9 leaves the socket file behind: the tool sees no relay and opens the store itself,
    // and the next relay replaces the stale socket.
    relay.kill9();
    assert!(
        store.join("admin.sock").exists(),
        "stale socket expected after kill -9"
    );
    let stats: Value = serde_json::from_str(&tool_expect(
        &["stats", "--store-dir", s(&store), "--json"],
        0,
    ))
    .unwrap();
    assert_eq!(stats["live_enrolments"], 0);
    relay.start_again().expect("restart");
    let ok = text(&admin_raw(&store, b"log 1\n"));
    assert!(ok.starts_with("ok\n"), "{ok:?}");
}

/// v1 pairs and v2 enc ads (docs/protocol.md §3) are counted by `stats`, shown by `dump` (each row
/// with its kind), and carried by an online backup and its restore, served again as before.
#[test]
fn enc_ads_of_both_kinds_are_counted_dumped_backed_up_and_restored() {
    use relay_wire::canonical::canonical_json;
    use serde_json::json;
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let relay = relay_at(&store, None);
    let both = Host::enrolled(&relay, "both");
    let only_v2 = Host::enrolled(&relay, "only-v2");
    let asker = Host::enrolled(&relay, "asker");
    both.publish_enc(&relay, &b64(&[1u8; 32])).ok();
    let now = common::now_ms();
    let mut ads = Vec::new();
    for h in [&both, &only_v2] {
        let ad = json!({"v": 2, "type": "enc-ad", "host": h.name, "host_pubkey": h.pubkey(),
            "enc_pub": b64(&[2u8; 32]), "iat": common::iso(now),
            "exp": common::iso(now + 30 * 86_400_000), "extra": "kept"});
        let sig = h.key.sign(canonical_json(&ad).as_bytes());
        let r = h.post_json(&relay, "/v2/relay/enc-key", &json!({"ad": ad, "sig": sig}));
        assert_eq!(r.ok(), json!({"ok": true}));
        ads.push((ad, sig));
    }
    let fetch = |relay: &Relay, h: &Host| {
        let q = h
            .pubkey()
            .replace('+', "%2B")
            .replace('/', "%2F")
            .replace('=', "%3D");
        asker
            .get(relay, &format!("/v2/relay/enc-key?pubkey={q}"))
            .ok()
    };
    let before = [fetch(&relay, &both), fetch(&relay, &only_v2)];
    assert_eq!(before[0]["ad"], ads[0].0);
    assert_eq!(before[1]["ad_sig"], json!(ads[1].1));

    let stats: Value = serde_json::from_str(&tool_expect(
        &["stats", "--store-dir", s(&store), "--json"],
        0,
    ))
    .unwrap();
    assert_eq!(
        (&stats["enc_ads_v1"], &stats["enc_ads_v2"]),
        (&json!(1), &json!(2))
    );
    let human = tool_expect(&["stats", "--store-dir", s(&store)], 0);
    assert!(human.contains("enc ads             1 v1, 2 v2"), "{human}");

    let dump = tool_expect(
        &[
            "dump",
            "--store-dir",
            s(&store),
            "--partition",
            "enc_ads",
            "--json",
        ],
        0,
    );
    let rows: Vec<Value> = dump
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    assert_eq!(rows.len(), 3, "{dump}");
    let v2_rows: Vec<&Value> = rows.iter().filter(|r| r["key"]["kind"] == "v2").collect();
    assert_eq!(v2_rows.len(), 2, "{dump}");
    for (ad, sig) in &ads {
        let row = v2_rows
            .iter()
            .find(|r| r["value"]["host_pubkey"] == ad["host_pubkey"])
            .expect("a v2 row per host");
        assert_eq!(row["value"]["record"], json!(canonical_json(ad)));
        assert_eq!(row["value"]["sig"], json!(sig));
    }
    assert_eq!(
        rows.iter().filter(|r| r["key"]["kind"] == "v1").count(),
        1,
        "{dump}"
    );

    let file = work.path().join("ads.backup");
    tool_expect(&["backup", "--store-dir", s(&store), s(&file)], 0);
    let verified = tool_expect(&["verify", s(&file)], 0);
    assert!(verified.contains("backup OK"), "{verified}");
    let restored = work.path().join("restored");
    tool_expect(&["restore", "--store-dir", s(&restored), s(&file)], 0);
    let seed = std::fs::read_to_string(store.join("relay.key")).unwrap();
    let relay2 = relay_at(&restored, Some(seed.trim()));
    assert_eq!(fetch(&relay2, &both), before[0]);
    assert_eq!(fetch(&relay2, &only_v2), before[1]);
}
