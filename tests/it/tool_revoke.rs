//! `relay-tool revoke` and `relay-tool purge` against real `mbx-relay serve` processes: online
//! while other hosts push and pull (the revoked key's very next hop is 401, its queue is gone,
//! each sender of a purged envelope gets exactly one relay-signed expiry notice, everyone else
//! is unaffected), a real `mbx-relay host` sender ending its row `expired` with an alert, a
//! kill -9 inside the purge leaving all or nothing, fingerprint prefixes (ambiguous, unknown),
//! and the offline path (works on a stopped store, refused while a relay holds it).

use crate::common;

use common::{backend_tests, Backend};

use crate::host_util;
use common::relay_tool_env as tool_env;

use std::path::Path;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use common::{envelope_item, Host, Relay, RelayOpts, GENEROUS};
use relay_wire::keys::{fingerprint, parse_pubkey, unb64, verify_canonical};
use serde_json::Value;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Run, require exit code `code`; returns (stdout, stderr).
fn tool_exit(args: &[&str], code: i32) -> (String, String) {
    let out = tool_env(args, &[]);
    let (o, e) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(
        out.status.code(),
        Some(code),
        "relay-tool {args:?}\nstdout:\n{o}\nstderr:\n{e}"
    );
    (o, e)
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn urlencode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Push one envelope from `from` to `to`; returns its item id (asserts it was accepted).
fn push_envelope(relay: &Relay, from: &Host, to: &Host) -> String {
    let item = envelope_item(from, &[to]);
    let r = from.push_one(relay, &item);
    assert_eq!(r["status"], "accepted", "{r}");
    item["item_id"].as_str().expect("item_id").to_string()
}

/// The items of `kind` in a pull.
fn of_kind(items: &[Value], kind: &str) -> Vec<Value> {
    items
        .iter()
        .filter(|i| i["kind"] == kind)
        .cloned()
        .collect()
}

/// Check one pulled expiry notice: relay-signed, for `item_id` to `target`.
fn assert_signed_notice(notice: &Value, relay_pub: &str, item_id: &str, target: &Host) {
    assert_eq!(notice["sender_pubkey"], relay_pub, "{notice}");
    assert_eq!(
        notice["item_id"],
        format!("expired:{item_id}:{}", target.pubkey()),
        "{notice}"
    );
    let wire = unb64(notice["wire_b64"].as_str().expect("wire_b64")).expect("base64");
    let body: Value = serde_json::from_slice(&wire).expect("notice json");
    let pk = parse_pubkey(relay_pub).expect("relay key");
    assert!(
        verify_canonical(&pk, &body["notice"], body["sig"].as_str().expect("sig")),
        "the notice verifies under the relay key: {body}"
    );
    assert_eq!(body["notice"]["type"], "relay-expired");
    assert_eq!(body["notice"]["item_id"], item_id);
    assert_eq!(body["notice"]["target_pubkey"], target.pubkey());
}

/// The newest relay-log entry, as JSON.
fn newest_log_entry(store: &Path) -> Value {
    let (out, _) = tool_exit(
        &["log", "--store-dir", s(store), "--limit", "1", "--json"],
        0,
    );
    serde_json::from_str(out.lines().next().expect("one entry")).expect("json")
}

fn revoke_purge_online_refuses_the_next_hop_and_tells_each_sender_once(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let relay_pub = relay.pubkey();
    let (t, a, b) = (
        Host::enrolled(&relay, "target"),
        Host::enrolled(&relay, "alice"),
        Host::enrolled(&relay, "bob"),
    );
    assert_eq!(t.publish_enc(&relay, "enc-target").status, 200);
    assert_eq!(
        t.publish_senders(&relay, &[a.pubkey(), b.pubkey()], common::now_ms())
            .status,
        200
    );
    assert_eq!(
        a.publish_senders(&relay, &[t.pubkey(), b.pubkey()], common::now_ms())
            .status,
        200
    );
    let enc_path = format!("/v2/relay/enc-key?pubkey={}", urlencode(&t.pubkey()));
    assert_eq!(a.get(&relay, &enc_path).status, 200, "enc ad published");
    let from_a = push_envelope(&relay, &a, &t);
    let from_b = push_envelope(&relay, &b, &t);

    // Other hosts keep pushing and pulling throughout.
    let (c, d) = (
        Host::enrolled(&relay, "carol"),
        Host::enrolled(&relay, "dave"),
    );
    let epoch = relay.epoch();
    let stop = AtomicBool::new(false);
    let pushed = AtomicU64::new(0);
    let received = std::thread::scope(|scope| {
        let traffic = scope.spawn(|| {
            let mut after = 0;
            let mut got = 0u64;
            while !stop.load(Ordering::Relaxed) {
                push_envelope(&relay, &c, &d);
                pushed.fetch_add(1, Ordering::Relaxed);
                let page = d.pull(&relay, &format!("?after={after}")).ok();
                got += page["items"].as_array().map_or(0, |i| i.len() as u64);
                after = page["last_seq"].as_u64().expect("last_seq");
                // Acked as a host would, so the sender's share never fills however long this runs.
                d.ack(&relay, &epoch, after.into()).ok();
            }
            got + d.pull_all(&relay, after).len() as u64
        });
        std::thread::sleep(Duration::from_millis(300));
        let fp = fingerprint(&t.key.public());
        let (out, _) = tool_exit(
            &[
                "revoke",
                "--store-dir",
                s(relay.store_dir()),
                &fp[..9],
                "--purge",
                "--reason",
                "stolen laptop",
            ],
            0,
        );
        assert!(
            out.starts_with(&format!(
                "revoked {fp} (target): 1 allowlists changed, 2 items"
            )) && out.contains("2 expiry notices queued")
                && out.contains("through the running relay"),
            "{out}"
        );
        // The very next hop of the revoked key is refused.
        t.pull(&relay, "").assert_error(401, "bad relay hop");
        std::thread::sleep(Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        traffic.join().expect("traffic thread")
    });
    assert!(pushed.load(Ordering::Relaxed) > 0);
    assert_eq!(
        received,
        pushed.load(Ordering::Relaxed),
        "every envelope between the other hosts was delivered"
    );

    // Enrol again: 403 REVOKED. Its enc ad is gone; pushes to it are refused.
    let again = t.try_enrol(&relay, "owner");
    assert_eq!(again.status, 403, "{}", again.text());
    assert_eq!(again.json()["code"], "REVOKED");
    assert_ne!(a.get(&relay, &enc_path).status, 200, "enc ad gone");
    let late = a.push_one(&relay, &envelope_item(&a, &[&t]));
    assert_eq!(late["status"], "rejected:target not enrolled", "{late}");

    // Each sender got exactly one signed notice; nothing else.
    for (sender, id) in [(&a, &from_a), (&b, &from_b)] {
        let items = sender.pull_all(&relay, 0);
        let notices = of_kind(&items, "expired");
        assert_eq!(notices.len(), 1, "{items:?}");
        assert_signed_notice(&notices[0], &relay_pub, id, &t);
    }
    // alice's allowlist no longer names it (the stored list keeps bob).
    let (dump, _) = tool_exit(
        &[
            "dump",
            "--store-dir",
            s(relay.store_dir()),
            "--partition",
            "sender_index",
            "--json",
        ],
        0,
    );
    assert!(
        !dump.contains(&t.pubkey()) && !dump.contains(&fingerprint(&t.key.public())),
        "no sender_index row names the revoked key:\n{dump}"
    );
    let entry = newest_log_entry(relay.store_dir());
    assert_eq!(entry["kind"], "revoke", "{entry}");
    let detail = entry["detail"].as_str().expect("detail");
    assert!(
        detail.contains("2 items")
            && detail.contains("2 notices")
            && detail.contains(&format!("uid {}", my_uid()))
            && detail.contains("reason: stolen laptop"),
        "{detail}"
    );

    // Purging again is harmless: nothing queued, nobody told twice.
    let (out, _) = tool_exit(
        &[
            "revoke",
            "--store-dir",
            s(relay.store_dir()),
            &t.pubkey(),
            "--purge",
            "--json",
        ],
        0,
    );
    let v: Value = serde_json::from_str(out.trim()).expect("json");
    assert_eq!(v["already_revoked"], true);
    assert_eq!(
        (v["purged_items"].as_u64(), v["notices"].as_u64()),
        (Some(0), Some(0))
    );
    relay.assert_alive();
}

fn purge_drops_a_queue_and_keeps_the_key_live(backend: Backend) {
    let relay = backend.start_generous(&[]);
    let (t, a) = (
        Host::enrolled(&relay, "target"),
        Host::enrolled(&relay, "alice"),
    );
    let id = push_envelope(&relay, &a, &t);
    push_envelope(&relay, &a, &t);
    let (out, _) = tool_exit(
        &[
            "purge",
            "--store-dir",
            s(relay.store_dir()),
            &t.pubkey(),
            "--reason",
            "abusive volume",
        ],
        0,
    );
    assert!(
        out.starts_with("purged ") && out.contains("2 items") && out.contains("2 expiry notices"),
        "{out}"
    );
    let page = t.pull(&relay, "").ok();
    assert_eq!(page["items"].as_array().map(Vec::len), Some(0), "{page}");
    let notices = of_kind(&a.pull_all(&relay, 0), "expired");
    assert_eq!(notices.len(), 2);
    assert!(notices
        .iter()
        .any(|n| n["item_id"] == format!("expired:{id}:{}", t.pubkey())));
    // Still live: mail to it is accepted again.
    push_envelope(&relay, &a, &t);
    let entry = newest_log_entry(relay.store_dir());
    assert_eq!(entry["kind"], "purge");
    assert!(
        entry["detail"]
            .as_str()
            .is_some_and(|d| d.contains("reason: abusive volume") && d.contains("2 items")),
        "{entry}"
    );
}

#[test]
fn a_host_whose_mail_is_purged_ends_its_row_expired_with_an_alert() {
    use host_util::{pair, RelayProc};
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync(); // enrols beta
    let id = a.send("beta", "never read", "x");
    assert_eq!(a.sync()["relay_accepted"], 1);
    let beta = parse_pubkey(&b.pubkey()).expect("key");
    tool_exit(
        &[
            "revoke",
            "--store-dir",
            s(&relay.store),
            &fingerprint(&beta),
            "--purge",
        ],
        0,
    );
    assert_eq!(a.sync()["expired"], 1);
    let st = a.status();
    assert_eq!(st["outbox"]["envelope_expired"], 1, "{st}");
    let alerts = st["alerts"].as_array().expect("alerts");
    assert_eq!(alerts.len(), 1, "{st}");
    let alert = alerts[0]["text"].as_str().expect("text");
    assert!(
        alert.contains("Undelivered to beta") && alert.contains(&id),
        "{alert}"
    );
}

#[test]
fn a_kill_inside_the_purge_leaves_the_whole_queue_and_the_key_live() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let mut args: Vec<String> = GENEROUS.iter().map(|a| a.to_string()).collect();
    args.push("--max-queue-items".into());
    args.push("100".into());
    let opts = RelayOpts {
        args,
        ..Default::default()
    }
    .store(&store);
    let mut armed =
        Relay::launch(opts.clone().env("MBX_FAILPOINT", "revoke-mid-purge")).expect("relay starts");
    let (t, a) = (
        Host::enrolled(&armed, "target"),
        Host::enrolled(&armed, "alice"),
    );
    for _ in 0..5 {
        push_envelope(&armed, &a, &t);
    }
    let (_, err) = tool_exit(
        &["revoke", "--store-dir", s(&store), &t.pubkey(), "--purge"],
        1,
    );
    assert!(!err.is_empty());
    assert!(
        armed.stderr_log().contains("failpoint revoke-mid-purge"),
        "the relay died inside the purge"
    );
    armed.kill9();
    drop(armed);

    let relay = Relay::launch(opts).expect("relay restarts");
    // Nothing happened: the key is live, its whole queue is there, nobody was told.
    let items = t.pull_all(&relay, 0);
    assert_eq!(items.len(), 5, "{items:?}");
    assert!(of_kind(&a.pull_all(&relay, 0), "expired").is_empty());
    let (stats, _) = tool_exit(&["stats", "--store-dir", s(&store), "--json"], 0);
    let stats: Value = serde_json::from_str(stats.trim()).expect("json");
    assert_eq!(stats["live_enrolments"], 2, "{stats}");

    // All: the same command without the failpoint does everything at once.
    tool_exit(
        &["revoke", "--store-dir", s(&store), &t.pubkey(), "--purge"],
        0,
    );
    t.pull(&relay, "").assert_error(401, "bad relay hop");
    assert_eq!(of_kind(&a.pull_all(&relay, 0), "expired").len(), 5);
    let (stats, _) = tool_exit(&["stats", "--store-dir", s(&store), "--json"], 0);
    let stats: Value = serde_json::from_str(stats.trim()).expect("json");
    assert_eq!(stats["live_enrolments"], 1, "{stats}");
    assert_eq!(stats["revoked_enrolments"], 1, "{stats}");
}

/// Two keys whose fingerprints share their first four hex digits (searched offline).
fn two_hosts_sharing_a_prefix() -> (Host, Host, String) {
    let mut seen = std::collections::HashMap::new();
    for n in 0..100_000 {
        let h = Host::new(&format!("h{n}"));
        let prefix = fingerprint(&h.key.public())[..4].to_string();
        if let Some(other) = seen.remove(&prefix) {
            return (other, h, prefix);
        }
        seen.insert(prefix, h);
    }
    panic!("no shared 4-digit prefix among 100,000 keys");
}

fn an_ambiguous_fingerprint_is_refused_with_the_candidates_and_an_unknown_one_clearly(
    backend: Backend,
) {
    let relay = backend.start_generous(&[]);
    let (x, y, prefix) = two_hosts_sharing_a_prefix();
    x.enrol(&relay);
    y.enrol(&relay);
    let dir = relay.store_dir();
    let (_, err) = tool_exit(&["revoke", "--store-dir", s(dir), &prefix], 1);
    assert!(
        err.contains(&format!("fingerprint {prefix} matches several keys"))
            && err.contains(&format!(
                "{} ({}, live)",
                fingerprint(&x.key.public()),
                x.name
            ))
            && err.contains(&format!(
                "{} ({}, live)",
                fingerprint(&y.key.public()),
                y.name
            )),
        "{err}"
    );
    // Nothing changed: both still authenticate.
    assert_eq!(x.pull(&relay, "").status, 200);
    assert_eq!(y.pull(&relay, "").status, 200);
    // One more digit (or the whole fingerprint) picks one.
    let fx = fingerprint(&x.key.public());
    tool_exit(&["revoke", "--store-dir", s(dir), &fx], 0);
    x.pull(&relay, "").assert_error(401, "bad relay hop");
    assert_eq!(y.pull(&relay, "").status, 200);

    let unknown = if fx.starts_with("ffff") {
        "0000-0000"
    } else {
        "ffff-ffff"
    };
    let taken = [&x, &y]
        .iter()
        .any(|h| fingerprint(&h.key.public()).starts_with(unknown));
    assert!(!taken);
    let (_, err) = tool_exit(&["purge", "--store-dir", s(dir), unknown], 1);
    assert!(
        err.contains(&format!("no enrolled key has fingerprint {unknown}")),
        "{err}"
    );
    // A KEY that is neither a key nor a fingerprint is a usage error (exit 2), like `revoke 1`.
    let (_, err) = tool_exit(&["revoke", "--store-dir", s(dir), "zz"], 2);
    assert!(err.contains("neither a host key"), "{err}");
    let (_, err) = tool_exit(&["revoke", "--store-dir", s(dir), "1"], 2);
    assert!(err.contains("neither a host key"), "{err}");
    let (_, err) = tool_exit(
        &[
            "revoke",
            "--store-dir",
            s(dir),
            &fx,
            "--reason",
            &"x".repeat(201),
        ],
        2,
    );
    assert!(err.contains("longer than 200"), "{err}");
}

#[test]
fn offline_revoke_works_on_a_stopped_store_and_is_refused_while_the_relay_holds_it() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    let opts = RelayOpts {
        args: GENEROUS.iter().map(|a| a.to_string()).collect(),
        ..Default::default()
    }
    .store(&store);
    let mut relay = Relay::launch(opts.clone()).expect("relay starts");
    let relay_pub = relay.pubkey();
    let (t, a) = (
        Host::enrolled(&relay, "target"),
        Host::enrolled(&relay, "alice"),
    );
    let id = push_envelope(&relay, &a, &t);

    // A relay holds the store but its socket does not answer: refused, nothing changed.
    let sock = store.join("admin.sock");
    let moved = work.path().join("admin.sock.away");
    std::fs::rename(&sock, &moved).expect("move the socket away");
    let (_, err) = tool_exit(
        &["revoke", "--store-dir", s(&store), &t.pubkey(), "--purge"],
        4,
    );
    assert!(
        err.contains("refusing to revoke") && err.contains("stop the relay first"),
        "{err}"
    );
    assert_eq!(t.pull(&relay, "").status, 200);
    std::fs::rename(&moved, &sock).expect("socket back");

    assert_eq!(relay.terminate(Duration::from_secs(20)), Some(0));
    let (out, _) = tool_exit(
        &[
            "revoke",
            "--store-dir",
            s(&store),
            &t.pubkey(),
            "--purge",
            "--reason",
            "offline",
        ],
        0,
    );
    assert!(
        out.contains("1 items") && out.contains("1 expiry notices") && out.contains("(offline;"),
        "{out}"
    );
    let entry = newest_log_entry(&store);
    assert_eq!(entry["kind"], "revoke");
    assert!(
        entry["detail"].as_str().is_some_and(
            |d| d.contains(&format!("uid {}", my_uid())) && d.contains("reason: offline")
        ),
        "{entry}"
    );

    relay.start_again().expect("relay restarts");
    t.pull(&relay, "").assert_error(401, "bad relay hop");
    let notices = of_kind(&a.pull_all(&relay, 0), "expired");
    assert_eq!(notices.len(), 1);
    assert_signed_notice(&notices[0], &relay_pub, &id, &t);
}

backend_tests! {
    a_push_whose_body_ends_after_a_revocation_is_refused_as_a_revoked_hop,
    revoke_purge_online_refuses_the_next_hop_and_tells_each_sender_once,
    purge_drops_a_queue_and_keeps_the_key_live,
    an_ambiguous_fingerprint_is_refused_with_the_candidates_and_an_unknown_one_clearly,
}

/// Issue 24 item 4: a push whose hop (key live) was checked before a revocation and whose body
/// ends after it is refused at the commit with what a revoked key's hop gets
/// (`401 {"error":"bad relay hop"}`), and nothing of it is queued. Before the fix it was accepted.
fn a_push_whose_body_ends_after_a_revocation_is_refused_as_a_revoked_hop(backend: Backend) {
    use std::io::Write as _;
    let relay = backend.start_generous(&[]);
    let (s_host, t) = (
        Host::enrolled(&relay, "sender"),
        Host::enrolled(&relay, "target"),
    );
    let body = serde_json::to_vec(&serde_json::json!({ "items": [envelope_item(&s_host, &[&t])] }))
        .expect("json");
    let path = "/v2/relay/items";
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        relay.addr(),
        body.len()
    );
    for (k, v) in s_host.hop_headers("POST", path, &body, &Default::default()) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut conn = std::net::TcpStream::connect(relay.addr()).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let half = body.len() / 2;
    conn.write_all(head.as_bytes()).expect("head");
    conn.write_all(&body[..half]).expect("half the body");
    std::thread::sleep(Duration::from_millis(300));
    let store = relay.store_dir().to_path_buf();
    tool_exit(&["revoke", "--store-dir", s(&store), &s_host.pubkey()], 0);
    conn.write_all(&body[half..]).expect("the rest");
    let r = common::read_one_response(&mut conn).expect("an answer");
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.text(), r#"{"error":"bad relay hop"}"#);
    assert!(t.pull_all(&relay, 0).is_empty(), "nothing was queued");
    relay.assert_alive();
}
