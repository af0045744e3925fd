//! Starting cleanly or not at all, and the command-line conventions (issue 29), against the real
//! `mbx-relay`: a start that fails (a port in use, a bad `--listen`, a bad `MBX_RELAY_KEY`, a
//! bad value in an `MBX_RELAY_*` variable, half a TLS pair) creates no store directory and no
//! relay key and prints its error once, with the exit code of the shared scheme (1 failure,
//! 2 setting); `serve --check` validates and creates nothing; `READY=1` and `WATCHDOG=1` reach
//! a `NOTIFY_SOCKET` the test makes; every flag has help, byte and duration flags take units,
//! and the completions and man page are generated.
use crate::common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use clap::CommandFactory as _;
use common::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// `serve` over `store` with these flags and variables; it must exit by itself.
fn serve(store: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    relay_exits(
        &[&["serve", "--store-dir", s(store)][..], args].concat(),
        env,
    )
}

/// The start failed with `code`, said `needle` exactly once on stderr, and left nothing:
/// no store directory, so no relay key in it either.
fn assert_failed_cleanly(out: &Output, store: &Path, code: i32, needle: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{needle}: {err}");
    assert_eq!(err.matches(needle).count(), 1, "said once: {err}");
    assert!(
        !store.exists(),
        "{needle}: the store directory was created: {err}"
    );
    assert!(
        !store.join("relay.key").exists(),
        "{needle}: a relay key was generated"
    );
}

#[test]
fn a_failed_start_creates_no_store_directory_and_no_relay_key() {
    let work = tempfile::tempdir().unwrap();
    let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = held.local_addr().unwrap().to_string();

    let store = work.path().join("port-in-use");
    let out = serve(&store, &["--listen", &busy], &[]);
    assert_failed_cleanly(&out, &store, 1, "cannot listen on");

    let store = work.path().join("metrics-port-in-use");
    let out = serve(
        &store,
        &["--listen", "127.0.0.1:0", "--metrics-listen", &busy],
        &[],
    );
    assert_failed_cleanly(&out, &store, 1, "--metrics-listen");

    let store = work.path().join("bad-listen");
    let out = serve(&store, &["--listen", "localhost:18002x"], &[]);
    assert_failed_cleanly(&out, &store, 2, "--listen localhost:18002x");

    let store = work.path().join("bad-key");
    let out = serve(
        &store,
        &["--listen", "127.0.0.1:0"],
        &[("MBX_RELAY_KEY", "not-a-key")],
    );
    assert_failed_cleanly(&out, &store, 2, "MBX_RELAY_KEY is not a valid relay key");

    let store = work.path().join("half-tls");
    let cert = work.path().join("cert.pem");
    std::fs::write(&cert, "not read").unwrap();
    let out = serve(
        &store,
        &["--listen", "127.0.0.1:0", "--tls-cert", s(&cert)],
        &[],
    );
    assert_failed_cleanly(&out, &store, 2, "--tls-key");

    // A bad value from the environment (an EnvironmentFile line) names its variable.
    let store = work.path().join("env-value");
    let out = serve(
        &store,
        &["--listen", "127.0.0.1:0"],
        &[("MBX_RELAY_MAX_BATCH", "lots")],
    );
    assert_failed_cleanly(&out, &store, 2, "MBX_RELAY_MAX_BATCH");
    let store = work.path().join("env-zero");
    let out = serve(
        &store,
        &["--listen", "127.0.0.1:0"],
        &[("MBX_RELAY_MAX_QUEUE_BYTES", "0")],
    );
    assert_failed_cleanly(
        &out,
        &store,
        2,
        "--max-queue-bytes (from MBX_RELAY_MAX_QUEUE_BYTES)",
    );
    drop(held);
}

#[test]
fn serve_check_validates_everything_and_creates_nothing() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("fresh");
    let out = serve(&store, &["--check", "--listen", "127.0.0.1:0"], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(said.contains("configuration ok"), "{said}");
    assert!(said.contains("generated at the first start"), "{said}");
    assert!(!store.exists(), "--check created the store");

    // A configured relay's store, its key found; the relay itself may be running.
    let relay = Relay::start(&[]);
    let out = serve(
        relay.store_dir(),
        &["--check", "--listen", "127.0.0.1:0"],
        &[],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("relay key: "),
        "{}",
        text(&out.stdout)
    );
    relay.assert_alive();

    for (args, env, needle) in [
        (vec!["--max-batch", "0"], vec![], "--max-batch"),
        (vec![], vec![("MBX_RELAY_KEY", "junk")], "MBX_RELAY_KEY"),
        (vec!["--listen", "localhost:18002x"], vec![], "--listen"),
    ] {
        let store = work.path().join("refused");
        let all = [&["--check"][..], &args].concat();
        let all = if args.contains(&"--listen") {
            all
        } else {
            [&all[..], &["--listen", "127.0.0.1:0"]].concat()
        };
        let out = serve(&store, &all, &env);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!store.exists());
    }
    // A relay.key others may read is refused by --check as by a start.
    let shared = work.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o700)).unwrap();
        let key = shared.join("relay.key");
        std::fs::write(&key, relay_wire::keys::SigningKey::generate().seed_b64()).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let out = serve(&shared, &["--check", "--listen", "127.0.0.1:0"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("chmod 600"),
        "{}",
        text(&out.stderr)
    );
}

/// Datagrams received on `sock` until `want` arrives or `limit` passes.
fn notifications_until(sock: &UnixDatagram, want: &str, limit: Duration) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        if let Ok(n) = sock.recv(&mut buf) {
            let msg = text(&buf[..n]);
            let done = msg.lines().any(|l| l == want);
            got.push(msg);
            if done {
                break;
            }
        }
    }
    got
}

#[test]
fn ready_and_watchdog_reach_the_notify_socket_once_listening() {
    let work = tempfile::tempdir().unwrap();
    let path = work.path().join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let relay = Relay::launch(
        RelayOpts::default()
            .env("NOTIFY_SOCKET", s(&path))
            .env("WATCHDOG_USEC", "400000"),
    )
    .expect("relay starts");
    // `launch` returned after `listening on`: READY=1 was sent by then, after the store opened.
    let got = notifications_until(&sock, "READY=1", Duration::from_secs(10));
    let ready = got
        .iter()
        .position(|m| m.lines().any(|l| l == "READY=1"))
        .unwrap_or_else(|| panic!("no READY=1: {got:?}"));
    assert!(
        got[..ready]
            .iter()
            .any(|m| m.contains("STATUS=opening the store")),
        "{got:?}"
    );
    assert!(
        got[ready].contains(&format!("STATUS=serving on {}", relay.addr())),
        "{got:?}"
    );
    // WATCHDOG_USEC 0.4 s: a ping every 0.2 s (generous bound for a loaded machine).
    let pings = notifications_until(&sock, "WATCHDOG=1", Duration::from_secs(10));
    assert!(
        pings.iter().any(|m| m == "WATCHDOG=1"),
        "no watchdog ping: {pings:?}"
    );
    relay.assert_alive();
}

#[test]
fn byte_and_duration_flags_take_units_and_plain_integers() {
    let relay = Relay::start(&[
        "--max-queue-bytes",
        "50MiB",
        "--max-sender-bytes",
        "20M",
        "--max-item-bytes",
        "512KiB",
        "--max-pull-bytes",
        "8000000",
        "--retention",
        "2w",
        "--sweep-interval",
        "600",
        "--header-timeout",
        "1m 30s",
    ]);
    let limits = relay.info()["limits"].clone();
    assert_eq!(limits["max_queue_bytes"], 50 << 20, "{limits}");
    assert_eq!(limits["max_sender_bytes"], 20 << 20, "{limits}");
    assert_eq!(limits["max_item_bytes"], 512 << 10, "{limits}");
    assert_eq!(limits["max_pull_bytes"], 8_000_000, "{limits}");
    assert_eq!(limits["retention_days"], 14, "{limits}");
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("s");
    for (flag, bad) in [
        ("--max-queue-bytes", "50 furlongs"),
        ("--retention", "2 fortnights"),
    ] {
        let out = serve(&store, &["--listen", "127.0.0.1:0", flag, bad], &[]);
        assert_eq!(out.status.code(), Some(2), "{flag} {bad}");
        assert!(text(&out.stderr).contains(flag), "{}", text(&out.stderr));
        assert!(!store.exists());
    }
}

/// Every `--help` in the binary's tree (each command path, `--help`).
fn every_help(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(String, String)>) {
    let args: Vec<&str> = path.iter().map(String::as_str).chain(["--help"]).collect();
    let o = relay_exits(&args, &[]);
    assert_eq!(o.status.code(), Some(0), "{args:?}");
    out.push((path.join(" "), text(&o.stdout)));
    for sub in cmd.get_subcommands().filter(|c| c.get_name() != "help") {
        let mut p = path.clone();
        p.push(sub.get_name().to_string());
        every_help(sub, p, out);
    }
}

#[test]
fn every_flag_has_help_grouped_and_no_help_shows_a_source_path() {
    let cmd = mbx_relay::cli::Cli::command();
    let missing = mbx_relay::cli_docs::undocumented(&cmd);
    assert!(
        missing.is_empty(),
        "flags without help, or with a field name for a placeholder: {missing:?}"
    );
    let mut helps = Vec::new();
    every_help(&cmd, Vec::new(), &mut helps);
    for (path, help) in &helps {
        for leak in ["::", ".rs`", ".rs)", ".rs "] {
            assert!(
                !help.contains(leak),
                "`{path} --help` shows {leak:?}:\n{help}"
            );
        }
    }
    let serve = &helps.iter().find(|(p, _)| p == "serve").expect("serve").1;
    for heading in [
        "Listeners and store:",
        "Items and pulls:",
        "Quotas and caps:",
        "Rate limits:",
        "Periods:",
        "Connections:",
        "Request bodies:",
        "TLS:",
        "EXIT CODES",
        "--check",
    ] {
        assert!(
            serve.contains(heading),
            "serve --help lacks {heading}:\n{serve}"
        );
    }
    assert!(helps[0].1.contains("EXIT CODES"), "{}", helps[0].1);
}

#[test]
fn completions_and_the_man_page_are_generated_from_the_command_tree() {
    for shell in ["bash", "zsh", "fish"] {
        let out = relay_exits(&["completions", shell], &[]);
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = text(&out.stdout);
        assert!(script.contains("max-queue-bytes"), "{shell}: {script}");
    }
    let out = relay_exits(&["man"], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with(".ie") || text(&out.stdout).contains(".TH mbx-relay"));
    let dir = tempfile::tempdir().unwrap();
    let out = relay_exits(&["man", "--dir", s(dir.path())], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let page = std::fs::read_to_string(dir.path().join("mbx-relay-serve.1")).expect("serve page");
    assert!(page.contains("max\\-queue\\-bytes"), "{page}");
}

/// Issue 39 item 1: a restored store started without its relay key is refused (exit 2, the
/// store's key named) and no `relay.key` is written into it, so a later start with the key
/// works; `--check` says the same instead of `configuration ok`; another key is refused with
/// exit 2; a store a running relay holds exits 4.
#[test]
fn a_store_started_without_its_key_is_refused_and_no_key_is_written() {
    let work = tempfile::tempdir().unwrap();
    let relay = Relay::start(&[]);
    let seed = std::fs::read_to_string(relay.store_dir().join("relay.key")).unwrap();
    let seed = seed.trim().to_string();
    let fp = relay_wire::keys::fingerprint(
        &relay_wire::keys::SigningKey::from_key_file(&seed)
            .unwrap()
            .public(),
    );
    let out = serve(relay.store_dir(), &["--listen", "127.0.0.1:0"], &[]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("in use"),
        "{}",
        text(&out.stderr)
    );

    let backup = work.path().join("relay.mbxbak");
    let out = relay_tool(&["backup", "--store-dir", s(relay.store_dir()), s(&backup)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    drop(relay);
    let restored = work.path().join("restored");
    let out = relay_tool(&["restore", "--store-dir", s(&restored), s(&backup)]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let key_file = restored.join("relay.key");
    assert!(!key_file.exists(), "the restore brought no key");

    for args in [&["--check"][..], &[]] {
        let all = [args, &["--listen", "127.0.0.1:0"]].concat();
        let out = serve(&restored, &all, &[]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(&fp), "names the store's key: {err}");
        assert!(err.contains("MBX_RELAY_KEY"), "{err}");
        assert!(!text(&out.stdout).contains("configuration ok"));
        assert!(!key_file.exists(), "{args:?} wrote a relay key");
    }
    let other = relay_wire::keys::SigningKey::generate().seed_b64();
    let out = serve(
        &restored,
        &["--listen", "127.0.0.1:0"],
        &[("MBX_RELAY_KEY", &other)],
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("relay key refused"));
    assert!(!key_file.exists());

    let out = serve(
        &restored,
        &["--check", "--listen", "127.0.0.1:0"],
        &[("MBX_RELAY_KEY", &seed)],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!(
            "relay key: {fp} (from MBX_RELAY_KEY), the store's own"
        )),
        "{said}"
    );
}

/// Issue 39 item 2: an `MBX_RELAY_*` variable that names no setting is refused by `serve` and
/// by `--check` (exit 2, nothing created), with the name it was probably meant to be.
#[test]
fn a_misspelt_variable_is_refused_with_the_name_meant() {
    let work = tempfile::tempdir().unwrap();
    let store = work.path().join("store");
    for args in [&["--check"][..], &[]] {
        let all = [args, &["--listen", "127.0.0.1:0"]].concat();
        let out = serve(
            &store,
            &all,
            &[
                ("MBX_RELAY_LISTN", "127.0.0.1:0"),
                ("MBX_RELAY_MAX_QUEUE_ITEM", "5"),
            ],
        );
        assert_failed_cleanly(
            &out,
            &store,
            2,
            "MBX_RELAY_LISTN (did you mean MBX_RELAY_LISTEN?)",
        );
        assert!(
            text(&out.stderr)
                .contains("MBX_RELAY_MAX_QUEUE_ITEM (did you mean MBX_RELAY_MAX_QUEUE_ITEMS?)"),
            "{}",
            text(&out.stderr)
        );
    }
    // A --store-dir that is a file is said so (no chmod advice).
    let file = work.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let out = serve(&file, &["--check", "--listen", "127.0.0.1:0"], &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("not a directory") && !err.contains("chmod"),
        "{err}"
    );
}

/// `--check` on a PostgreSQL store: a new, empty database checks (reachable, as before); once a
/// relay pinned its key there, a relay directory without that key is refused (exit 2, the
/// store's key named) and no key is written.
#[test]
fn serve_check_on_a_database_reaches_a_new_one_and_refuses_a_missing_key() {
    if !postgres_available("serve_check_on_a_database") {
        return;
    }
    let db = fresh_database();
    let work = tempfile::tempdir().unwrap();
    let fresh = work.path().join("fresh");
    let check = ["--check", "--listen", "127.0.0.1:0", "--store", &db];
    let out = serve(&fresh, &check, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("(reachable)"),
        "{}",
        text(&out.stdout)
    );

    let relay = Relay::launch(RelayOpts::args(&[]).on(Backend::Postgres).db(&db))
        .expect("relay on the database");
    drop(relay);
    let other_dir = work.path().join("other");
    let out = serve(&other_dir, &check, &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("the store belongs to relay key"), "{err}");
    assert!(!other_dir.join("relay.key").exists());
}
