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

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::client::{Endpoint, RelayClient};
use super::explain;
use super::identity::Identity;
use super::message::{draft_envelope, owner_address, ulid};
use super::store::{HostStore, ItemKind, OutRow, Peer, RelayConfig, RowState};
use super::sync::{Session, SyncOptions};
use super::trust;
use super::{now_ms, HostError};
use relay_wire::keys::{fingerprint, parse_pubkey};
use relay_wire::names::is_host_name;
use relay_wire::time::iso_ms;

/// Arguments of `mbx-relay host`.
#[derive(Debug, Args)]
pub struct HostArgs {
    /// The host's own store directory (keys, relay config, peers, outbox, inbox).
    #[arg(long, env = "MBX_HOST_DIR")]
    pub dir: PathBuf,
    /// Print machine-readable JSON instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: HostCommand,
}

/// One host command.
#[derive(Debug, Subcommand)]
pub enum HostCommand {
    /// Create the host: its Ed25519 host key and X25519 enc key (files 0600).
    Init {
        /// The host's name (what peers and the relay's listings show).
        #[arg(long)]
        name: String,
    },
    /// Relay configuration.
    #[command(subcommand)]
    Relay(RelayCommand),
    /// Pinned peers.
    #[command(subcommand)]
    Peer(PeerCommand),
    /// Queue a message for a pinned peer; the next `sync` seals and pushes it.
    Send {
        /// The pinned peer's name.
        #[arg(long)]
        to: String,
        /// The message's subject line.
        #[arg(long)]
        subject: String,
        /// Read the body from this file (or give --body).
        #[arg(long, conflicts_with = "body", required_unless_present = "body")]
        file: Option<PathBuf>,
        /// The body as text (or give --file).
        #[arg(long)]
        body: Option<String>,
    },
    /// One pass: enrol if needed, publish enc ad and allowlist, push, pull, receive, ack, receipts.
    Sync,
    /// Received messages (`inbox show ID`: one message with its body).
    Inbox {
        #[command(subcommand)]
        show: Option<InboxCommand>,
    },
    /// Items the receiver refused, with their reasons.
    Quarantine,
    /// Outbox, relay-accepted rows and deadlines, received_through, epoch, alerts.
    Status,
    /// Rotate this host's key (or finish an interrupted rotation); the old key is kept as retired.
    Rotate,
    /// Check relay, keys, enrolment, enc ad, allowlist and clock; one line per check with a fix.
    Doctor,
    /// Run as a daemon: receive as mail arrives, push as `send` queues.
    Run(super::daemon::RunArgs),
}

/// `host inbox ...`.
#[derive(Debug, Subcommand)]
pub enum InboxCommand {
    /// Print one received message with its body.
    Show {
        /// The message's id (as `inbox` lists it).
        id: String,
    },
}

/// `host relay ...`.
#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Use the relay at URL, pinning its key (trust on first use unless --key names its fingerprint).
    Set {
        /// The relay's base URL (`https://relay.example`).
        url: String,
        /// The relay key's fingerprint (`ab12-cd34-ef56-7890`), from the operator.
        #[arg(long)]
        key: Option<String>,
        /// Trust only this CA (PEM) for the https relay (kept for later syncs).
        #[arg(long, value_name = "FILE")]
        ca: Option<PathBuf>,
        /// Allow plain http to a non-loopback relay (pages and heads are unsigned: only on a
        /// trusted network path).
        #[arg(long)]
        insecure_http: bool,
        /// An invite code from the relay's operator (`relay-tool invite`), for a relay that
        /// admits invited hosts only: sent with the next enrolment, forgotten once it succeeds.
        #[arg(long, value_name = "CODE")]
        invite: Option<String>,
    },
}

/// `host peer ...`.
#[derive(Debug, Subcommand)]
pub enum PeerCommand {
    /// Pin a peer host by name and Ed25519 public key (base64).
    Add {
        /// The name to know the peer by.
        name: String,
        /// The peer's Ed25519 host key (base64), as its `init` printed it.
        pubkey: String,
    },
    /// The peer rotated its key: pin NEWKEY (or the new key of a rotation record both keys
    /// signed), keep the old key as retired, move waiting rows, republish the allowlist.
    Rotate {
        /// The pinned peer's name.
        name: String,
        /// The peer's new host key (base64), or give --record.
        newkey: Option<String>,
        /// A rotation record file both keys signed (instead of NEWKEY).
        #[arg(long)]
        record: Option<PathBuf>,
    },
}

/// Run one host command; the exit code is 0 on success, 1 on a failure, 2 on bad usage.
pub fn run(args: HostArgs) -> ExitCode {
    // Every file and directory a host command creates (the storage engine's too) is owner-only.
    relay_os::private::restrict_umask();
    // Only `init` makes a host directory; the rest never create one (a mistyped --dir).
    let routed = match &args.command {
        HostCommand::Init { .. } => None,
        _ => super::hostdir::require_host(&args.dir).err().map(Err),
    };
    // A running daemon serves the command or refuses it by name (doctor included).
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

pub(crate) type Out = Result<(Value, String), HostError>;

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
        }) => relay_set(
            dir,
            url,
            key.as_deref(),
            ca.as_deref(),
            *insecure_http,
            invite.as_deref(),
        ),
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

/// The body of `send`: the file's text or `--body`.
pub(crate) fn message_body(file: Option<&Path>, body: Option<&str>) -> Result<String, HostError> {
    match (file, body) {
        (Some(f), _) => std::fs::read_to_string(f)
            .map_err(|e| HostError::Usage(format!("cannot read {}: {e}", f.display()))),
        (None, Some(b)) => Ok(b.to_string()),
        (None, None) => Err(HostError::Usage("give --file or --body".into())),
    }
}

/// Queue a message for a pinned peer as a draft row, durably (`send`, or the daemon for it).
///
/// `seal` may seal the row before its one commit (the daemon does, so `send` costs one commit and
/// the push needs none before it); a row it leaves a draft is sealed by the next pass.
pub(crate) fn queue_message(
    store: &mut HostStore,
    to: &str,
    subject: &str,
    body: &str,
    seal: impl FnOnce(&mut HostStore, &mut OutRow),
) -> Out {
    let me = store.name()?.ok_or_else(|| {
        HostError::Usage(format!(
            "host not initialised; run `{}`",
            store.command("init --name NAME")
        ))
    })?;
    let peer = store.peer(to)?.ok_or_else(|| {
        HostError::Usage(format!(
            "{to} is not a pinned peer; run `{}`",
            store.command(&format!("peer add {to} PUBKEY"))
        ))
    })?;
    let now = now_ms();
    let id = ulid(now);
    let draft = draft_envelope(&id, &me, &peer.name, subject, body, now)?;
    let mut row = OutRow::draft_envelope(0, id.clone(), &peer, subject, draft.to_string(), now);
    seal(store, &mut row);
    let mut b = store.batch();
    row.id = b.new_row_id();
    b.put_row(&row)?;
    b.commit()?;
    // Before the first seal for this peer the enc key to seal for is still to come (its ad).
    let ad_seen = store.peer_ad(&peer.pubkey)?.is_some();
    let next = match row.state {
        RowState::Draft if !ad_seen => format!(
            "the next sync seals and pushes it once {0}'s enc-key ad is on the relay ({0} \
             publishes it with its first sync; until then `status` says the message waits)",
            peer.name
        ),
        RowState::Draft => "the next sync seals and pushes it".to_string(),
        _ => "sealed; the next sync pushes it".to_string(),
    };
    Ok((
        json!({"id": id, "to": owner_address(&peer.name)}),
        format!("queued {id} for {}; {next}", peer.name),
    ))
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

pub(crate) fn inbox(store: &HostStore) -> Out {
    let rows = store.inbox()?;
    let mut text = format!("{} message(s)", rows.len());
    let v: Vec<Value> = rows
        .iter()
        .map(|m| {
            text.push_str(&format!("\n{}  {}  {}  {}", m.id, m.from, m.ts, m.subject));
            json!({"id": m.id, "from": m.from, "subject": m.subject, "body": m.body, "ts": m.ts,
                   "relay_seq": m.relay_seq, "received_at": iso_ms(m.received_at)})
        })
        .collect();
    Ok((json!({"messages": v}), text))
}

pub(crate) fn inbox_show(store: &HostStore, id: &str) -> Out {
    let m = store.inbox_get(id)?.ok_or_else(|| {
        HostError::Usage(format!(
            "no received message {id}; see `{}`",
            store.command("inbox")
        ))
    })?;
    let text = format!(
        "id: {}\nfrom: {}\ndate: {}\nsubject: {}\nrelay seq: {}, received {}\n\n{}",
        m.id,
        m.from,
        m.ts,
        m.subject,
        m.relay_seq,
        iso_ms(m.received_at),
        m.body
    );
    let v = json!({"id": m.id, "from": m.from, "subject": m.subject, "body": m.body, "ts": m.ts,
                   "relay_seq": m.relay_seq, "received_at": iso_ms(m.received_at)});
    Ok((v, text))
}

pub(crate) fn quarantine(store: &HostStore) -> Out {
    let rows = store.quarantine()?;
    let mut text = format!("{} quarantined item(s)", rows.len());
    let v: Vec<Value> = rows
        .iter()
        .map(|q| {
            text.push_str(&format!("\nseq {} {} {} from {}: {}", q.seq, q.kind, q.item_id, q.sender, q.reason));
            json!({"relay": q.relay, "epoch": q.epoch, "seq": q.seq, "item_id": q.item_id, "kind": q.kind,
                   "sender": q.sender, "reason": q.reason, "bytes": q.wire.len(), "at": iso_ms(q.at)})
        })
        .collect();
    Ok((json!({"items": v}), text))
}

fn row_json(r: &OutRow) -> Value {
    json!({
        "id": r.id, "kind": r.kind.wire_name(), "item_id": r.item_id, "to": r.target_name,
        "subject": r.subject, "state": r.state.name(), "attempts": r.attempts,
        "next_at": iso_ms(r.next_at), "last_error": r.last_error,
        "seq": r.acceptance.as_ref().map(|a| a.seq), "epoch": r.acceptance.as_ref().map(|a| a.epoch.clone()),
        "deadline": r.deadline.map(iso_ms), "note": r.note, "why": explain::why(r, now_ms()),
    })
}

pub(crate) fn status(dir: &Path, store: &HostStore) -> Out {
    let id = Identity::load(dir)?;
    let name = store.name()?.unwrap_or_default();
    let relay = store.relay()?;
    let rows = store.rows()?;
    let mut counts = serde_json::Map::new();
    for state in [
        RowState::Draft,
        RowState::Pending,
        RowState::RelayAccepted,
        RowState::Done,
        RowState::Unconfirmed,
        RowState::Expired,
    ] {
        for kind in [ItemKind::Envelope, ItemKind::Receipt] {
            let n = rows
                .iter()
                .filter(|r| r.state == state && r.kind == kind)
                .count();
            counts.insert(format!("{}_{}", kind.wire_name(), state.name()), json!(n));
        }
    }
    let active: Vec<Value> = rows
        .iter()
        .filter(|r| r.state.active())
        .take(1_000)
        .map(row_json)
        .collect();
    let alerts: Vec<Value> = store
        .alerts()?
        .iter()
        .map(|a| json!({"at": iso_ms(a.at), "kind": a.kind, "text": a.text}))
        .collect();
    let (cp, relay_v) = match &relay {
        Some(r) => {
            let cp = store.checkpoint(&r.url, &r.relay_pubkey)?;
            let fp = parse_pubkey(&r.relay_pubkey)
                .map(|k| fingerprint(&k))
                .unwrap_or_default();
            let offered = r
                .offered_key
                .as_deref()
                .and_then(parse_pubkey)
                .map(|k| fingerprint(&k));
            (
                cp,
                json!({"url": r.url, "fingerprint": fp, "epoch": r.epoch, "offered_key": offered,
                        "retention_ms": r.retention_ms}),
            )
        }
        None => (Default::default(), Value::Null),
    };
    let enc_ad = store.published_ad()?;
    let mut peer_ads = serde_json::Map::new();
    for p in store.peers()? {
        if let Some(ad) = store.peer_ad(&p.pubkey)? {
            peer_ads.insert(
                p.name,
                json!({"iat": iso_ms(ad.iat_ms), "exp": iso_ms(ad.exp_ms), "enc_pub": ad.enc_pub}),
            );
        }
    }
    let v = json!({
        "name": name, "pubkey": id.host.public_b64(), "fingerprint": fingerprint(&id.host.public()),
        "relay": relay_v, "received_through": cp.received_through, "acked_through": cp.acked_through,
        "outbox": counts, "active": active, "alerts": alerts, "inbox": store.inbox()?.len(),
        "quarantine": store.quarantine()?.len(),
        "enc_ad": enc_ad.as_ref().map(|a| json!({"iat": iso_ms(a.iat_ms), "exp": iso_ms(a.exp_ms), "enc_pub": a.enc_pub})),
        "peer_enc_ads": peer_ads,
    });
    let mut text = format!(
        "host {name} ({})\nrelay {}\nreceived_through {} acked_through {}\n",
        fingerprint(&id.host.public()),
        relay.as_ref().map_or("not set".to_string(), |r| format!(
            "{} epoch {}{}",
            r.url,
            r.epoch.as_deref().unwrap_or("unknown"),
            if r.offered_key.is_some() {
                " (KEY CHANGED: relay use stopped)"
            } else {
                ""
            }
        )),
        cp.received_through,
        cp.acked_through
    );
    match &enc_ad {
        Some(a) => text.push_str(&format!(
            "v2 enc-key ad published {} (expires {})\n",
            iso_ms(a.iat_ms),
            iso_ms(a.exp_ms)
        )),
        None => text.push_str("v2 enc-key ad not published\n"),
    }
    for (k, n) in &counts {
        if n.as_u64() != Some(0) {
            text.push_str(&format!("{k}: {n}\n"));
        }
    }
    for r in rows.iter().filter(|r| r.state.active()).take(50) {
        let mut line = format!("  {} {} to {}", r.item_id, r.state.name(), r.target_name);
        if let Some(a) = &r.acceptance {
            line.push_str(&format!(" seq {}", a.seq));
        }
        if let Some(d) = r.deadline {
            line.push_str(&format!(" deadline {}", iso_ms(d)));
        }
        if let Some(w) = explain::why(r, now_ms()) {
            line.push_str(&format!(": {w}"));
        }
        text.push_str(&line);
        text.push('\n');
    }
    for a in store.alerts()? {
        text.push_str(&format!("ALERT {} {}: {}\n", iso_ms(a.at), a.kind, a.text));
    }
    let (keys, key_lines) = super::rotate::status(store)?;
    key_lines
        .iter()
        .for_each(|l| text.push_str(&format!("{l}\n")));
    let mut v = v;
    v["keys"] = keys;
    Ok((v, text.trim_end().to_string()))
}
