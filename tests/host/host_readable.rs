//! A host a person can read (issue 16): `host status` and `host sync` say why a row waits and
//! when it is tried again; `host inbox show ID` prints one message with its body; `host doctor`
//! prints one line per check, `ok` or `FAIL` with a fix, and exits non-zero when one fails; a
//! command on a directory `init` never made is refused and creates nothing, and the next steps
//! printed name `--dir` (issue 24 item 11).
//! Real relay process, real host commands, their text output as a person sees it.

use crate::host_util;

use std::process::Command;

use host_util::{pair, HostCli, RelayProc, BIN};
use serde_json::Value;

/// Run a host command without `--json`: (exit code, stdout, stderr).
fn text(h: &HostCli, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("host")
        .arg("--dir")
        .arg(&h.dir)
        .args(args)
        .env_remove("MBX_FAILPOINT")
        .env("MBX_HOST_TIMEOUT_MS", "5000")
        .envs(h.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `host doctor` as text: (exit code, the line of `check`).
fn doctor_line(h: &HostCli, check: &str) -> (i32, String) {
    let (code, out, err) = text(h, &["doctor"]);
    let line = out
        .lines()
        .find(|l| l.contains(&format!(" {check}: ")))
        .unwrap_or_else(|| panic!("no {check} line in:\n{out}{err}"))
        .to_string();
    (code, line)
}

#[test]
fn a_newcomer_sending_to_a_peer_that_has_not_synced_is_told_what_is_happening() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    let id = a.send("beta", "hello", "are you there?");
    let (code, out, err) = text(&a, &["sync"]);
    assert_eq!(code, 0, "{err}");
    let want = "waiting for beta's enc ad: beta has not published one on this relay yet";
    assert!(out.contains(&format!("{id} to beta: {want}")), "{out}");
    assert!(out.contains("next try "), "says when it tries again: {out}");
    let (_, st, _) = text(&a, &["status"]);
    assert!(st.contains(want), "status says it too:\n{st}");
    assert!(
        a.status()["active"][0]["why"]
            .as_str()
            .unwrap()
            .contains(want),
        "and so does --json"
    );

    // Once beta syncs, the row moves on and says what it waits for next.
    b.sync();
    std::thread::sleep(std::time::Duration::from_millis(1_100)); // past the first backoff
    let (_, out, _) = text(&a, &["sync"]);
    assert!(
        out.contains(&format!("{id} to beta: on the relay (seq "))
            && out.contains("waiting for beta to pull it and send a delivery receipt"),
        "{out}"
    );
    b.sync();
    let (_, out, _) = text(&a, &["sync"]);
    assert!(!out.contains(&id), "a settled row no longer waits: {out}");
}

#[test]
fn a_refused_push_says_the_relays_reason_and_when_it_retries() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &["--max-queue-items", "1"]);
    let (mut a, b) = pair(tmp.path(), &relay);
    a.env.push(("MBX_HOST_BACKOFF_MS".into(), "60000".into()));
    b.sync();
    a.send("beta", "one", "1");
    let second = a.send("beta", "two", "2");
    let (code, out, _) = text(&a, &["sync"]);
    assert_eq!(code, 0);
    let line = out
        .lines()
        .find(|l| l.contains(&second))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains("rejected:quota:"), "{line}");
    assert!(line.contains("it frees up as beta pulls"), "{line}");
    assert!(line.contains("retry at "), "{line}");
    let (_, st, _) = text(&a, &["status"]);
    assert!(
        st.contains("rejected:quota:") && st.contains("retry at "),
        "{st}"
    );
}

#[test]
fn inbox_show_prints_one_message_with_its_body() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    b.sync();
    let id = a.send("beta", "the subject", "line one\nline two");
    a.sync();
    b.sync();
    let (code, out, err) = text(&b, &["inbox", "show", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("id: {id}")), "{out}");
    assert!(
        out.contains("from: owner@alpha (the owner of peer alpha: signed by alpha's host key)"),
        "{out}"
    );
    let (_, list, _) = text(&b, &["inbox"]);
    assert!(list.contains("owner@PEER is peer PEER's owner"), "{list}");
    assert!(out.contains("subject: the subject"), "{out}");
    assert!(out.ends_with("\n\nline one\nline two\n"), "{out:?}");
    let v: Value = b.ok(&["inbox", "show", &id]);
    assert_eq!(v["body"], "line one\nline two");
    let (code, _, err) = text(&b, &["inbox", "show", "01NOSUCHMESSAGE0000000000"]);
    assert_eq!(code, 2, "an unknown id is a usage error");
    assert!(err.contains("no received message"), "{err}");
    // The listing still works without a subcommand.
    assert_eq!(b.inbox_ids(), vec![id]);
}

#[test]
fn doctor_prints_one_line_per_check_with_a_fix_and_fails_when_a_check_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let a = HostCli::init(tmp.path(), "alpha");
    let (code, line) = doctor_line(&a, "relay configured");
    assert_eq!(code, 1);
    assert!(
        line.starts_with("FAIL")
            && line.contains(&format!(
                "fix: run `mbx-relay host --dir {} relay set URL",
                a.dir.display()
            )),
        "{line}"
    );

    let mut relay = RelayProc::start(tmp.path(), &[]);
    a.ok(&["relay", "set", &relay.url()]);
    let (code, line) = doctor_line(&a, "enrolment");
    assert_eq!(code, 1);
    assert!(
        line.starts_with("FAIL")
            && line.contains(&format!("mbx-relay host --dir {} sync`", a.dir.display())),
        "{line}"
    );
    let (_, line) = doctor_line(&a, "allowlist");
    assert!(
        line.starts_with("FAIL")
            && line.contains(&format!(
                "mbx-relay host --dir {} peer add",
                a.dir.display()
            )),
        "no peer pinned: {line}"
    );

    let b = HostCli::init(tmp.path(), "beta");
    a.ok(&["peer", "add", "beta", &b.pubkey()]);
    a.sync();
    let (code, out, err) = text(&a, &["doctor"]);
    assert_eq!(code, 0, "all checks pass after a sync:\n{out}{err}");
    for check in [
        "relay reachable",
        "relay key",
        "enrolment",
        "enc-key ad",
        "allowlist",
        "clock",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("ok   {check}: "))),
            "{check}:\n{out}"
        );
    }
    let v = a.run(&["doctor"]).unwrap();
    assert_eq!(v["ok"], true);

    // An enc-key ad that expires within a day is not fresh.
    let mut c = HostCli::init(tmp.path(), "gamma");
    c.env
        .push(("MBX_HOST_ENC_AD_LIFETIME_MS".into(), "3600000".into()));
    c.ok(&["peer", "add", "alpha", &a.pubkey()]);
    c.ok(&["relay", "set", &relay.url()]);
    c.sync();
    let (code, line) = doctor_line(&c, "enc-key ad");
    assert_eq!(code, 1);
    assert!(
        line.starts_with("FAIL enc-key ad: the v2 ad expires ")
            && line.contains(&format!("mbx-relay host --dir {} sync`", c.dir.display())),
        "{line}"
    );

    // A relay with another key on the same URL.
    relay.kill9();
    let (code, line) = doctor_line(&a, "relay reachable");
    assert_eq!(code, 1);
    assert!(line.starts_with("FAIL"), "{line}");
    let _other = RelayProc::start_on(tmp.path(), relay.port, "other-store", &[]);
    let (code, line) = doctor_line(&a, "relay key");
    assert_eq!(code, 1);
    assert!(
        line.starts_with("FAIL")
            && line.contains(&format!(
                "mbx-relay host --dir {} relay set ",
                a.dir.display()
            ))
            && line.contains("--key"),
        "{line}"
    );
}

/// A host handle on `dir` without running `init` there.
fn uninitialised(dir: &std::path::Path) -> HostCli {
    HostCli {
        name: "nobody".into(),
        dir: dir.to_path_buf(),
        env: Vec::new(),
        umask: None,
    }
}

#[test]
fn commands_on_a_directory_init_never_made_are_refused_and_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let relay = RelayProc::start(tmp.path(), &[]);
    let a = HostCli::init(tmp.path(), "alpha");
    let typo = uninitialised(&tmp.path().join("alpah"));
    let url = relay.url();
    let pk = a.pubkey();
    let commands: [&[&str]; 11] = [
        &["inbox"],
        &["status"],
        &["quarantine"],
        &["sync"],
        &["doctor"],
        &["rotate"],
        &["run"],
        &["send", "--to", "alpha", "--subject", "s", "--body", "b"],
        &["relay", "set", &url],
        &["peer", "add", "alpha", &pk],
        &["inbox", "show", "01NOSUCHMESSAGE0000000000"],
    ];
    let init = format!(
        "mbx-relay host --dir {} init --name NAME",
        typo.dir.display()
    );
    for cmd in commands {
        let (code, out, err) = text(&typo, cmd);
        assert_eq!(code, 2, "{cmd:?}: a usage error\n{out}{err}");
        assert!(
            err.contains(&format!(
                "{} is not a host directory (no such directory)",
                typo.dir.display()
            )) && err.contains("check --dir")
                && err.contains(&init),
            "{cmd:?}: {err}"
        );
        assert!(!typo.dir.exists(), "{cmd:?} created {}", typo.dir.display());
    }

    // A relay's store is not a host either: nothing is created in it.
    let store = uninitialised(&relay.store);
    let before = std::fs::read_dir(&relay.store).unwrap().count();
    for cmd in [&["status"][..], &["inbox"], &["sync"]] {
        let (code, _, err) = text(&store, cmd);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("it holds a relay's store"), "{err}");
    }
    assert!(!relay.store.join("state").exists());
    assert_eq!(std::fs::read_dir(&relay.store).unwrap().count(), before);
    let (code, _, err) = text(&store, &["init", "--name", "x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("holds a relay's store"), "{err}");
    assert!(!relay.store.join("host.key").exists());
}

#[test]
fn init_prints_next_steps_with_dir_and_send_says_it_waits_for_the_peers_first_sync() {
    let tmp = tempfile::tempdir().unwrap();
    let g = uninitialised(&tmp.path().join("gamma"));
    let (code, out, err) = text(&g, &["init", "--name", "gamma"]);
    assert_eq!(code, 0, "{err}");
    let dir = g.dir.display();
    for step in [
        format!("mbx-relay host --dir {dir} relay set URL"),
        format!("mbx-relay host --dir {dir} peer add PEER PEER_KEY"),
        format!("mbx-relay host --dir {dir} sync"),
        "mbx-relay host --dir PEER_DIR peer add gamma ".to_string(),
    ] {
        assert!(out.contains(&step), "{step:?} in:\n{out}");
    }

    let relay = RelayProc::start(tmp.path(), &[]);
    let (a, b) = pair(tmp.path(), &relay);
    let (code, out, err) = text(
        &a,
        &["send", "--to", "beta", "--subject", "s", "--body", "b"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "once beta's enc-key ad is on the relay (beta publishes it with its first sync"
        ),
        "{out}"
    );
    // Once the sender has beta's ad, `send` says the plain next step.
    b.sync();
    a.sync();
    let (_, out, _) = text(
        &a,
        &["send", "--to", "beta", "--subject", "s", "--body", "b"],
    );
    assert!(
        out.contains("the next sync seals and pushes it") && !out.contains("once beta"),
        "{out}"
    );
    let (code, _, err) = text(
        &a,
        &["send", "--to", "zeta", "--subject", "s", "--body", "b"],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains(&format!(
            "mbx-relay host --dir {} peer add zeta PUBKEY",
            a.dir.display()
        )),
        "{err}"
    );
}
