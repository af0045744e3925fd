//! The files in `packaging/` stay true to the binary (issue 14): the environment file names every
//! variable `mbx-relay serve --help` names, with its default, and no other; the systemd units pass
//! `systemd-analyze verify` (skipped with a line on stderr where the command is missing); the
//! backup script makes a verified backup through the running relay's admin socket and keeps the
//! newest 7; the Prometheus alert rules pass `promtool check rules` and `promtool test rules`, and
//! they and the Grafana dashboard use only metrics a real relay serves.
use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A file of `packaging/`.
fn packaging(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(name)
}

/// Variables `serve` reads that are no flag (so not in `--help`).
const NOT_FLAGS: &[&str] = &["MBX_RELAY_KEY"];
/// Variables of flags the `tls` branch adds (issue 14); until it is merged they are not in this
/// binary's `--help`. Once they are, they are checked like every other flag.
const TLS_FLAGS: &[&str] = &["MBX_RELAY_TLS_CERT", "MBX_RELAY_TLS_KEY"];

/// Each `[env: NAME=...]` of `serve --help`, with its `[default: ...]` ("" when none).
fn help_variables() -> BTreeMap<String, String> {
    let mut cmd = Command::new(relay_bin());
    cmd.args(["serve", "--help"]);
    // A set variable would show its value instead of the default's absence.
    for (k, _) in std::env::vars() {
        if k.starts_with("MBX_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output().expect("run serve --help");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).expect("utf-8 help");
    let mut vars = BTreeMap::new();
    let mut rest = help.as_str();
    while let Some(at) = rest.find("[env: ") {
        rest = &rest[at + "[env: ".len()..];
        let name_end = rest.find('=').expect("[env: NAME=");
        let name = rest[..name_end].to_string();
        // The default, if any, comes before the next option's `[env: `.
        let this = rest.find("[env: ").map_or(rest, |n| &rest[..n]);
        let default = this
            .find("[default: ")
            .map(|d| {
                let v = &this[d + "[default: ".len()..];
                v[..v.find(']').expect("]")].to_string()
            })
            .unwrap_or_default();
        vars.insert(name, default);
    }
    assert!(
        vars.len() >= 30,
        "parsed {} variables of --help",
        vars.len()
    );
    vars
}

/// Each `#NAME=value` (or `NAME=value`) line of the environment file.
fn env_file_variables() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(packaging("mbx-relay.env")).expect("read mbx-relay.env");
    let mut vars = BTreeMap::new();
    for line in text.lines() {
        let line = line.strip_prefix('#').unwrap_or(line);
        if let Some((name, value)) = line.split_once('=') {
            if name.starts_with("MBX_RELAY_") && !name.contains(' ') {
                let dup = vars.insert(name.to_string(), value.to_string());
                assert!(dup.is_none(), "{name} twice in mbx-relay.env");
            }
        }
    }
    vars
}

#[test]
fn the_env_file_names_every_serve_variable_with_its_default_and_no_other() {
    let help = help_variables();
    let file = env_file_variables();
    for (name, default) in &help {
        let got = file
            .get(name)
            .unwrap_or_else(|| panic!("{name} (in serve --help) is missing from mbx-relay.env"));
        assert_eq!(
            got, default,
            "{name}: mbx-relay.env says {got:?}, --help {default:?}"
        );
    }
    for name in file.keys() {
        let known = help.contains_key(name)
            || NOT_FLAGS.contains(&name.as_str())
            || TLS_FLAGS.contains(&name.as_str());
        assert!(
            known,
            "{name} is in mbx-relay.env but serve does not read it"
        );
    }
    for name in NOT_FLAGS.iter().chain(TLS_FLAGS) {
        assert!(
            file.contains_key(*name),
            "{name} is missing from mbx-relay.env"
        );
    }
}

/// A copy of the units in `dir` whose commands point at the built binary and the repository's
/// backup script (verify checks that each command exists and is executable).
fn units_for_verify(dir: &Path) -> Vec<PathBuf> {
    let script = packaging("mbx-relay-backup");
    let tool = relay_tool_bin();
    let mut out = Vec::new();
    for name in [
        "mbx-relay.service",
        "mbx-relay-backup.service",
        "mbx-relay-backup.timer",
    ] {
        let text = std::fs::read_to_string(packaging(name)).expect("read unit");
        let text = text
            .replace("/usr/local/bin/mbx-relay ", &format!("{} ", relay_bin()))
            .replace("/usr/local/bin/relay-tool", tool.to_str().unwrap())
            .replace(
                "/usr/local/lib/mbx-relay/mbx-relay-backup",
                script.to_str().unwrap(),
            );
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        out.push(path);
    }
    out
}

#[test]
fn the_systemd_units_pass_systemd_analyze_verify() {
    if Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED the_systemd_units_pass_systemd_analyze_verify: no systemd-analyze");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let units = units_for_verify(dir.path());
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&units)
        .output()
        .expect("run systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Unknown keys and bad values are only warnings for verify: any output is a finding.
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify ({}):\n{stderr}",
        out.status
    );
}

#[test]
fn the_relay_unit_allows_a_descriptor_per_connection_and_the_store() {
    let unit = std::fs::read_to_string(packaging("mbx-relay.service")).unwrap();
    let nofile: usize = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .expect("LimitNOFILE")
        .parse()
        .expect("a number");
    let cap = mbx_relay::http::conn::GuardConfig::default().max_connections;
    assert!(
        nofile >= cap + 1024,
        "LimitNOFILE {nofile}: the connection cap {cap} plus room for the store's files"
    );
}

/// The backup script against a running relay: one more verified backup, made through the
/// admin socket, the newest 7 `relay-*.mbxbak` kept, nothing else touched.
#[test]
fn the_backup_script_backs_up_the_running_relay_and_keeps_the_newest_seven() {
    assert!(
        relay_tool_bin().exists(),
        "{} missing: run `cargo test --workspace` (or `cargo build -p relay-tool`)",
        relay_tool_bin().display()
    );
    let relay = Relay::start(&[]);
    let s = Host::enrolled(&relay, "bk-s");
    let t = Host::enrolled(&relay, "bk-t");
    s.push_one(&relay, &envelope_item(&s, &[&t]));
    let dest = tempfile::tempdir().unwrap();
    let old: Vec<PathBuf> = (0..9)
        .map(|i| {
            dest.path()
                .join(format!("relay-2020010{}T000000Z.mbxbak", i + 1))
        })
        .collect();
    for f in &old {
        std::fs::write(f, b"an older backup").unwrap();
    }
    let other = dest.path().join("notes.txt");
    std::fs::write(&other, b"not a backup").unwrap();
    let out = Command::new(packaging("mbx-relay-backup"))
        .env("MBX_BACKUP_STORE", relay.store_dir())
        .env("MBX_BACKUP_DEST", dest.path())
        .env("MBX_BACKUP_TOOL", relay_tool_bin())
        .env_remove("MBX_BACKUP_KEEP")
        .env_remove("MBX_RELAY_STORE_DIR")
        .output()
        .expect("run mbx-relay-backup");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("through the running relay"), "{stdout}");
    let mut kept: Vec<PathBuf> = std::fs::read_dir(dest.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "mbxbak"))
        .collect();
    kept.sort();
    assert_eq!(kept.len(), 7, "{kept:?}");
    assert_eq!(&kept[..6], &old[3..], "the three oldest went");
    let new = &kept[6];
    let v = relay_tool(&["verify", new.to_str().unwrap()]);
    assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
    assert!(other.exists(), "other files are left alone");
}

/// `mbx-relay health` (the container's HEALTHCHECK): 0 while `/health` answers 200, 1 once the
/// relay is gone.
#[test]
fn the_health_probe_exits_0_for_a_healthy_relay_and_1_without_one() {
    let mut relay = Relay::start(&[]);
    let url = format!("http://{}/health", relay.addr());
    let probe = || {
        Command::new(relay_bin())
            .args(["health", "--url", &url])
            .output()
            .expect("run mbx-relay health")
    };
    let ok = probe();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    relay.kill9();
    let gone = probe();
    assert_eq!(gone.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&gone.stderr);
    assert!(
        stderr.contains("unhealthy") && stderr.contains(&url),
        "{stderr}"
    );
}

/// Run `promtool ARGS` in `packaging/prometheus/`; its output, asserted successful.
fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(packaging("prometheus"))
        .output()
        .expect("promtool (Debian package `prometheus`; .ci/run installs it)");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{said}");
    said
}

/// Every `mbx_relay_*` or `process_*` metric name in `text` (a histogram's series as the
/// histogram's name).
fn metric_names(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for prefix in ["mbx_relay_", "process_"] {
        for (at, _) in text.match_indices(prefix) {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let name = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .map_or(name.clone(), str::to_owned);
            names.insert(name);
        }
    }
    names
}

/// The alert rules pass `promtool check rules`, and `promtool test rules` shows each alert
/// firing on the series that should raise it and none on a healthy relay.
#[test]
fn the_alert_rules_pass_promtool_check_and_fire_when_they_should() {
    let said = promtool(&["check", "rules", "mbx-relay-alerts.yml"]);
    assert!(said.contains("SUCCESS: 8 rules found"), "{said}");
    let tested = promtool(&["test", "rules", "mbx-relay-alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    let rules = std::fs::read_to_string(packaging("prometheus/mbx-relay-alerts.yml")).unwrap();
    for alert in [
        "MbxRelayDown",
        "MbxRelayStoreUnavailable",
        "MbxRelayDiskFilling",
        "MbxRelayPostgresDiskFilling",
        "MbxRelayCertificateExpiring",
        "MbxRelayNoRecentBackup",
        "MbxRelayRefusalsRising",
    ] {
        assert!(rules.contains(&format!("alert: {alert}\n")), "{alert}");
    }
}

/// The dashboard and the alert rules read only metrics a real relay serves: every
/// `mbx_relay_*` and `process_*` name they use is in a running relay's `/metrics` (the TLS
/// certificate's expiry only with TLS: tests/it/observe.rs sees it there).
#[test]
fn the_dashboard_and_alert_rules_use_only_metrics_the_relay_serves() {
    let dashboard = std::fs::read_to_string(packaging("grafana/mbx-relay-dashboard.json")).unwrap();
    let parsed: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard JSON");
    assert_eq!(parsed["uid"], "mbx-relay");
    assert!(parsed["panels"].as_array().unwrap().len() > 10);
    let rules = std::fs::read_to_string(packaging("prometheus/mbx-relay-alerts.yml")).unwrap();
    let relay = Relay::start(&["--metrics-listen", "127.0.0.1:0"]);
    // Request series appear with the first request.
    assert_eq!(relay.get("/health").status, 200);
    // The store figures (queued items, the last backup) come with the first scrape's reading.
    let served = {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let text = relay.metrics().text();
            if text.contains("mbx_relay_last_backup_timestamp_seconds")
                || std::time::Instant::now() > deadline
            {
                break metric_names(&text);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    };
    let tls_only = "mbx_relay_tls_cert_not_after_seconds";
    for (file, text) in [("dashboard", &dashboard), ("alert rules", &rules)] {
        let used = metric_names(text);
        assert!(
            used.contains("mbx_relay_refusals_total"),
            "{file}: {used:?}"
        );
        let missing: Vec<&String> = used
            .iter()
            .filter(|n| *n != tls_only && !served.contains(*n))
            .collect();
        assert!(
            missing.is_empty(),
            "{file} uses {missing:?}; served: {served:?}"
        );
    }
}

/// Every package's features as `cargo tree` resolves them for `selection` (the lock file as
/// is, no network), keyed by name and version.
fn resolved_features(selection: &[&str]) -> BTreeMap<String, std::collections::BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--locked",
            "--offline",
            "-e",
            "no-dev",
            "--prefix",
            "none",
        ])
        .args(["-f", "{p} {f}"])
        .args(selection)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree {selection:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut packages: BTreeMap<String, std::collections::BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim_end_matches(" (*)");
        let mut words = line.splitn(3, ' ');
        let (Some(name), Some(version)) = (words.next(), words.next()) else {
            continue;
        };
        let features = words.next().unwrap_or("");
        packages
            .entry(format!("{name} {version}"))
            .or_default()
            .insert(features.to_string());
    }
    packages
}

/// `cargo run --release -- serve` after `cargo build --release --workspace` reuses what the
/// workspace build compiled (issue 39 item 10: it recompiled 61 crates): every package the relay
/// builds resolves the same features in both builds, so no dependency is built twice.
#[test]
fn the_relay_package_resolves_the_features_a_workspace_build_does() {
    let package = resolved_features(&["-p", "mbx-relay"]);
    let workspace = resolved_features(&["--workspace"]);
    assert!(package.len() > 100, "{package:?}");
    let differ: Vec<String> = package
        .iter()
        .filter_map(|(p, f)| {
            let w = workspace.get(p)?;
            (w != f).then(|| format!("{p}: package {f:?}, workspace {w:?}"))
        })
        .collect();
    assert!(differ.is_empty(), "features differ: {differ:#?}");
}
