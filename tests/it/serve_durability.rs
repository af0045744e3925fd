//! Durability of `mbx-relay serve` across restarts, crashes and time (docs/protocol.md §3, §4, §6):
//! every accepted item survives `kill -9` with its seq and bytes; epoch, relay key, enrolments and
//! allowlists are kept; a retry is a duplicate with the original seq; a stale heartbeat rotates
//! the epoch; the retention sweep queues a relay-signed expiry notice; rotation moves the queue;
//! another relay key is refused; SIGTERM shuts down cleanly.

use crate::common;

use common::{backend_tests, Backend};

use std::time::Duration;

use common::powercut::Powercut;
use common::{
    assert_rejected, envelope_item, receipt_item, rotation, verify_accept, wait_for, Host, Relay,
    RelayOpts, GENEROUS,
};
use relay_wire::canonical::canonical_json;
use relay_wire::keys::{fingerprint, parse_pubkey, unb64, verify_canonical, SigningKey};
use serde_json::{json, Value};

/// `opts` with the store in `store` on the powercut mount `pc`, when there is one.
fn on_mount(opts: RelayOpts, pc: Option<&Powercut>) -> RelayOpts {
    match pc {
        Some(pc) => opts.store(&pc.path().join("store")),
        None => opts,
    }
}

/// Pull everything queued for `host` (bounded pages).
fn pull_all(relay: &Relay, host: &Host) -> Vec<Value> {
    host.pull_all(relay, 0)
}

fn kill9_restart_keeps_items_seqs_epoch_key_enrolments_and_allowlists(backend: Backend) {
    let mut relay = backend.start(GENEROUS);
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let c = Host::enrolled(&relay, "carol");
    assert_eq!(
        b.publish_senders(&relay, &[a.pubkey()], common::now_ms())
            .ok(),
        json!({"ok": true})
    );
    let (pk, epoch) = (relay.pubkey(), relay.epoch());

    // A batch and some single pushes, plus a two-target item.
    let mut items: Vec<Value> = (0..5).map(|_| envelope_item(&a, &[&b])).collect();
    let batch = a.push_results(&relay, &items);
    let mut accepted: Vec<(Value, Value)> = items.drain(..).zip(batch).collect();
    for _ in 0..3 {
        let it = envelope_item(&a, &[&b]);
        let r = a.push_one(&relay, &it);
        accepted.push((it, r));
    }
    let two = envelope_item(&a, &[&b, &c]);
    let r = a.push_one(&relay, &two);
    accepted.push((two, r));
    let mut seqs_for_b = Vec::new();
    for (it, r) in &accepted {
        assert_eq!(r["status"], json!("accepted"), "{r}");
        let seqs = verify_accept(r, it, &a, &pk, &epoch);
        seqs_for_b.push((seqs[0], it.clone()));
    }

    relay.restart(); // SIGKILL, then the same store and flags

    assert_eq!(relay.pubkey(), pk, "same relay key after kill -9");
    assert_eq!(relay.epoch(), epoch, "a quick restart keeps the epoch");

    // Every accepted item is pullable with the same seq and the same bytes, in seq order.
    let pulled = pull_all(&relay, &b);
    assert_eq!(pulled.len(), seqs_for_b.len(), "pulled: {pulled:?}");
    for (p, (seq, it)) in pulled.iter().zip(&seqs_for_b) {
        assert_eq!(p["seq"], json!(seq));
        assert_eq!(p["item_id"], it["item_id"]);
        assert_eq!(p["kind"], json!("envelope"));
        assert_eq!(p["sender_pubkey"], json!(a.pubkey()));
        assert_eq!(
            p["wire_b64"], it["targets"][0]["wire_b64"],
            "exact wire bytes"
        );
    }
    let carol = pull_all(&relay, &c);
    assert_eq!(carol.len(), 1);

    // A retry of every accepted item is a duplicate carrying the original seqs and time.
    for (it, first) in &accepted {
        let r = a.push_one(&relay, it);
        assert_eq!(r["status"], json!("duplicate"), "{r}");
        let seqs = verify_accept(&r, it, &a, &pk, &epoch);
        let orig: Vec<u64> = first["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seqs, orig, "duplicate reports the original seqs");
        assert_eq!(
            r["accept"]["at"], first["accept"]["at"],
            "duplicate carries the original acceptance time"
        );
    }

    // Enrolments survived (hops still verify, `you` is there) and so did bob's allowlist.
    let me = b.info(&relay);
    assert_eq!(me["you"]["pubkey"], json!(b.pubkey()));
    assert_eq!(me["you"]["head_seq"], json!(seqs_for_b.last().unwrap().0));
    let r = c.push_one(&relay, &envelope_item(&c, &[&b]));
    assert_rejected(&r, "sender not accepted by target");
    let r = c.push_one(&relay, &envelope_item(&c, &[&a]));
    assert_eq!(
        r["status"],
        json!("accepted"),
        "carol is still enrolled and alice has no list: {r}"
    );

    // New seqs continue above the old ones.
    let r = a.push_one(&relay, &envelope_item(&a, &[&b]));
    assert!(r["targets"][0]["seq"].as_u64().unwrap() > seqs_for_b.last().unwrap().0);
}

fn stale_heartbeat_rotates_the_epoch_once_with_one_log_line(backend: Backend) {
    let mut relay = backend.start(&["--heartbeat-stale", "3s"]);
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let it = envelope_item(&a, &[&b]);
    let first = a.push_one(&relay, &it);
    assert_eq!(first["status"], json!("accepted"));
    let epoch1 = relay.epoch();

    // A restart within the stale window keeps the epoch.
    relay.restart();
    assert_eq!(relay.epoch(), epoch1);
    assert!(
        !relay.stderr_log().contains("epoch rotated"),
        "{}",
        relay.stderr_log()
    );

    // Down for longer than --heartbeat-stale: the epoch rotates at startup.
    relay.kill9();
    std::thread::sleep(Duration::from_millis(4_500));
    relay.start_again().expect("restarts");
    let epoch2 = relay.epoch();
    assert_ne!(epoch2, epoch1, "stale heartbeat rotates the epoch");
    assert!(common::is_uuid_v4(&epoch2));
    let log = relay.stderr_log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("epoch rotated"))
        .collect();
    assert_eq!(lines.len(), 1, "one log line saying why: {log}");
    assert!(lines[0].contains("old"), "the line says why: {}", lines[0]);

    // Data is kept under the new epoch; a pull with the old epoch is refused with the current one.
    let r = b.pull(&relay, &format!("?epoch={epoch1}"));
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["epoch"], json!(epoch2));
    let items = b.pull(&relay, &format!("?epoch={epoch2}")).ok();
    assert_eq!(items["items"][0]["item_id"], it["item_id"]);
    // A re-push is still a duplicate (dedup survives), now accepted under the new epoch.
    let r = a.push_one(&relay, &it);
    assert_eq!(r["status"], json!("duplicate"));
    assert_eq!(r["accept"]["epoch"], json!(epoch2));
    assert_eq!(r["targets"], first["targets"]);
}

fn sweep_expires_items_and_queues_a_relay_signed_notice_for_the_sender(backend: Backend) {
    let relay = backend.start(&["--retention", "2s", "--sweep-interval", "1s"]);
    let (relay_pk, epoch) = (relay.pubkey(), relay.epoch());
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let env = envelope_item(&a, &[&b]);
    let r = a.push_one(&relay, &env);
    assert_eq!(r["status"], json!("accepted"));
    let accepted_at = r["accept"]["at"].as_str().unwrap().to_string();
    let rc = receipt_item(&a, &b);
    assert_eq!(a.push_one(&relay, &rc)["status"], json!("accepted"));
    assert_eq!(pull_all(&relay, &b).len(), 2);

    // Within a few sweep intervals both items leave bob's queue and alice gets one notice.
    let notices = wait_for(Duration::from_secs(20), || {
        let mine = pull_all(&relay, &a);
        (!mine.is_empty() && pull_all(&relay, &b).is_empty()).then_some(mine)
    })
    .expect("expiry notice queued for the sender and bob's queue emptied");
    assert_eq!(notices.len(), 1, "receipts expire silently: {notices:?}");
    let n = &notices[0];
    let item_id = env["item_id"].as_str().unwrap();
    assert_eq!(n["kind"], json!("expired"));
    assert_eq!(
        n["item_id"],
        json!(format!("expired:{item_id}:{}", b.pubkey()))
    );
    assert_eq!(n["sender_pubkey"], json!(relay_pk));
    let wire = unb64(n["wire_b64"].as_str().unwrap()).unwrap();
    let doc: Value = serde_json::from_slice(&wire).unwrap();
    assert_eq!(
        String::from_utf8(wire.clone()).unwrap(),
        canonical_json(&doc),
        "wire is canonical JSON"
    );
    let notice = &doc["notice"];
    common::assert_keys(
        notice,
        &[
            "v",
            "type",
            "item_id",
            "target_pubkey",
            "accepted_at",
            "expired_at",
        ],
    );
    assert_eq!(notice["v"], json!(1));
    assert_eq!(notice["type"], json!("relay-expired"));
    assert_eq!(notice["item_id"], json!(item_id));
    assert_eq!(notice["target_pubkey"], json!(b.pubkey()));
    assert_eq!(notice["accepted_at"], json!(accepted_at));
    assert!(common::is_iso_ms(notice["expired_at"].as_str().unwrap()));
    let pk = parse_pubkey(&relay_pk).unwrap();
    assert!(
        verify_canonical(&pk, notice, doc["sig"].as_str().unwrap()),
        "notice signed by the relay key"
    );

    // The dedup row outlives the item (retention + 7 days): a late retry is a duplicate.
    let r = a.push_one(&relay, &env);
    assert_eq!(r["status"], json!("duplicate"), "{r}");
    assert_eq!(r["accept"]["epoch"], json!(epoch));
    assert!(
        pull_all(&relay, &b).is_empty(),
        "a late retry is not re-delivered"
    );
}

fn rotation_moves_the_queue_to_the_new_key(backend: Backend) {
    let relay = backend.start(GENEROUS);
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let items: Vec<Value> = (0..3).map(|_| envelope_item(&a, &[&b])).collect();
    for r in a.push_results(&relay, &items) {
        assert_eq!(r["status"], json!("accepted"));
    }
    let b2 = Host {
        name: b.name.clone(),
        key: SigningKey::generate(),
    };

    // Bad rotations first: unknown old key 404, a record signed by the wrong key 400.
    let stranger = SigningKey::generate();
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("bob", &stranger, &b2.key, None, None),
    );
    assert_eq!(r.status, 404, "{}", r.text());
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("bob", &b.key, &b2.key, Some(&stranger), None),
    );
    assert_eq!(r.status, 400, "{}", r.text());

    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("bob", &b.key, &b2.key, None, None),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json(), json!({"moved": 3}));

    // The new key holds the queue, in order, with the same bytes; the old key is gone.
    let pulled = pull_all(&relay, &b2);
    assert_eq!(pulled.len(), 3);
    let mut last = 0;
    for (p, it) in pulled.iter().zip(&items) {
        assert_eq!(p["item_id"], it["item_id"]);
        assert_eq!(p["wire_b64"], it["targets"][0]["wire_b64"]);
        let seq = p["seq"].as_u64().unwrap();
        assert!(seq > last);
        last = seq;
    }
    assert_eq!(b.pull(&relay, "").status, 401, "the old key is revoked");
    assert_rejected(
        &a.push_one(&relay, &envelope_item(&a, &[&b])),
        "target not enrolled",
    );
    assert_eq!(
        a.push_one(&relay, &envelope_item(&a, &[&b2]))["status"],
        json!("accepted")
    );
    // Dedup rows moved: re-pushing an old item addressed to the new key is a duplicate.
    let moved = common::item(
        "envelope",
        items[0]["item_id"].as_str().unwrap(),
        &[(b2.pubkey(), common::item_wire(&items[0]))],
    );
    let r = a.push_one(&relay, &moved);
    assert_eq!(r["status"], json!("duplicate"), "{r}");
    // Rotating back onto the revoked key is refused.
    let r = relay.post_json(
        "/v2/relay/rotate",
        &rotation("bob", &b2.key, &b.key, None, None),
    );
    assert_eq!(r.status, 409, "{}", r.text());
}

fn another_relay_key_is_refused_without_leaking_key_material(backend: Backend) {
    let mut relay = backend.start(&[]);
    let pk = relay.pubkey();
    let key_file = relay.store_dir().join("relay.key");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&key_file)
            .expect("relay.key written")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "relay.key is owner-only");
    }
    let stored =
        SigningKey::from_key_file(std::fs::read_to_string(&key_file).unwrap().trim()).unwrap();
    assert_eq!(stored.public_b64(), pk);
    relay.terminate(Duration::from_secs(20));

    let other = SigningKey::generate();
    let seed = other.seed_b64();
    let err = match Relay::launch(
        RelayOpts::default()
            .on(backend)
            .same_store(&relay)
            .env("MBX_RELAY_KEY", &seed),
    ) {
        Ok(_) => panic!("a store pinned to another key must refuse to serve"),
        Err(e) => e,
    };
    assert!(
        err.contains(&fingerprint(&other.public())),
        "names the key by fingerprint: {err}"
    );
    assert!(!err.contains(&seed), "never prints key material");
    assert!(
        !err.contains(&other.public_b64()),
        "no raw public key either"
    );

    // A malformed key is refused without echoing it.
    let garbage = "c2VjcmV0LXZhbHVlLXRoYXQtaXMtbm90LWEta2V5";
    let err = match Relay::launch(
        RelayOpts::default()
            .on(backend)
            .same_store(&relay)
            .env("MBX_RELAY_KEY", garbage),
    ) {
        Ok(_) => panic!("a malformed MBX_RELAY_KEY must refuse to serve"),
        Err(e) => e,
    };
    assert!(
        err.contains("MBX_RELAY_KEY"),
        "says which source is bad: {err}"
    );
    assert!(!err.contains(garbage), "never echoes the key: {err}");

    // The JSON key form of the right key (as MBX_RELAY_KEY) is accepted and keeps the identity.
    let json_key =
        json!({"publicKey": stored.public_b64(), "privateKey": stored.seed_b64()}).to_string();
    let again = Relay::launch(
        RelayOpts::default()
            .on(backend)
            .same_store(&relay)
            .env("MBX_RELAY_KEY", &json_key),
    )
    .expect("own key accepted");
    assert_eq!(again.pubkey(), pk);
    assert!(!again.stderr_log().contains(&stored.seed_b64()));
}

fn sigterm_finishes_cleanly_and_releases_the_store(backend: Backend) {
    let mut relay = backend.start(&[]);
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let it = envelope_item(&a, &[&b]);
    assert_eq!(a.push_one(&relay, &it)["status"], json!("accepted"));
    assert_eq!(
        relay.terminate(Duration::from_secs(20)),
        Some(0),
        "clean exit code"
    );
    assert!(
        relay.stderr_log().contains("store closed"),
        "{}",
        relay.stderr_log()
    );
    relay.start_again().expect("the lock was released");
    assert_eq!(pull_all(&relay, &b)[0]["item_id"], it["item_id"]);
}

#[test]
fn keygen_prints_a_seed_and_its_fingerprint() {
    let out = std::process::Command::new(common::BIN)
        .arg("keygen")
        .output()
        .expect("keygen runs");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("{name} in {text}"))
            .to_string()
    };
    let key = SigningKey::from_seed_b64(&field("seed")).expect("seed is a base64 seed");
    assert_eq!(field("fingerprint"), fingerprint(&key.public()));
    assert!(out.stderr.is_empty(), "key material only on stdout");
}

/// Crash windows (spec §5) with real aborts: the relay dies right after the commit (the answer is
/// lost) or right before it; a retry after restart is a duplicate with the same seq, or the first
/// acceptance.
#[cfg(feature = "failpoints")]
fn crash_windows_around_the_push_commit(backend: Backend) {
    push_commit_crash_windows(backend, None);
}

/// The push crash windows; with `pc`, the store is on that powercut mount and the power is cut
/// right after each crash (so what the relay did not make durable is gone too).
#[cfg(feature = "failpoints")]
fn push_commit_crash_windows(backend: Backend, mut pc: Option<&mut Powercut>) {
    let mut boot = Relay::launch(on_mount(backend.opts(GENEROUS), pc.as_deref())).unwrap();
    let a = Host::enrolled(&boot, "alice");
    let b = Host::enrolled(&boot, "bob");
    boot.kill9(); // kept: it names the store (and database) the next relays use

    for (point, expect) in [
        ("relay-after-commit", "duplicate"),
        ("relay-before-commit", "accepted"),
    ] {
        let crashing = Relay::launch(
            backend
                .opts(GENEROUS)
                .same_store(&boot)
                .env("MBX_FAILPOINT", point),
        )
        .unwrap();
        let it = envelope_item(&a, &[&b]);
        let body = json!({ "items": [it] }).to_string();
        assert_no_answer_from_crash(&crashing, &a, "/v2/relay/items", &body, point);
        drop(crashing);
        if let Some(pc) = pc.as_deref_mut() {
            pc.cut();
        }
        let relay = Relay::launch(backend.opts(GENEROUS).same_store(&boot)).unwrap();
        let r = a.push_one(&relay, &it);
        assert_eq!(r["status"], json!(expect), "{point}: {r}");
        let queued: Vec<Value> = pull_all(&relay, &b)
            .into_iter()
            .filter(|p| p["item_id"] == it["item_id"])
            .collect();
        assert_eq!(queued.len(), 1, "{point}: stored exactly once");
        assert_eq!(queued[0]["seq"], r["targets"][0]["seq"]);
    }
}

/// Send one hop-signed POST to a relay armed with a failpoint (raw, `Connection: close`) and
/// assert that it never answered 200: it must abort at the failpoint before replying.
#[cfg(feature = "failpoints")]
fn assert_no_answer_from_crash(relay: &Relay, host: &Host, path: &str, body: &str, point: &str) {
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in host.hop_headers("POST", path, body.as_bytes(), &common::Hop::default()) {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    let raw = common::send_raw(relay.addr(), req.as_bytes()).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&raw).contains(" 200 "),
        "{point}: no answer from a crashed relay"
    );
}

/// The relay dies right after an ack commits (the answer is lost): after restart the acked items
/// are gone, the cursor holds, and the receiver's retry of the same ack succeeds harmlessly.
#[cfg(feature = "failpoints")]
fn crash_after_the_ack_commit_keeps_the_ack(backend: Backend) {
    ack_commit_crash_window(backend, None);
}

/// The ack crash window; with `pc`, on that powercut mount with a power cut after the crash.
#[cfg(feature = "failpoints")]
fn ack_commit_crash_window(backend: Backend, pc: Option<&mut Powercut>) {
    let mut boot = Relay::launch(on_mount(backend.opts(GENEROUS), pc.as_deref())).unwrap();
    let a = Host::enrolled(&boot, "alice");
    let b = Host::enrolled(&boot, "bob");
    let first = a.push_one(&boot, &envelope_item(&a, &[&b]));
    let second = a.push_one(&boot, &envelope_item(&a, &[&b]));
    let epoch = boot.epoch();
    boot.kill9(); // kept: it names the store (and database) the next relays use

    let crashing = Relay::launch(
        backend
            .opts(GENEROUS)
            .same_store(&boot)
            .env("MBX_FAILPOINT", "relay-ack-after-commit"),
    )
    .unwrap();
    let through = first["targets"][0]["seq"].as_u64().unwrap();
    let body = json!({ "epoch": epoch, "through": through }).to_string();
    assert_no_answer_from_crash(
        &crashing,
        &b,
        "/v2/relay/ack",
        &body,
        "relay-ack-after-commit",
    );
    drop(crashing);
    if let Some(pc) = pc {
        pc.cut();
    }

    let relay = Relay::launch(backend.opts(GENEROUS).same_store(&boot)).unwrap();
    let left = pull_all(&relay, &b);
    assert_eq!(left.len(), 1, "the acked item is gone: {left:?}");
    assert_eq!(left[0]["seq"], second["targets"][0]["seq"]);
    let me = b.info(&relay);
    assert_eq!(me["you"]["acked_through"], json!(through));
    let r = b.ack(&relay, &epoch, json!(through)).ok();
    assert_eq!(r["acked_through"], json!(through));
    assert_eq!(r["deleted"], json!(0));
}

fn health_and_metrics_report_requests_items_and_the_queue(backend: Backend) {
    let mut args = GENEROUS.to_vec();
    args.extend(["--metrics-listen", "127.0.0.1:0"]);
    let relay = backend.start(&args);
    let h = relay.get("/health");
    assert_eq!(h.status, 200, "{}", h.text());
    assert_eq!(h.header("cache-control"), Some("no-store"));
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let it = envelope_item(&a, &[&b]);
    assert_eq!(a.push_one(&relay, &it)["status"], json!("accepted"));
    assert_eq!(a.push_one(&relay, &it)["status"], json!("duplicate"));
    let bad = common::item("bogus", "x", &[(b.pubkey(), b"{}".to_vec())]);
    assert_rejected(&a.push_one(&relay, &bad), "bad kind");
    let m = relay.metrics();
    assert_eq!(m.status, 200);
    assert!(m
        .header("content-type")
        .unwrap_or("")
        .starts_with("text/plain"));
    let text = m.text();
    // On a store several processes may share, every series carries `process="<id>"` first.
    let unlabelled = |l: &str| -> String {
        match (l.find("{process=\""), l.find("\",")) {
            (Some(open), Some(end)) if end > open => format!("{}{{{}", &l[..open], &l[end + 2..]),
            _ => match (l.find("{process=\""), l.find("\"}")) {
                (Some(open), Some(end)) if end > open => format!("{}{}", &l[..open], &l[end + 2..]),
                _ => l.to_owned(),
            },
        }
    };
    let value = |prefix: &str| -> f64 {
        text.lines()
            .map(unlabelled)
            .find_map(|l| {
                l.strip_prefix(prefix)
                    .map(|v| v.trim().parse::<f64>().unwrap())
            })
            .unwrap_or_else(|| panic!("{prefix} missing in\n{text}"))
    };
    assert_eq!(value("mbx_relay_items_total{status=\"accepted\"}"), 1.0);
    assert_eq!(value("mbx_relay_items_total{status=\"duplicate\"}"), 1.0);
    assert_eq!(
        value("mbx_relay_items_total{status=\"rejected\",reason=\"bad kind\"}"),
        1.0
    );
    // Group commit at work (fjall: PostgreSQL commits each transaction itself, with no group
    // for the relay to count): the enrolments and the accepted push were made durable by
    // fsync'd groups, each counted with its operations and its fsync time.
    if backend == Backend::Fjall {
        let groups = value("mbx_relay_commit_group_ops_count");
        assert!(groups >= 1.0, "no commit group counted");
        assert!(value("mbx_relay_commit_group_ops_sum") >= groups);
        assert!(value("mbx_relay_fsync_seconds_count") >= groups);
    }
    assert_eq!(value("mbx_relay_commit_groups_failed_total"), 0.0);
    assert_eq!(
        value("mbx_relay_requests_total{method=\"POST\",path=\"/v2/relay/items\",status=\"200\"}"),
        3.0
    );
    assert_eq!(
        value("mbx_relay_requests_total{method=\"GET\",path=\"/health\",status=\"200\"}"),
        1.0
    );
    assert_eq!(value("mbx_relay_queued_items"), 1.0);
    assert_eq!(
        value("mbx_relay_queued_bytes"),
        common::item_wire(&it).len() as f64
    );
    assert!(value("mbx_relay_store_write_seconds_count") >= 1.0);
    assert!(text
        .lines()
        .map(unlabelled)
        .any(|l| l.starts_with("mbx_relay_store_write_seconds_bucket{le=\"+Inf\"}")));
}

fn sigterm_lets_an_in_flight_push_finish(backend: Backend) {
    use std::io::{Read as _, Write as _};
    let mut relay = backend.start(&[]);
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let it = envelope_item(&a, &[&b]);
    let body = json!({ "items": [it] }).to_string();
    let mut head = format!(
        "POST /v2/relay/items HTTP/1.1\r\nHost: relay\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in a.hop_headers(
        "POST",
        "/v2/relay/items",
        body.as_bytes(),
        &common::Hop::default(),
    ) {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut s = std::net::TcpStream::connect(relay.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let (first, rest) = body.as_bytes().split_at(body.len() / 2);
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pid = relay.pid().unwrap();
    // SAFETY: plain kill(2) on our own child's pid.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(rest).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let r = common::parse_response(&answer).expect("the in-flight request is answered");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["results"][0]["status"], json!("accepted"));
    assert_eq!(relay.terminate(Duration::from_secs(20)), Some(0));
    relay.start_again().unwrap();
    assert_eq!(
        pull_all(&relay, &b)[0]["item_id"],
        it["item_id"],
        "the answered item is durable"
    );
}

backend_tests! {
    kill9_restart_keeps_items_seqs_epoch_key_enrolments_and_allowlists,
    stale_heartbeat_rotates_the_epoch_once_with_one_log_line,
    sweep_expires_items_and_queues_a_relay_signed_notice_for_the_sender,
    rotation_moves_the_queue_to_the_new_key,
    another_relay_key_is_refused_without_leaking_key_material,
    sigterm_finishes_cleanly_and_releases_the_store,
    #[cfg(feature = "failpoints")] crash_windows_around_the_push_commit,
    #[cfg(feature = "failpoints")] crash_after_the_ack_commit_keeps_the_ack,
    health_and_metrics_report_requests_items_and_the_queue,
    sigterm_lets_an_in_flight_push_finish,
}

// ---------------------------------------------------------------------------------------------
// Power cuts (powercut: a FUSE filesystem that forgets what was not fsync'd)
// ---------------------------------------------------------------------------------------------

/// The push and ack crash windows with the store on powercut and a power cut after each crash:
/// an answer lost with the crash may not have been durable, but a committed one must be.
#[cfg(feature = "failpoints")]
#[test]
fn power_cut_after_the_push_and_ack_crashes_keeps_what_was_committed() {
    let mut pc = common::powercut_mount(&[]);
    push_commit_crash_windows(Backend::Fjall, Some(&mut pc));
    let mut pc = common::powercut_mount(&[]);
    ack_commit_crash_window(Backend::Fjall, Some(&mut pc));
}

/// Power-loss drill: 8 senders push to one receiver that pulls and acks, while the power is cut
/// 5 times in 30 s (SIGKILL of the relay, a cut, a restart on the same store). Every item a
/// sender got an acceptance (or a duplicate) for reaches the receiver: none is lost.
#[test]
fn power_cut_drill_loses_no_acknowledged_item() {
    power_cut_drill(&[]);
}

/// The drill with torn cuts: each cut keeps a random prefix of unsynced appends (a journal's
/// torn tail) and may zero the end of the last page; and each fsync takes 20 ms to complete, so
/// the cut, made while the relay runs (then SIGKILL), lands between writes and their syncs
/// (issue 37: killed first, the relay's fsyncs in flight complete and most cuts found nothing
/// unsynced): most cuts must drop data. With 5 ms, 2 of 5 cuts found unsynced data once in a
/// full suite run (2026-12-04); 20 ms keeps data unsynced most of the time even on a loaded
/// machine (5 of 5 in two runs, one beside two spinning processes).
#[test]
fn power_cut_drill_with_torn_writes_and_slow_fsyncs_loses_no_acknowledged_item() {
    power_cut_drill(&["--torn", "--seed", "26", "--fsync-delay-ms", "20"]);
}

fn power_cut_drill(powercut_args: &[&str]) {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    const SENDERS: usize = 8;
    const CUTS: usize = 5;
    const EVERY: Duration = Duration::from_secs(6);
    let mut pc = common::powercut_mount(powercut_args);
    let delayed = powercut_args.contains(&"--fsync-delay-ms");
    let mut relay = Relay::launch(on_mount(RelayOpts::args(GENEROUS), Some(&pc))).unwrap();
    let bob = Host::enrolled(&relay, "bob");
    let senders: Vec<Host> = (0..SENDERS)
        .map(|i| Host::enrolled(&relay, &format!("sender{i}")))
        .collect();
    let addr = Arc::new(Mutex::new(relay.addr()));
    let stop = Arc::new(AtomicBool::new(false));
    let acked: Arc<Mutex<HashSet<String>>> = Arc::default();
    let failed_calls = Arc::new(AtomicU64::new(0));

    let mut threads = Vec::new();
    for s in senders {
        let (addr, stop, acked, failed) = (
            addr.clone(),
            stop.clone(),
            acked.clone(),
            failed_calls.clone(),
        );
        let target = Host {
            name: bob.name.clone(),
            key: SigningKey::from_seed_b64(&bob.key.seed_b64()).unwrap(),
        };
        threads.push(std::thread::spawn(move || {
            // One item at a time, retried until acknowledged, as a sender's outbox does.
            while !stop.load(Ordering::Relaxed) {
                let it = envelope_item(&s, &[&target]);
                let body = json!({ "items": [it] }).to_string();
                while !stop.load(Ordering::Relaxed) {
                    let at = *addr.lock().unwrap();
                    match s.try_call_at(at, "POST", "/v2/relay/items", body.as_bytes()) {
                        Ok(r) if r.status == 200 => {
                            let st = r.json()["results"][0]["status"].clone();
                            assert!(
                                st == json!("accepted") || st == json!("duplicate"),
                                "{}",
                                r.text()
                            );
                            acked
                                .lock()
                                .unwrap()
                                .insert(it["item_id"].as_str().unwrap().to_string());
                            break;
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                            std::thread::sleep(Duration::from_millis(20));
                        }
                    }
                }
            }
        }));
    }
    let received: Arc<Mutex<HashSet<String>>> = Arc::default();
    let receive = {
        let (addr, stop, received) = (addr.clone(), stop.clone(), received.clone());
        let bob = Host {
            name: bob.name.clone(),
            key: SigningKey::from_seed_b64(&bob.key.seed_b64()).unwrap(),
        };
        std::thread::spawn(move || {
            // Pull from the start and ack what was pulled; stops after a pull that came back
            // empty once the senders are done.
            let mut drained_after_stop = false;
            while !drained_after_stop {
                let done = stop.load(Ordering::Relaxed);
                let at = *addr.lock().unwrap();
                let Ok(p) = bob.try_call_at(at, "GET", "/v2/relay/items?after=0", b"") else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                if p.status != 200 {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let page = p.json();
                let items = page["items"].as_array().cloned().unwrap_or_default();
                if items.is_empty() {
                    drained_after_stop = done;
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                }
                let mut got = received.lock().unwrap();
                for i in &items {
                    got.insert(i["item_id"].as_str().unwrap().to_string());
                }
                drop(got);
                let ack = json!({"epoch": page["epoch"], "through": page["last_seq"]}).to_string();
                let _ = bob.try_call_at(at, "POST", "/v2/relay/ack", ack.as_bytes());
            }
        })
    };

    let started = Instant::now();
    let mut unsynced = Vec::new();
    for n in 1..=CUTS {
        std::thread::sleep((EVERY * n as u32).saturating_sub(started.elapsed()));
        unsynced.push(if delayed {
            relay.power_cut_while_running(&mut pc)
        } else {
            relay.power_cut(&mut pc)
        });
        *addr.lock().unwrap() = relay.addr();
    }
    let biting = unsynced.iter().filter(|b| **b > 0).count();
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("sender thread");
    }
    receive.join().expect("receiver thread");
    let acked = acked.lock().unwrap().clone();
    let received = received.lock().unwrap().clone();
    let lost: Vec<&String> = acked.difference(&received).collect();
    eprintln!(
        "power-cut drill {powercut_args:?}: {} cuts in {:.1} s ({biting} found unsynced data: \
         {unsynced:?} bytes), {} items acknowledged, {} received, {} lost, {} calls failed while \
         the relay was down",
        CUTS,
        started.elapsed().as_secs_f64(),
        acked.len(),
        received.len(),
        lost.len(),
        failed_calls.load(Ordering::Relaxed)
    );
    assert!(
        acked.len() > 100,
        "the drill pushed too little to mean anything: {}",
        acked.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged but lost after power cuts: {lost:?}\n{}",
        relay.stderr_log()
    );
    if delayed {
        assert!(
            biting * 2 > CUTS,
            "most cuts must land before data was synced: {unsynced:?}"
        );
    }
}

/// Backup while serving, then a power cut: once `relay-tool backup` has returned, its file (on
/// the same powercut mount) is complete under its name and verifies, and it restores.
#[test]
fn a_backup_that_returned_survives_a_power_cut_and_restores() {
    let mut pc = common::powercut_mount(&[]);
    let seed = SigningKey::generate().seed_b64();
    let opts = RelayOpts::args(GENEROUS).env("MBX_RELAY_KEY", &seed);
    let mut relay = Relay::launch(on_mount(opts.clone(), Some(&pc))).unwrap();
    let a = Host::enrolled(&relay, "alice");
    let b = Host::enrolled(&relay, "bob");
    let items: Vec<Value> = (0..20).map(|_| envelope_item(&a, &[&b])).collect();
    for r in a.push_results(&relay, &items) {
        assert_eq!(r["status"], json!("accepted"));
    }
    let before = pull_all(&relay, &b);
    let file = pc.path().join("backups").join("relay.mbxbak");
    std::fs::create_dir(file.parent().unwrap()).unwrap();
    // The directory's name must be durable too: the backup does not create it.
    std::fs::File::open(pc.path()).unwrap().sync_all().unwrap();
    let store = relay.store_dir().to_str().unwrap().to_string();
    let out = common::relay_tool(&["backup", "--store-dir", &store, file.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "backup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    relay.power_cut(&mut pc);

    assert!(file.exists(), "the backup's name was lost in the cut");
    let out = common::relay_tool(&["verify", file.to_str().unwrap()]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("backup OK"),
        "verify after the cut: {} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let restored = pc.path().join("restored");
    let out = common::relay_tool(&[
        "restore",
        "--store-dir",
        restored.to_str().unwrap(),
        file.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A cut after the restore returned keeps the restored store (before the lsm-tree patch,
    // vendor/lsm-tree/PATCHES.md, its blob files' names were lost and fjall refused it).
    drop(relay);
    let mut back = Relay::launch(opts.store(&restored)).expect("serves the restore");
    back.power_cut(&mut pc);
    let after = pull_all(&back, &b);
    assert_eq!(after.len(), before.len());
    for (x, y) in after.iter().zip(&before) {
        assert_eq!(
            (&x["item_id"], &x["seq"], &x["wire_b64"]),
            (&y["item_id"], &y["seq"], &y["wire_b64"])
        );
    }
}
