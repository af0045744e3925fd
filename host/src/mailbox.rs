//! What the host commands answer that a running daemon answers too (`inbox [show]`,
//! `quarantine`, `status`, queueing a `send`): one implementation for `cli` and `daemon`.

use std::path::Path;

use serde_json::{json, Value};

use super::explain;
use super::identity::Identity;
use super::message::{draft_envelope, owner_address, ulid};
use super::store::{HostStore, ItemKind, OutRow, RowState};
use super::{now_ms, HostError};
use relay_wire::keys::{fingerprint, parse_pubkey};
use relay_wire::time::iso_ms;

/// What a host command answers: its JSON document and its text, or the error.
pub(crate) type Out = Result<(Value, String), HostError>;

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

pub(crate) fn inbox(store: &HostStore) -> Out {
    let rows = store.inbox()?;
    let mut text = format!("{} message(s)", rows.len());
    if !rows.is_empty() {
        text.push_str(" (id, from: owner@PEER is peer PEER's owner, date, subject)");
    }
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
        sender_text(&m.from),
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

/// A sender address in words: `owner@alpha` is how agentmbx addresses the owner of host
/// alpha, and the receiver took it only from that peer (signed by its host key, the address
/// naming it), so the text says which peer it is.
fn sender_text(from: &str) -> String {
    match from.rsplit_once('@') {
        Some(("owner", host)) => {
            format!("{from} (the owner of peer {host}: signed by {host}'s host key)")
        }
        _ => from.to_string(),
    }
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
