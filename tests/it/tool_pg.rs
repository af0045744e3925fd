//! `relay-tool` against a PostgreSQL store filled through a real `mbx-relay serve` on it: every
//! store command with `--store postgres://...` alone (the database opened directly, beside the
//! running relay) and with the relay's `--store-dir` (through its admin socket); `rotate-epoch`
//! and `revoke --purge` in the database while the relay serves, and the relay following them;
//! the url's password never printed, not even when the database cannot be reached.

use crate::common;

use common::{envelope_item, relay_tool_env, Host, Relay, RelayOpts, GENEROUS};
use relay_testkit::cluster::PgCluster;
use relay_wire::keys::SigningKey;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The password put into every url (the throwaway cluster trusts local connections, so it is
/// accepted and never checked: what matters is that no output shows it).
const PASSWORD: &str = "Pw-n0t-2-b3-printed";

/// `postgres://postgres@host:port/db` -> the same with [`PASSWORD`].
fn with_password(url: &str) -> String {
    url.replacen("postgres@", &format!("postgres:{PASSWORD}@"), 1)
}

/// Run relay-tool, require exit `code`, and require that neither stream shows the password.
fn tool(args: &[&str], env: &[(&str, &str)], code: i32) -> (String, String) {
    let out = relay_tool_env(args, env);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert_eq!(
        out.status.code(),
        Some(code),
        "relay-tool {:?}\nstdout:\n{o}\nstderr:\n{e}",
        args.iter()
            .map(|a| a.replace(PASSWORD, "***"))
            .collect::<Vec<_>>()
    );
    assert!(
        !o.contains(PASSWORD) && !e.contains(PASSWORD),
        "relay-tool printed the password: {:?}",
        args.first()
    );
    (o, e)
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

fn pg_relay(url: &str, seed: &str) -> Relay {
    let mut args: Vec<&str> = GENEROUS.to_vec();
    args.extend(["--store", url]);
    Relay::launch(RelayOpts::args(&args).env("MBX_RELAY_KEY", seed)).expect("relay on postgres")
}

#[test]
fn every_store_command_works_on_a_postgres_store_beside_its_relay_and_never_prints_the_password() {
    let Some(pg) = PgCluster::start_or_skip("tool_pg") else {
        return;
    };
    let key = SigningKey::generate();
    let seed = key.seed_b64();
    let url = with_password(&pg.fresh_db());
    let relay = pg_relay(&url, &seed);
    let (alice, bob) = (
        Host::enrolled(&relay, "alice"),
        Host::enrolled(&relay, "bob"),
    );
    for _ in 0..3 {
        let item = envelope_item(&alice, &[&bob]);
        assert_eq!(alice.push_one(&relay, &item)["status"], json!("accepted"));
    }
    let db = ["--store", url.as_str()];
    let dir = relay.store_dir().to_str().expect("utf-8 path").to_string();
    let via_socket = ["--store", url.as_str(), "--store-dir", dir.as_str()];
    let no_env: &[(&str, &str)] = &[];

    // stats: directly from the database, and through the relay's admin socket (which alone
    // knows the relay's --max-enrolments).
    let (o, _) = tool(&[&["stats", "--json"][..], &db].concat(), no_env, 0);
    let stats: Value = serde_json::from_str(o.trim()).expect("stats json");
    assert_eq!(stats["epoch"], json!(relay.epoch()), "{stats}");
    assert_eq!(stats["live_enrolments"], json!(2), "{stats}");
    assert_eq!(stats["queued_items"], json!(3), "{stats}");
    assert!(
        stats["max_enrolments"].is_null(),
        "opened directly: {stats}"
    );
    let (o, _) = tool(&[&["stats", "--json"][..], &via_socket].concat(), no_env, 0);
    let online: Value = serde_json::from_str(o.trim()).expect("stats json");
    assert!(
        online["max_enrolments"].as_u64().is_some(),
        "through the relay: {online}"
    );
    assert_eq!(online["queued_items"], json!(3));
    let (o, _) = tool(&[&["stats"][..], &db].concat(), no_env, 0);
    assert!(o.contains("3 items"), "{o}");

    // MBX_RELAY_STORE names the store as --store does.
    let (o, _) = tool(&["stats", "--json"], &[("MBX_RELAY_STORE", &url)], 0);
    assert!(o.contains(&relay.epoch()), "{o}");

    // hosts, log, log --verify, verify (the store), dump.
    let (o, _) = tool(&[&["hosts", "--json"][..], &db].concat(), no_env, 0);
    let hosts = json_lines(&o);
    assert_eq!(hosts.len(), 2, "{o}");
    let bob_row = hosts
        .iter()
        .find(|h| h["name"] == json!("bob"))
        .expect("bob listed");
    assert_eq!(bob_row["queue_items"], json!(3), "{bob_row}");
    let (o, _) = tool(
        &[&["hosts", "--name", "alice"][..], &db].concat(),
        no_env,
        0,
    );
    assert_eq!(o.lines().count(), 2, "header and alice: {o}");
    let (o, _) = tool(&[&["log", "--json"][..], &db].concat(), no_env, 0);
    let enrols = json_lines(&o)
        .iter()
        .filter(|e| e["kind"] == json!("enrol"))
        .count();
    assert_eq!(enrols, 2, "{o}");
    let (o, _) = tool(&[&["log", "--verify"][..], &db].concat(), no_env, 0);
    assert!(o.contains("relay log OK"), "{o}");
    let (o, _) = tool(&[&["verify"][..], &db].concat(), no_env, 0);
    assert!(o.contains("store OK: postgres://127.0.0.1:"), "{o}");
    assert!(o.contains(&relay.epoch()), "{o}");
    let (o, _) = tool(&[&["verify"][..], &via_socket].concat(), no_env, 0);
    assert!(o.contains("store OK"), "{o}");
    let (o, _) = tool(
        &[&["dump", "--json", "--partition", "items"][..], &db].concat(),
        no_env,
        0,
    );
    assert_eq!(json_lines(&o).len(), 3, "{o}");
    let (o, _) = tool(&[&["dump"][..], &via_socket].concat(), no_env, 0);
    assert!(o.contains("-- records: "), "{o}");

    // rotate-epoch in the database while the relay serves: a host presenting the new epoch
    // is served at once (the relay re-reads the store's epoch), and the relay's info follows.
    let old = relay.epoch();
    let (o, _) = tool(&[&["rotate-epoch"][..], &db].concat(), no_env, 0);
    let new = o
        .lines()
        .next()
        .and_then(|l| l.rsplit(' ').nth(5))
        .map(str::to_string)
        .filter(|e| *e != old)
        .unwrap_or_else(|| panic!("no new epoch in {o}"));
    let r = bob.pull(&relay, &format!("?after=0&epoch={new}"));
    assert_eq!(r.status, 200, "the new epoch at once: {}", r.text());
    assert_eq!(r.json()["epoch"], json!(new));
    let deadline = Instant::now() + Duration::from_secs(15);
    while relay.epoch() != new {
        assert!(Instant::now() < deadline, "the relay kept epoch {old}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let r = bob.pull(&relay, &format!("?after=0&epoch={old}"));
    assert_eq!(r.status, 409, "the old epoch is refused: {}", r.text());

    // revoke --purge in the database while the relay serves: bob's next hop is refused, his
    // queue is gone and alice is queued one relay-signed notice per purged item.
    let (o, _) = tool(
        &[
            &["revoke", "--purge", "--json", "--reason", "test"][..],
            &db,
            &[bob.pubkey().as_str()],
        ]
        .concat(),
        &[("MBX_RELAY_KEY", &seed)],
        0,
    );
    let done: Value = serde_json::from_str(o.trim()).expect("revoke json");
    assert_eq!(done["purged_items"], json!(3), "{done}");
    assert_eq!(done["notices"], json!(3), "{done}");
    assert_eq!(bob.pull(&relay, "?after=0").status, 401);
    assert_eq!(alice.pull_all(&relay, 0).len(), 3, "one notice per item");
    // Purging without the relay key (no variable, no --store-dir) is refused, naming both.
    let carol = Host::enrolled(&relay, "carol");
    let (_, e) = tool(
        &[&["purge"][..], &db, &[carol.pubkey().as_str()]].concat(),
        no_env,
        1,
    );
    assert!(
        e.contains("MBX_RELAY_KEY") && e.contains("--store-dir"),
        "{e}"
    );

    // Unreachable or empty databases are refused by name, still without the password.
    let (_, e) = tool(
        &[
            "stats",
            "--store",
            &format!("postgres://postgres:{PASSWORD}@127.0.0.1:1/nowhere"),
        ],
        no_env,
        1,
    );
    assert!(e.contains("127.0.0.1:1/nowhere"), "{e}");
    let empty = with_password(&pg.fresh_db());
    let (_, e) = tool(&["hosts", "--store", &empty], no_env, 1);
    assert!(e.contains("holds no mbx-relay store"), "{e}");
    relay.assert_alive();
}
