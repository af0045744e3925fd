//! `mbx-relay host ...`: the host commands (init, relay set, peer add/rotate, send, sync, inbox
//! [show], quarantine, status, rotate, doctor, run). Each command opens the host store, does its work, prints text or (with
//! `--json`) one JSON document, and exits 0 (ok), 1 (failure) or 2 (bad usage). While `run` holds
//! the store, commands go to it or are refused by name ([`super::local::route`]).
//!
//! ```text
//! mbx-relay host --dir ./a init --name alpha           # prints alpha's host key
//! mbx-relay host --dir ./a peer add beta <beta's key>  # pin the peer
//! mbx-relay host --dir ./a relay set https://relay.example [--key ab12-cd34-ef56-7890] [--ca ca.pem]
//! mbx-relay host --dir ./a send --to beta --subject hi --body "hello"
//! mbx-relay host --dir ./a sync                        # run it periodically (cron, a loop)
//! mbx-relay host --dir ./a status
//! ```
//!
//! Timing knobs for `sync` come from the environment: `MBX_HOST_TIMEOUT_MS` (HTTP, 30 s),
//! `MBX_HOST_BACKOFF_MS` / `MBX_HOST_BACKOFF_CAP_MS` (retry backoff, 1 s doubling to 5 min),
//! `MBX_HOST_DEADLINE_GRACE_MS` (grace after retention before "unconfirmed", 24 h). Which enc-key
//! ads `sync` publishes: `MBX_HOST_ENC_ADS` = `both` (default: the v1 pair and the v2 ad), `v1`
//! (as an agentmbx 0.5.6 host) or `v2`; `MBX_HOST_ENC_AD_LIFETIME_MS` the v2 ad's lifetime
//! (30 days, at most 90).

use std::path::Path;
use std::process::ExitCode;

use serde_json::{json, Value};

pub use super::args::{HostArgs, HostCommand, InboxCommand, PeerCommand, RelayCommand};
use super::client::{Endpoint, RelayClient};
use super::explain;
use super::identity::Identity;
use super::mailbox::{inbox, inbox_show, message_body, quarantine, queue_message, status, Out};
use super::store::{HostStore, Peer, RelayConfig};
use super::sync::{Session, SyncOptions};
use super::trust;
use super::{now_ms, HostError};
use relay_wire::keys::{fingerprint, parse_pubkey};
use relay_wire::names::is_host_name;

/// Run one host command; the exit code is 0 on success, 1 on a failure, 2 on bad usage.
pub fn run(args: HostArgs) -> ExitCode {
    // Every file and directory a host command creates (the storage engine's too) is owner-only.
    relay_os::private::restrict_umask();
    // Only `init` makes a host directory; the rest never create one (a mistyped --dir).
    let routed = match &args.command {
        HostCommand::Init { .. } => None,
        _ => super::hostdir::require_host(&args.dir).err().map(Err),
    };
    // A running daemon serves the command or refuses it by name; doctor runs beside it.
    let routed = routed.or_else(|| super::local::route(&args.dir, &args.command));
    if routed.is_none() && matches!(args.command, HostCommand::Doctor) {
        return super::doctor::run(&args.dir, args.json);
    }
    match routed.unwrap_or_else(|| dispatch(&args)) {
        Ok((value, text)) => {
            if args.json {
                println!("{value}");
            } else {
                println!("{text}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            let code: u8 = if matches!(e, HostError::Usage(_)) {
                2
            } else {
                1
            };
            if args.json {
                // The JSON error shape of all three binaries (`mbx_relay::exit::json_error`).
                println!("{}", json!({"error": e.to_string(), "exit_code": code}));
            }
            eprintln!("mbx-relay host: {e}");
            ExitCode::from(code)
        }
    }
}

fn dispatch(a: &HostArgs) -> Out {
    let dir = a.dir.as_path();
    match &a.command {
        HostCommand::Init { name } => init(dir, name),
        HostCommand::Relay(RelayCommand::Set {
            url,
            key,
            ca,
            insecure_http,
            invite,
            token_file,
        }) => relay_set(
            dir,
            url,
            key.as_deref(),
            ca.as_deref(),
            *insecure_http,
            invite.as_deref(),
            token_file.as_deref(),
        ),
        HostCommand::CloudKey => {
            let v = super::cloud_key::describe(dir)?;
            let text = format!(
                "cloud key {} (thumbprint, the token's cnf.jkt: {})",
                v["cloud_pub"].as_str().unwrap_or("-"),
                v["jkt"].as_str().unwrap_or("-")
            );
            Ok((v, text))
        }
        HostCommand::Peer(PeerCommand::Add { name, pubkey }) => peer_add(dir, name, pubkey),
        HostCommand::Peer(PeerCommand::Rotate {
            name,
            newkey,
            record,
        }) => super::retired::peer_rotate(dir, name, newkey.as_deref(), record.as_deref()),
        HostCommand::Send {
            to,
            subject,
            file,
            body,
        } => send(dir, to, subject, file.as_deref(), body.as_deref()),
        HostCommand::Sync => sync(dir),
        HostCommand::Inbox { show: None } => inbox(&HostStore::open(dir)?),
        HostCommand::Inbox {
            show: Some(InboxCommand::Show { id }),
        } => inbox_show(&HostStore::open(dir)?, id),
        HostCommand::Quarantine => quarantine(&HostStore::open(dir)?),
        HostCommand::Status => status(dir, &HostStore::open(dir)?),
        HostCommand::Rotate => super::rotate::rotate(dir),
        HostCommand::Doctor => Err(HostError::Usage("doctor runs from `run`".into())),
        HostCommand::Run(args) => super::daemon::run(dir, args),
    }
}

fn init(dir: &Path, name: &str) -> Out {
    if !is_host_name(name) {
        return Err(HostError::Usage(format!(
            "{name:?} is not a host name (letters, digits, '.', '_', '-', at most 63, starting with a letter or digit)"
        )));
    }
    let id = Identity::create(dir)?;
    let mut store = HostStore::open(dir)?;
    let mut b = store.batch();
    b.set_name(name)?;
    b.commit()?;
    let pk = id.host.public();
    let v = json!({"name": name, "pubkey": id.host.public_b64(), "fingerprint": fingerprint(&pk), "enc_pub": id.enc.public_b64()});
    let text = format!(
        "host {name} created in {}\nhost key {} (fingerprint {})\n\
         next steps:\n  {}\n  {}   (for each peer)\n  {}   (the receiving side first: its \
         first sync publishes the enc key senders seal for)\n\
         each peer pins this host in its own directory: mbx-relay host --dir PEER_DIR peer add {name} {}",
        dir.display(),
        id.host.public_b64(),
        fingerprint(&pk),
        store.command("relay set URL [--key FINGERPRINT] [--ca FILE]"),
        store.command("peer add PEER PEER_KEY"),
        store.command("sync"),
        id.host.public_b64()
    );
    Ok((v, text))
}

fn relay_set(
    dir: &Path,
    url: &str,
    expect_fp: Option<&str>,
    ca: Option<&Path>,
    insecure_http: bool,
    invite: Option<&str>,
    token_file: Option<&Path>,
) -> Out {
    trust::check_relay_url(url, insecure_http, ca.is_some()).map_err(HostError::Usage)?;
    let invite = invite.map(str::trim);
    if invite.is_some_and(|c| c.is_empty() || c.len() > 128 || c.chars().any(char::is_control)) {
        return Err(HostError::Usage(
            "--invite takes the code relay-tool invite printed".into(),
        ));
    }
    let ca = ca
        .map(trust::read_ca)
        .transpose()
        .map_err(HostError::Usage)?;
    let id = Identity::load(dir)?;
    let mut store = HostStore::open(dir)?;
    let name = store.name()?.unwrap_or_default();
    let timeout = SyncOptions::from_env().timeout;
    let endpoint = Endpoint {
        url: url.to_string(),
        ca: ca.clone(),
    };
    let client = RelayClient::new(&endpoint, &name, &id.host, timeout)?;
    let a = client
        .get("/v2/relay/info", None, false)
        .map_err(trust::hint_ca)?;
    if a.status != 200 {
        return Err(HostError::Relay(format!("relay info: {}", a.error())));
    }
    let offered = a
        .body
        .get("relay_pubkey")
        .and_then(Value::as_str)
        .unwrap_or("");
    let offered_pk = parse_pubkey(offered)
        .ok_or_else(|| HostError::Relay("relay info carries no valid relay key".into()))?;
    let fp = fingerprint(&offered_pk);
    let old = store.relay()?;
    match expect_fp {
        Some(want) if want.trim().to_ascii_lowercase() != fp => {
            return Err(HostError::Relay(format!(
                "the relay at {url} presents key {fp}, not {want}; nothing pinned"
            )));
        }
        None => {
            if let Some(old) = old
                .as_ref()
                .filter(|o| o.url == url && o.relay_pubkey != offered)
            {
                let pinned = parse_pubkey(&old.relay_pubkey)
                    .map(|k| fingerprint(&k))
                    .unwrap_or_default();
                return Err(HostError::RelayKeyChanged {
                    confirm: store.command(&format!("relay set {url} --key {fp}")),
                    url: url.into(),
                    pinned_fp: pinned,
                    offered_fp: fp,
                });
            }
        }
        Some(_) => {}
    }
    let same = old
        .as_ref()
        .filter(|o| o.url == url && o.relay_pubkey == offered);
    let limits = &a.body["limits"];
    let cfg = RelayConfig {
        url: url.to_string(),
        relay_pubkey: offered.to_string(),
        offered_key: None,
        epoch: same.and_then(|o| o.epoch.clone()),
        retention_ms: limits
            .get("retention_days")
            .and_then(Value::as_f64)
            .map_or(14 * 86_400_000, |d| (d * 86_400_000.0) as u64),
        max_batch: limits
            .get("max_batch")
            .and_then(Value::as_u64)
            .unwrap_or(200)
            .clamp(1, 1_000),
        max_pull: limits
            .get("max_pull")
            .and_then(Value::as_u64)
            .unwrap_or(500)
            .clamp(1, 10_000),
    };
    let mut b = store.batch();
    b.set_relay(&cfg)?;
    b.set_relay_ca(ca.as_deref())?;
    if invite.is_some() {
        b.set_enrol_invite(invite)?;
    }
    if let Some(file) = token_file {
        let abs = std::path::absolute(file)
            .map_err(|e| HostError::Usage(format!("--token-file {}: {e}", file.display())))?;
        super::cloud_key::load_or_create(dir)?;
        b.set_enrol_token_file(Some(&abs.to_string_lossy()))?;
    }
    b.commit()?;
    let how = if expect_fp.is_some() {
        "confirmed by --key"
    } else {
        "trust on first use"
    };
    Ok((
        json!({"url": url, "relay_pubkey": offered, "fingerprint": fp, "pinned_by": how}),
        format!("relay {url} pinned: key {fp} ({how})"),
    ))
}

fn peer_add(dir: &Path, name: &str, pubkey: &str) -> Out {
    if !is_host_name(name) {
        return Err(HostError::Usage(format!("{name:?} is not a host name")));
    }
    let pk = parse_pubkey(pubkey)
        .ok_or_else(|| HostError::Usage("not a base64 Ed25519 public key".into()))?;
    let mut store = HostStore::open(dir)?;
    if let Some(old) = store.peer(name)? {
        if old.pubkey != pubkey {
            return Err(HostError::Usage(format!(
                "peer {name} is already pinned to another key ({})",
                parse_pubkey(&old.pubkey)
                    .map(|k| fingerprint(&k))
                    .unwrap_or_default()
            )));
        }
    }
    if let Some(other) = store.peer_by_key(pubkey)?.filter(|p| p.name != name) {
        return Err(HostError::Usage(format!(
            "that key is already pinned as peer {}",
            other.name
        )));
    }
    let mut b = store.batch();
    b.put_peer(&Peer {
        name: name.into(),
        pubkey: pubkey.into(),
    })?;
    // A new peer changes the allowlist: the next sync republishes it.
    b.set_published(None)?;
    b.commit()?;
    let fp = fingerprint(&pk);
    Ok((
        json!({"name": name, "pubkey": pubkey, "fingerprint": fp}),
        format!("peer {name} pinned ({fp})"),
    ))
}

fn send(dir: &Path, to: &str, subject: &str, file: Option<&Path>, body: Option<&str>) -> Out {
    let body = message_body(file, body)?;
    queue_message(&mut HostStore::open(dir)?, to, subject, &body, |_, _| {})
}

fn sync(dir: &Path) -> Out {
    let rotated = super::rotate::finish_pending(dir)?;
    let id = Identity::load(dir)?;
    let mut store = HostStore::open(dir)?;
    let mut session = Session::open(&mut store, &id, SyncOptions::from_env())?;
    let r = session.run()?;
    let text = format!(
        "epoch {}: sealed {}, pushed {}, relay-accepted {} ({} duplicate), push failures {}; received {}, duplicates {}, \
         quarantined {}, receipts {}, expired {}, unconfirmed {}; received_through {}, acked_through {}",
        r.epoch, r.sealed, r.pushed, r.relay_accepted, r.relay_duplicates, r.push_failures, r.received, r.duplicates,
        r.quarantined, r.receipts_settled, r.expired, r.unconfirmed, r.received_through, r.acked_through
    );
    let text = match &r.enc_ad {
        Some(e) => format!("{text}; v2 enc-key ad {e}"),
        None => text,
    };
    let mut v = serde_json::to_value(&r).map_err(|e| HostError::Store(e.to_string()))?;
    let waiting = explain::waiting_lines(&store.rows()?, now_ms(), 50);
    let text = waiting.iter().fold(text, |t, w| format!("{t}\n  {w}"));
    v["waiting"] = json!(waiting);
    let text = match &rotated {
        Some(rot) => format!(
            "finished the interrupted key rotation: host key {} ({})\n{text}",
            rot["new_fingerprint"].as_str().unwrap_or(""),
            rot["peer_command"].as_str().unwrap_or("")
        ),
        None => text,
    };
    if let Some(rot) = rotated {
        v["rotation_finished"] = rot;
    }
    Ok((v, text))
}
