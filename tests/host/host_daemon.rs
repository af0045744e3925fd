//! `mbx-relay host run` as real processes: two daemons exchange mail through relay crashes, `send`
//! and the read commands reach a running daemon over its socket, other commands get a clear
//! refusal, `doctor` runs beside a daemon, the daemon's log lines carry their time, and
//! SIGTERM/SIGINT stop a daemon promptly with exit code 0; two daemons on
//! `powercut` exchange mail exactly once through power cuts.

use crate::daemon_util;
use crate::host_util;

use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use daemon_util::{wait_until, Daemon, ReferenceProxy};
use host_util::{pair, paired, HostCli, RelayProc};
use relay_testkit::powercut::Powercut;

fn inbox_ids(h: &HostCli) -> Vec<String> {
    h.inbox_ids()
}

#[test]
fn two_daemons_exchange_200_messages_exactly_once_through_two_relay_sigkills() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    let _da = Daemon::start(&a, &["--poll-secs", "1"]);
    let _db = Daemon::start(&b, &["--poll-secs", "1"]);

    let (mut to_b, mut to_a) = (BTreeSet::new(), BTreeSet::new());
    for i in 0..100 {
        if i == 35 || i == 70 {
            relay.kill9();
            // Sends while the relay is down are queued by the daemons and pushed later.
            to_b.insert(a.send("beta", "down", &format!("a{i} while down")));
            std::thread::sleep(Duration::from_millis(300));
            relay.spawn(None);
        }
        to_b.insert(a.send("beta", "s", &format!("a{i}")));
        to_a.insert(b.send("alpha", "s", &format!("b{i}")));
    }
    assert_eq!((to_b.len(), to_a.len()), (102, 100));

    let settled = |h: &HostCli, n: u64| h.count("envelope_done") == n;
    let ok = wait_until(Duration::from_secs(60), || {
        inbox_ids(&b).len() == to_b.len()
            && inbox_ids(&a).len() == to_a.len()
            && settled(&a, to_b.len() as u64)
            && settled(&b, to_a.len() as u64)
    });
    let (sa, sb) = (a.status(), b.status());
    assert!(ok, "not settled in time:\nalpha {sa}\nbeta {sb}");
    // Exactly once: the inboxes hold the sent ids, each once, nothing else, nothing refused.
    let got_b: Vec<String> = inbox_ids(&b);
    let got_a: Vec<String> = inbox_ids(&a);
    assert_eq!(got_b.iter().cloned().collect::<BTreeSet<_>>(), to_b);
    assert_eq!(got_a.iter().cloned().collect::<BTreeSet<_>>(), to_a);
    assert_eq!((got_b.len(), got_a.len()), (to_b.len(), to_a.len()));
    for s in [&sa, &sb] {
        assert_eq!(s["quarantine"], 0, "{s}");
        assert_eq!(s["alerts"].as_array().unwrap().len(), 0, "{s}");
    }
}

#[test]
fn send_reaches_a_running_daemon_and_other_commands_name_its_pid() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    let mut da = Daemon::start(&a, &["--poll-secs", "1"]);
    let sock = std::fs::symlink_metadata(a.dir.join("daemon.sock")).unwrap();
    assert_eq!(
        sock.permissions().mode() & 0o777,
        0o600,
        "owner-only socket"
    );

    // send goes through the daemon: queued durably, pushed by the daemon without any sync.
    let id = a.send("beta", "via daemon", "hello");
    assert!(wait_until(Duration::from_secs(10), || a
        .count("envelope_relay-accepted")
        == 1));
    // A refused send (unknown peer) is refused by the daemon as bad usage, exit code 2.
    let out = a.run_fp(
        &["send", "--to", "gamma", "--subject", "x", "--body", "y"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a pinned peer"));
    // Commands the daemon does not serve get a clear error naming it, not a lock error.
    for cmd in [&["sync"][..], &["run"][..], &["peer", "add", "x", "y"][..]] {
        let err = a.run(cmd).unwrap_err();
        assert!(
            err.contains(&format!("a host daemon is running (pid {})", da.pid)),
            "{cmd:?}: {err}"
        );
    }
    // The read commands are served by the daemon.
    assert_eq!(a.status()["name"], "alpha");
    assert_eq!(a.ok(&["quarantine"])["items"].as_array().unwrap().len(), 0);
    b.sync();
    assert_eq!(b.inbox_ids(), vec![id.clone()]);

    // After a SIGKILL the stale socket does not stand in the way: send works directly.
    da.kill9();
    assert!(a.dir.join("daemon.sock").exists());
    let id2 = a.send("beta", "direct", "no daemon");
    assert_eq!(a.count("envelope_draft"), 1);
    a.sync();
    b.sync();
    let got: BTreeSet<String> = b.inbox_ids().into_iter().collect();
    assert_eq!(got, BTreeSet::from([id, id2]));
}

/// The `checks` of a `host doctor --json` answer, by name: (ok, detail).
fn doctor_checks(v: &serde_json::Value) -> std::collections::BTreeMap<String, (bool, String)> {
    v["checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no checks: {v}"))
        .iter()
        .map(|c| {
            let name = c["check"].as_str().unwrap().to_owned();
            let detail = c["detail"].as_str().unwrap_or_default().to_owned();
            (name, (c["ok"] == true, detail))
        })
        .collect()
}

#[test]
fn doctor_diagnoses_beside_a_running_daemon_and_the_daemon_log_lines_carry_timestamps() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, _b) = paired(tmp.path(), &relay);
    let started = relay_wire::time::iso_ms(mbx_host::now_ms() - 1_000);
    let log = tmp.path().join("alpha-daemon.log");
    let mut da = Daemon::start_logged(&a, &["--poll-secs", "1"], &log);

    // Every check runs while the daemon holds the store: the store read through its socket.
    let v = a
        .run(&["doctor"])
        .unwrap_or_else(|e| panic!("doctor beside the daemon: {e}"));
    assert_eq!(v["ok"], true, "{v}");
    let checks = doctor_checks(&v);
    let (ok, detail) = &checks["host daemon"];
    assert!(
        *ok && detail.contains(&format!("pid {}", da.pid)),
        "{detail}"
    );
    for name in [
        "store permissions",
        "relay reachable",
        "relay key",
        "enrolment",
        "allowlist",
        "clock",
    ] {
        assert!(checks.get(name).is_some_and(|c| c.0), "{name}: {v}");
    }
    // The daemon still serves: a send after the diagnosis is pushed.
    a.send("beta", "after doctor", "still here");
    assert!(wait_until(Duration::from_secs(10), || a
        .count("envelope_relay-accepted")
        == 1));

    // With the relay gone, doctor says so (exit 1) beside the daemon, which logs the outage and
    // the return with the time of each.
    relay.kill9();
    let out = a.run_fp(&["doctor"], None);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let checks = doctor_checks(&v);
    assert!(checks["host daemon"].0, "{v}");
    assert!(!checks["relay reachable"].0, "{v}");
    // The relay comes back only once the daemon has noticed the outage (else a watcher between
    // two pulls might never see it).
    let logged = |what: &str| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains(what)
    };
    assert!(
        wait_until(Duration::from_secs(30), || logged("retrying")),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    relay.spawn(None);
    // The watcher retries with a jittered backoff capped at 30 s (`watch::reconnect_delay`): the
    // connection refusals while the relay was down may have grown it to the cap.
    assert!(
        wait_until(Duration::from_secs(75), || std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("answers again")),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let (st, _) = da.stop_with(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(st.code(), Some(0));
    let ended = relay_wire::time::iso_ms(mbx_host::now_ms() + 1_000);
    let text = std::fs::read_to_string(&log).unwrap();
    for want in [
        "host daemon: started (pid",
        "retrying",
        "answers again",
        "host daemon: stopped after",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    for line in text.lines() {
        let (at, rest) = line.split_once(' ').unwrap_or(("", line));
        assert!(
            relay_wire::time::parse_iso_strict(at).is_some()
                && started.as_str() <= at
                && at <= ended.as_str()
                && rest.starts_with("host daemon: "),
            "a log line without its time: {line:?}"
        );
    }
}

#[test]
fn sigterm_and_sigint_stop_the_daemon_promptly_with_exit_code_0() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, _b) = paired(tmp.path(), &relay);
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let mut d = Daemon::start(&a, &[]);
        // Let the watcher's first pull (a held one, on a relay that holds) be in flight.
        std::thread::sleep(Duration::from_millis(300));
        let (st, took) = d.stop_with(sig, Duration::from_secs(10));
        assert_eq!(st.code(), Some(0), "signal {sig}: {st:?}");
        assert!(took < Duration::from_secs(2), "signal {sig}: took {took:?}");
        assert!(!a.dir.join("daemon.sock").exists(), "socket removed");
        // The store was closed: a direct command opens it.
        a.sync();
    }
}

#[test]
fn a_daemon_receives_when_the_relay_is_replaced_by_one_with_a_new_epoch() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    let _da = Daemon::start(&a, &["--poll-secs", "1"]);
    let _db = Daemon::start(&b, &["--poll-secs", "1"]);
    let first = a.send("beta", "before", "one");
    assert!(wait_until(Duration::from_secs(20), || b.inbox_ids().len() == 1));
    // `inbox show` is served by the running daemon too.
    assert_eq!(b.ok(&["inbox", "show", &first])["body"], "one");
    let epoch = a.status()["relay"]["epoch"].clone();

    // Same port and relay key, empty store: a new epoch, enrolments and queues gone.
    relay.kill9();
    let port = relay.port;
    let fresh = tmp.path().join("relay-store-2");
    std::fs::create_dir_all(&fresh).unwrap();
    std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::copy(relay.store.join("relay.key"), fresh.join("relay.key")).unwrap();
    drop(relay);
    let _relay2 = RelayProc::start_on(tmp.path(), port, "relay-store-2", &[]);
    let second = a.send("beta", "after", "two");
    assert!(
        wait_until(Duration::from_secs(30), || b.inbox_ids().len() == 2
            && a.count("envelope_done") == 2),
        "alpha {}\nbeta {}",
        a.status(),
        b.status()
    );
    assert_ne!(a.status()["relay"]["epoch"], epoch);
    let got: BTreeSet<String> = b.inbox_ids().into_iter().collect();
    assert_eq!(got, BTreeSet::from([first, second]));
}

#[test]
fn daemons_on_a_relay_without_long_poll_deliver_by_polling() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let proxy = ReferenceProxy::start(relay.port);
    let (a, b) = pair(tmp.path(), &relay);
    for h in [&a, &b] {
        h.ok(&["relay", "set", &proxy.url()]);
        h.sync();
    }
    let _da = Daemon::start(&a, &["--poll-secs", "1"]);
    let _db = Daemon::start(&b, &["--poll-secs", "1"]);
    let mut to_b = BTreeSet::new();
    let mut to_a = BTreeSet::new();
    for i in 0..5 {
        to_b.insert(a.send("beta", "poll", &format!("a{i}")));
        to_a.insert(b.send("alpha", "poll", &format!("b{i}")));
    }
    assert!(
        wait_until(Duration::from_secs(30), || {
            a.count("envelope_done") == 5 && b.count("envelope_done") == 5
        }),
        "alpha {}\nbeta {}",
        a.status(),
        b.status()
    );
    assert_eq!(b.inbox_ids().into_iter().collect::<BTreeSet<_>>(), to_b);
    assert_eq!(a.inbox_ids().into_iter().collect::<BTreeSet<_>>(), to_a);
    // The daemons never asked a relay that did not advertise long-poll to hold a pull.
    assert!(proxy.requests.load(Ordering::Relaxed) > 0);
    assert_eq!(proxy.waits.load(Ordering::Relaxed), 0);
}

#[test]
fn daemons_on_a_long_poll_relay_hold_their_pulls() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    let _db = Daemon::start(&b, &["--poll-secs", "60"]);
    // Polling every 60 s: a delivery within seconds came from a held pull.
    std::thread::sleep(Duration::from_millis(500));
    let id = a.send("beta", "held", "now");
    let t0 = std::time::Instant::now();
    a.sync();
    assert!(wait_until(Duration::from_secs(20), || b.inbox_ids()
        == vec![id.clone()]));
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
}

#[test]
fn a_daemon_stops_with_exit_code_1_when_the_relay_key_changes() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, _b) = paired(tmp.path(), &relay);
    let mut da = Daemon::start(&a, &["--poll-secs", "1"]);
    // Same port, a new store with a new relay key: relay use must wait for the owner.
    relay.kill9();
    let port = relay.port;
    drop(relay);
    let _other = RelayProc::start_on(tmp.path(), port, "relay-store-other", &[]);
    let st = da.wait_exit(Duration::from_secs(20)).expect("daemon stops");
    assert_eq!(st.code(), Some(1), "{st:?}");
    let s = a.status();
    assert_eq!(s["alerts"][0]["kind"], "relay-key-changed", "{s}");
    assert!(!s["relay"]["offered_key"].is_null(), "{s}");
}

/// As `sync` does, `run` first finishes a key rotation a crash interrupted, so it runs with the
/// host's current key.
#[cfg(feature = "failpoints")]
#[test]
fn run_finishes_an_interrupted_key_rotation_before_it_starts() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, _b) = paired(tmp.path(), &relay);
    let old = a.pubkey();
    a.crash_at(&["rotate"], "host-rotate-after-intent");
    assert!(a.status()["keys"]["rotation_pending"].is_string());
    let _da = Daemon::start(&a, &["--poll-secs", "1"]);
    let s = a.status();
    assert!(s["keys"]["rotation_pending"].is_null(), "{s}");
    assert_ne!(s["pubkey"], old.as_str(), "{s}");
}

/// The daemon answers a send only after the outbox row is committed: a SIGKILL right after the
/// answer loses nothing, and the next daemon pushes it.
#[test]
fn a_send_the_daemon_answered_survives_its_sigkill() {
    let tmp = tempfile::tempdir().unwrap();
    let mut relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = paired(tmp.path(), &relay);
    relay.kill9();
    let mut da = Daemon::start(&a, &["--poll-secs", "1"]);
    let id = a.send("beta", "durable", "before the kill");
    da.kill9();
    let s = a.status();
    assert_eq!(s["outbox"]["envelope_draft"], 1, "{s}");
    relay.spawn(None);
    let _da = Daemon::start(&a, &["--poll-secs", "1"]);
    assert!(wait_until(Duration::from_secs(20), || a
        .count("envelope_relay-accepted")
        == 1));
    b.sync();
    assert_eq!(b.inbox_ids(), vec![id]);
}

#[test]
fn a_send_the_daemon_sealed_and_answered_is_pushed_after_a_crash_before_its_push() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (mut a, b) = paired(tmp.path(), &relay);
    a.env.push((
        "MBX_FAILPOINT".into(),
        "host-daemon-after-send-before-push".into(),
    ));
    let mut da = Daemon::start(&a, &["--poll-secs", "1"]);
    // Its first pass (which checks the relay) is done long before this.
    std::thread::sleep(Duration::from_millis(500));
    // The send is sealed and committed in one change and answered, then the daemon dies before
    // the pass that would push it (its answer may be lost with it: the abort can come before
    // the socket thread wrote it, so the outcome is read from the store).
    let sent = a.run(&[
        "send",
        "--to",
        "beta",
        "--subject",
        "s",
        "--body",
        "sealed, not pushed",
    ]);
    assert!(
        da.wait_exit(Duration::from_secs(10)).is_some(),
        "daemon did not stop at the failpoint"
    );
    a.env.pop();
    let s = a.status();
    assert_eq!(
        (
            &s["outbox"]["envelope_pending"],
            &s["outbox"]["envelope_draft"]
        ),
        (&serde_json::json!(1), &serde_json::json!(0)),
        "{s}"
    );
    let _da = Daemon::start(&a, &["--poll-secs", "1"]);
    assert!(wait_until(Duration::from_secs(20), || a
        .count("envelope_relay-accepted")
        == 1));
    b.sync();
    let inbox = b.inbox_ids();
    assert_eq!(inbox.len(), 1, "{inbox:?}");
    if let Ok(v) = sent {
        assert_eq!(v["id"], serde_json::json!(inbox[0]));
    }
}

/// `host run` through power cuts (issue 26): two daemons with their host directories on
/// `powercut` exchange mail; twice both are SIGKILLed and the power cut, then started again.
/// Every send a daemon answered arrives exactly once (nothing answered is lost, nothing is
/// delivered twice) and every envelope settles.
#[test]
fn two_daemons_exchange_mail_exactly_once_through_power_cuts() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let mut pc = Powercut::mount(&relay_testkit::bins::path("powercut"), &[]);
    let root = pc.path().join("hosts");
    std::fs::create_dir(&root).unwrap();
    // The test's own directory is made durable by the test (init's are the host's).
    relay_os::durable_dir::sync_dir(pc.path()).unwrap();
    let (a, b) = paired(&root, &relay);
    let start = |h: &HostCli| Daemon::start(h, &["--poll-secs", "1"]);
    let (mut da, mut db) = (start(&a), start(&b));
    let (mut to_b, mut to_a) = (BTreeSet::new(), BTreeSet::new());
    for i in 0..30 {
        if i == 10 || i == 20 {
            da.kill9();
            db.kill9();
            pc.cut();
            (da, db) = (start(&a), start(&b));
        }
        to_b.insert(a.send("beta", "s", &format!("a{i}")));
        to_a.insert(b.send("alpha", "s", &format!("b{i}")));
    }
    let settled = |h: &HostCli, n: usize| h.count("envelope_done") == n as u64;
    let ok = wait_until(Duration::from_secs(60), || {
        inbox_ids(&b).len() >= to_b.len()
            && inbox_ids(&a).len() >= to_a.len()
            && settled(&a, to_b.len())
            && settled(&b, to_a.len())
    });
    let (sa, sb) = (a.status(), b.status());
    assert!(ok, "not settled in time:\nalpha {sa}\nbeta {sb}");
    let (got_b, got_a) = (inbox_ids(&b), inbox_ids(&a));
    assert_eq!(got_b.iter().cloned().collect::<BTreeSet<_>>(), to_b);
    assert_eq!(got_a.iter().cloned().collect::<BTreeSet<_>>(), to_a);
    assert_eq!(
        (got_b.len(), got_a.len()),
        (to_b.len(), to_a.len()),
        "none twice"
    );
    for s in [&sa, &sb] {
        assert_eq!(s["quarantine"], 0, "{s}");
    }
    drop((da, db));
}
