//! Receiver duties (spec §4, §5, §9): pull pages in seq order; an accepted or duplicate item is
//! done; anything refused is quarantined with its reason (and is then done), never dropped;
//! received_through advances over the contiguous run of done items and is written in the same
//! atomic change as the page's last item; the ack goes out only after that commit. A new epoch,
//! a head below the checkpoint or a BAD_ACK restarts the position at 0 (dedup makes repeats
//! harmless).

use serde_json::Value;

use super::enrol::expect_ok;
use super::identity::Identity;
use super::message::{owner_address, receipt_wire};
use super::retired::{peer_for_key, peer_keys};
use super::store::{Batch, Checkpoint, InboxRow, ItemKind, OutRow, QuarantineRow, RowState};
use super::sync::{Session, MAX_PAGES};
use super::trace;
use super::{now_ms, HostError};
use relay_wire::envelope::check_envelope_wire;
use relay_wire::keys::{parse_pubkey, unb64, verify_canonical};
use relay_wire::receipt::receipt_record_valid;
use relay_wire::seal::{open_envelope, verify_envelope};

/// One pulled item.
#[derive(Debug, Clone)]
pub(crate) struct Pulled {
    pub seq: u64,
    pub kind: String,
    pub item_id: String,
    pub sender_pubkey: String,
    pub wire_b64: String,
}

/// The outcome of processing one item; `Refused` goes to quarantine.
enum Outcome {
    Received,
    Duplicate,
    Settled,
    Expired,
    Refused(String),
}

/// Parse a page's items, drop those at or below `after` or repeated, and sort by seq.
pub(crate) fn page_items(body: &Value, after: u64) -> Vec<Pulled> {
    let mut items: Vec<Pulled> = body
        .get("items")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|it| {
            let s = |k: &str| it.get(k).and_then(Value::as_str).map(str::to_string);
            Some(Pulled {
                seq: it.get("seq").and_then(Value::as_u64)?,
                kind: s("kind").unwrap_or_default(),
                item_id: s("item_id").unwrap_or_default(),
                sender_pubkey: s("sender_pubkey").unwrap_or_default(),
                wire_b64: s("wire_b64").unwrap_or_default(),
            })
        })
        .filter(|p| p.seq > after)
        .collect();
    items.sort_by_key(|p| p.seq);
    items.dedup_by_key(|p| p.seq);
    items
}

impl Session<'_> {
    /// Pull, receive, checkpoint and ack until the relay has nothing more (bounded).
    ///
    /// # Errors
    /// 401 (re-enrol), an unreachable relay, or a store failure; the position stays retryable.
    pub(crate) fn pull_all(&mut self) -> Result<(), HostError> {
        for _ in 0..MAX_PAGES {
            if !self.pull_page()? {
                return Ok(());
            }
        }
        Ok(())
    }

    /// One page; `Ok(true)` when another page should follow.
    fn pull_page(&mut self) -> Result<bool, HostError> {
        let cp = self.checkpoint()?;
        let epoch = self.epoch();
        let q = format!(
            "after={}&limit={}&epoch={}",
            cp.received_through, self.relay.max_pull, epoch
        );
        let a = self.client.get("/v2/relay/items", Some(&q), true)?;
        if a.status == 409 {
            return self.epoch_from(&a.body).map(|_| true);
        }
        expect_ok(&a, "pull")?;
        let page_epoch = a.body.get("epoch").and_then(Value::as_str).unwrap_or("");
        if !page_epoch.is_empty() && page_epoch != epoch {
            self.new_epoch(page_epoch)?;
            return Ok(true);
        }
        let head = a.body.get("head_seq").and_then(Value::as_u64).unwrap_or(0);
        if head < cp.received_through {
            self.rewind()?;
            return Ok(true);
        }
        let items = page_items(&a.body, cp.received_through);
        items
            .iter()
            .for_each(|it| trace::mark("pull-answered", &it.item_id));
        let n = items.len();
        for (i, it) in items.into_iter().enumerate() {
            let last = i + 1 == n;
            let ctx = Ctx {
                name: &self.name,
                relay_pk: self.relay_pk,
                id: self.id,
            };
            let mut b = self.store.batch();
            let outcome = receive(&mut b, &ctx, &it)?;
            match &outcome {
                Outcome::Received => self.report.received += 1,
                Outcome::Duplicate => self.report.duplicates += 1,
                Outcome::Settled => self.report.receipts_settled += 1,
                Outcome::Expired => self.report.expired += 1,
                Outcome::Refused(_) => self.report.quarantined += 1,
            }
            if let Outcome::Refused(reason) = outcome {
                b.put_quarantine(&QuarantineRow {
                    relay: self.relay.url.clone(),
                    epoch: epoch.clone(),
                    seq: it.seq,
                    item_id: it.item_id.clone(),
                    kind: it.kind.clone(),
                    sender: it.sender_pubkey.clone(),
                    reason,
                    wire: unb64(&it.wire_b64).unwrap_or_else(|| it.wire_b64.clone().into_bytes()),
                    at: now_ms(),
                })?;
            }
            if last {
                let cp = Checkpoint {
                    received_through: it.seq,
                    acked_through: cp.acked_through,
                };
                b.set_checkpoint(&self.relay.url, &self.relay.relay_pubkey, cp)?;
            }
            b.commit()?;
            trace::mark("received-durable", &it.item_id);
            if !last {
                relay_os::failpoint::hit("host-after-receive-before-checkpoint");
            }
        }
        if n > 0 {
            relay_os::failpoint::hit("host-after-checkpoint-before-ack");
        }
        if !self.ack()? {
            return Ok(true);
        }
        Ok(n > 0 && a.body.get("more").and_then(Value::as_bool).unwrap_or(false))
    }

    /// Take the epoch a 409 names (re-pull from 0).
    fn epoch_from(&mut self, body: &Value) -> Result<(), HostError> {
        match body.get("epoch").and_then(Value::as_str) {
            Some(e) if !e.is_empty() => self.new_epoch(e),
            _ => Err(HostError::Relay(
                "relay answered 409 without its epoch".into(),
            )),
        }
    }

    /// Ack through received_through when the relay has not been told yet. `Ok(false)` when the
    /// position was reset (new epoch or BAD_ACK) and pulling must restart.
    fn ack(&mut self) -> Result<bool, HostError> {
        let cp = self.checkpoint()?;
        if cp.received_through <= cp.acked_through {
            return Ok(true);
        }
        let body = serde_json::json!({"epoch": self.epoch(), "through": cp.received_through});
        let a = self.client.post("/v2/relay/ack", &body, true)?;
        match a.status {
            409 => {
                self.epoch_from(&a.body)?;
                Ok(false)
            }
            400 if a.body.get("code").and_then(Value::as_str) == Some("BAD_ACK") => {
                self.rewind()?;
                Ok(false)
            }
            _ => {
                expect_ok(&a, "ack")?;
                let acked = a
                    .body
                    .get("acked_through")
                    .and_then(Value::as_u64)
                    .unwrap_or(cp.received_through);
                let cp = Checkpoint {
                    received_through: cp.received_through,
                    acked_through: acked.min(cp.received_through),
                };
                let mut b = self.store.batch();
                b.set_checkpoint(&self.relay.url, &self.relay.relay_pubkey, cp)?;
                b.commit()?;
                Ok(true)
            }
        }
    }
}

/// What processing an item needs from the session (borrowed apart from the store's batch).
struct Ctx<'c> {
    name: &'c str,
    relay_pk: [u8; 32],
    id: &'c Identity,
}

fn receive(b: &mut Batch<'_>, ctx: &Ctx, it: &Pulled) -> Result<Outcome, HostError> {
    let Some(wire) = unb64(&it.wire_b64) else {
        return Ok(Outcome::Refused("malformed: wire is not base64".into()));
    };
    match it.kind.as_str() {
        "envelope" => receive_envelope(b, ctx, it, &wire),
        "receipt" => receive_receipt(b, &wire),
        "expired" => receive_expiry(b, ctx, it, &wire),
        other => Ok(Outcome::Refused(format!(
            "malformed: unknown item kind {other:?}"
        ))),
    }
}

/// An envelope: a pinned (or retired) sender key, agentmbx shape and seal, host signature,
/// addressed to us, opens with our enc key; new → inbox plus a delivery receipt row; seen →
/// duplicate (and the receipt is sent again, since the sender is evidently still waiting for it).
fn receive_envelope(
    b: &mut Batch<'_>,
    ctx: &Ctx<'_>,
    it: &Pulled,
    wire: &[u8],
) -> Result<Outcome, HostError> {
    // Pinned or retired (spec §4): an item the peer pushed before it rotated is still its own.
    let Some(peer) = peer_for_key(b.view(), &it.sender_pubkey)? else {
        return Ok(Outcome::Refused("unknown sender".into()));
    };
    let env = match check_envelope_wire(wire, &it.item_id) {
        Ok(env) => env,
        Err(why) => return Ok(Outcome::Refused(format!("malformed: {why}"))),
    };
    let keys = peer_keys(b.view(), &peer)?;
    if !keys
        .iter()
        .filter_map(|k| parse_pubkey(k))
        .any(|pk| verify_envelope(&env, &pk))
    {
        return Ok(Outcome::Refused("bad signature".into()));
    }
    let from_host = env["from"]
        .as_str()
        .and_then(|f| f.rsplit('@').next())
        .unwrap_or("");
    if !from_host.eq_ignore_ascii_case(&peer.name) {
        return Ok(Outcome::Refused(format!(
            "from does not name the sending host {}",
            peer.name
        )));
    }
    let me = owner_address(ctx.name);
    let to_us = env["to"].as_array().is_some_and(|to| {
        to.iter()
            .any(|t| t.as_str().is_some_and(|t| t.eq_ignore_ascii_case(&me)))
    });
    if !to_us {
        return Ok(Outcome::Refused("not addressed to this host".into()));
    }
    let body = match open_envelope(&env, &ctx.id.enc) {
        Ok(body) => body,
        Err(why) => return Ok(Outcome::Refused(format!("undecryptable: {why}"))),
    };
    let now = now_ms();
    if let Some(seen) = b.view().inbox_get(&it.item_id)? {
        if let Some(mut r) = seen
            .receipt_row
            .map(|id| b.view().row(id))
            .transpose()?
            .flatten()
        {
            if r.state == RowState::Done {
                r.state = RowState::Pending;
                r.next_at = now;
                r.attempts = 0;
                b.put_row(&r)?;
            }
        }
        return Ok(Outcome::Duplicate);
    }
    let seq = b.new_receipt_seq();
    let (receipt_id, receipt) = receipt_wire(&ctx.id.host, &it.item_id, ctx.name, seq, now)?;
    let row_id = b.new_row_id();
    b.put_row(&OutRow::receipt(row_id, receipt_id, &peer, receipt, now))?;
    let s = |k: &str| env.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    b.put_inbox(&InboxRow {
        id: it.item_id.clone(),
        from: s("from"),
        sender_pubkey: peer.pubkey,
        subject: s("subject"),
        body,
        ts: s("ts"),
        relay_seq: it.seq,
        received_at: now,
        receipt_row: Some(row_id),
    })?;
    Ok(Outcome::Received)
}

/// A T218 receipt: well-formed, from a pinned peer's host and signed by its pinned or a retired
/// key (spec §4), for a message this host sent to that peer; it settles the envelope row (state
/// delivered or later).
fn receive_receipt(b: &mut Batch<'_>, wire: &[u8]) -> Result<Outcome, HostError> {
    let Ok(v) = serde_json::from_slice::<Value>(wire) else {
        return Ok(Outcome::Refused("malformed: receipt is not JSON".into()));
    };
    let rec = &v["rec"];
    let (Some(sig), true) = (
        v.get("sig").and_then(Value::as_str),
        receipt_record_valid(rec),
    ) else {
        return Ok(Outcome::Refused("malformed: invalid receipt".into()));
    };
    let recipient = rec["recipient"].as_str().unwrap_or("");
    let host = recipient.split('@').nth(1).unwrap_or("");
    let Some(peer) = b.view().peer(host)? else {
        return Ok(Outcome::Refused(format!(
            "unknown sender: {host} is not a pinned peer"
        )));
    };
    // The pinned key, then the retired ones (spec §4): a receipt signed before the peer rotated,
    // or for a row sent to its old key, still settles our row.
    let keys = peer_keys(b.view(), &peer)?;
    if !keys
        .iter()
        .filter_map(|k| parse_pubkey(k))
        .any(|pk| verify_canonical(&pk, rec, sig))
    {
        return Ok(Outcome::Refused("bad signature".into()));
    }
    let msg = rec["msg"].as_str().unwrap_or("");
    let mut found = None;
    for k in &keys {
        found = b
            .view()
            .row_by_item(msg, k)?
            .filter(|r| r.kind == ItemKind::Envelope);
        if found.is_some() {
            break;
        }
    }
    let Some(mut row) = found else {
        return Ok(Outcome::Refused(format!(
            "not a message this host sent to {host}"
        )));
    };
    if row.state == RowState::Done {
        return Ok(Outcome::Duplicate);
    }
    let now = now_ms();
    row.state = RowState::Done;
    row.settled_at = Some(now);
    row.note = Some(format!(
        "{} at {}",
        rec["state"].as_str().unwrap_or(""),
        rec["at"].as_str().unwrap_or("")
    ));
    b.put_row(&row)?;
    Ok(Outcome::Settled)
}

/// A relay expiry notice: from the pinned relay key, signed by it, for one of our rows; the row
/// ends as expired with an "Undelivered" alert (spec §6).
fn receive_expiry(
    b: &mut Batch<'_>,
    ctx: &Ctx<'_>,
    it: &Pulled,
    wire: &[u8],
) -> Result<Outcome, HostError> {
    if parse_pubkey(&it.sender_pubkey) != Some(ctx.relay_pk) {
        return Ok(Outcome::Refused(
            "expiry notice not from the pinned relay".into(),
        ));
    }
    let Ok(v) = serde_json::from_slice::<Value>(wire) else {
        return Ok(Outcome::Refused(
            "malformed: expiry notice is not JSON".into(),
        ));
    };
    let notice = &v["notice"];
    let sig = v.get("sig").and_then(Value::as_str).unwrap_or("");
    if !verify_canonical(&ctx.relay_pk, notice, sig) {
        return Ok(Outcome::Refused("bad signature".into()));
    }
    let s = |k: &str| notice.get(k).and_then(Value::as_str).unwrap_or("");
    if notice.get("type").and_then(Value::as_str) != Some("relay-expired") {
        return Ok(Outcome::Refused(
            "malformed: not a relay-expired notice".into(),
        ));
    }
    let Some(mut row) = b.view().row_by_item(s("item_id"), s("target_pubkey"))? else {
        return Ok(Outcome::Refused(
            "expiry notice for an item this host did not send".into(),
        ));
    };
    if !row.state.active() {
        return Ok(Outcome::Duplicate);
    }
    let now = now_ms();
    let text = format!(
        "Undelivered to {}: the relay expired message {} (accepted {}, expired {})",
        row.target_name,
        row.item_id,
        s("accepted_at"),
        s("expired_at")
    );
    row.state = RowState::Expired;
    row.settled_at = Some(now);
    row.note = Some(text.clone());
    b.put_row(&row)?;
    b.alert(now, "expired", text)?;
    Ok(Outcome::Expired)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{HostStore, Peer};
    use relay_wire::keys::{b64, SigningKey};

    fn item(kind: &str, sender: &str, wire_b64: &str) -> Pulled {
        Pulled {
            seq: 7,
            kind: kind.into(),
            item_id: "01KB5Z2X3Y4Z5A6B7C8D9E0F1G".into(),
            sender_pubkey: sender.into(),
            wire_b64: wire_b64.into(),
        }
    }

    fn reason(o: Outcome) -> String {
        match o {
            Outcome::Refused(r) => r,
            _ => "not refused".into(),
        }
    }

    #[test]
    fn items_that_cannot_be_received_are_refused_with_a_reason() {
        let dir = crate::hostdir::private_tempdir();
        let id = Identity::create(dir.path()).unwrap();
        let mut store = HostStore::open(dir.path()).unwrap();
        let peer = SigningKey::generate();
        let mut b = store.batch();
        b.put_peer(&Peer {
            name: "alpha".into(),
            pubkey: peer.public_b64(),
        })
        .unwrap();
        b.commit().unwrap();
        let relay = SigningKey::generate();
        let ctx = Ctx {
            name: "beta",
            relay_pk: relay.public(),
            id: &id,
        };
        let stranger = SigningKey::generate().public_b64();
        let wire = b64(b"{}");
        let mut b = store.batch();
        let cases = [
            (item("envelope", &stranger, &wire), "unknown sender"),
            (
                item("envelope", &peer.public_b64(), "%%%"),
                "malformed: wire is not base64",
            ),
            (
                item("envelope", &peer.public_b64(), &b64(b"not json")),
                "malformed: bad envelope",
            ),
            (
                item("teapot", &peer.public_b64(), &wire),
                "malformed: unknown item kind",
            ),
            (
                item("receipt", &peer.public_b64(), &wire),
                "malformed: invalid receipt",
            ),
            (
                item("expired", &peer.public_b64(), &wire),
                "expiry notice not from the pinned relay",
            ),
            (
                item(
                    "expired",
                    &relay.public_b64(),
                    &b64(b"{\"notice\":{},\"sig\":\"x\"}"),
                ),
                "bad signature",
            ),
        ];
        for (it, want) in cases {
            let got = reason(receive(&mut b, &ctx, &it).unwrap());
            assert!(got.starts_with(want), "{}: {got}", it.kind);
        }
    }

    #[test]
    fn pages_are_processed_in_seq_order_without_repeats_or_old_items() {
        let body = serde_json::json!({"items": [
            {"seq": 30, "kind": "envelope"}, {"seq": 10, "kind": "envelope"},
            {"seq": 20, "kind": "envelope"}, {"seq": 20, "kind": "envelope"},
            {"seq": 5, "kind": "envelope"}, {"kind": "no seq"}
        ]});
        let seqs: Vec<u64> = page_items(&body, 5).iter().map(|p| p.seq).collect();
        assert_eq!(seqs, vec![10, 20, 30]);
    }
}
