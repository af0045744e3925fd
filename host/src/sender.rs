//! Sender duties (spec §3, §5): seal drafts for the peer's verified enc key (its v2 ad when the
//! answer carries one, else a 0.5.6 peer's v1 pair; see [`super::enc_ad`]) and persist the wire
//! bytes before the first push; push due rows (respecting `next_at`); leave the active outbox only
//! on a valid accept; keep relay-accepted rows until the delivery receipt or the own deadline.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::enc_ad::{check_answer, PeerEncKey};
use super::enrol::expect_ok;
use super::store::{Acceptance, ItemKind, OutRow, RowState};
use super::sync::{Session, SyncOptions};
use super::trace;
use super::{now_ms, HostError};
use relay_wire::accept::wire_hash_hex;
use relay_wire::canonical::{canonical_bytes, canonical_json};
use relay_wire::envelope::check_envelope_wire;
use relay_wire::keys::{b64, parse_pubkey, verify_canonical};
use relay_wire::seal::seal_envelope;

/// Largest push body this host builds (the relay refuses over 8 MiB).
const MAX_PUSH_BODY: usize = 6 * 1024 * 1024;

/// Why an accept does not settle a row; `None` when it is valid for the row.
///
/// Valid means: status accepted or duplicate, a `relay-accept` statement signed by the pinned
/// relay key over its canonical form, naming the pinned relay, this sender and the row's item id,
/// with a target equal to the row's target key and wire hash. Returns the seq and epoch.
pub(crate) fn check_accept(
    result: &Value,
    row: &OutRow,
    relay_pk: &[u8; 32],
    relay_pub: &str,
    my_pub: &str,
) -> Result<(u64, String), String> {
    let status = result
        .get("status")
        .and_then(Value::as_str)
        .unwrap_or("missing status");
    if status != "accepted" && status != "duplicate" {
        return Err(status.to_string());
    }
    let (Some(accept), Some(sig)) = (
        result.get("accept"),
        result.get("sig").and_then(Value::as_str),
    ) else {
        return Err(format!("{status} without a signed accept"));
    };
    if !verify_canonical(relay_pk, accept, sig) {
        return Err("accept not signed by the pinned relay key".into());
    }
    let s = |k: &str| accept.get(k).and_then(Value::as_str);
    if accept.get("v").and_then(Value::as_u64) != Some(1)
        || s("type") != Some("relay-accept")
        || s("relay_pubkey") != Some(relay_pub)
        || s("sender_pubkey") != Some(my_pub)
        || s("item_id") != Some(row.item_id.as_str())
    {
        return Err("accept is for another relay, sender or item".into());
    }
    let epoch = s("epoch")
        .filter(|e| !e.is_empty())
        .ok_or("accept without an epoch")?;
    let target = accept
        .get("targets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|t| {
            t.get("host_pubkey").and_then(Value::as_str) == Some(row.target_pubkey.as_str())
                && t.get("wire_hash").and_then(Value::as_str) == Some(row.wire_hash.as_str())
        })
        .ok_or("accept does not name this target and wire hash")?;
    let seq = target
        .get("seq")
        .and_then(Value::as_u64)
        .ok_or("accept target without a seq")?;
    Ok((seq, epoch.to_string()))
}

/// Peers' enc keys (or why not) by target key, looked up once per sealing round.
type EncKeys = HashMap<String, Result<[u8; 32], String>>;

/// Leave a row pending and schedule its next attempt (`next_at`) with exponential backoff.
fn back_off(opts: &SyncOptions, r: &mut OutRow, why: &str, now: u64) {
    r.next_at = now + opts.backoff(r.attempts);
    r.attempts = r.attempts.saturating_add(1);
    r.last_error = Some(why.chars().take(300).collect());
}

impl Session<'_> {
    /// The peer's enc key from its relay answer (checked by [`check_answer`] against the pinned
    /// key and the newest v2 ad accepted for it); a newer v2 ad is remembered durably before any
    /// row is sealed for its key (the rollback guard).
    ///
    /// The outer error (unreachable relay, 401, store) ends the step; the inner one backs the row off.
    fn peer_enc_key(&mut self, target_pubkey: &str) -> Result<Result<[u8; 32], String>, HostError> {
        let Some(pk) = parse_pubkey(target_pubkey) else {
            return Ok(Err("pinned peer key is invalid".into()));
        };
        let q = format!("pubkey={}", encode_query(target_pubkey));
        let a = self.client.get("/v2/relay/enc-key", Some(&q), true)?;
        if a.status == 401 {
            expect_ok(&a, "enc-key lookup")?;
        }
        let newest = self.store.peer_ad(target_pubkey)?;
        match check_answer(&a, &pk, target_pubkey, newest.as_ref(), now_ms()) {
            Ok(PeerEncKey { enc, ad }) => {
                if let Some(ad) = ad.filter(|ad| newest.as_ref() != Some(ad)) {
                    let mut b = self.store.batch();
                    b.put_peer_ad(target_pubkey, &ad)?;
                    b.commit()?;
                }
                Ok(Ok(enc))
            }
            Err(why) => Ok(Err(why.to_string())),
        }
    }
}

impl Session<'_> {
    /// Seal every draft whose peer ad verifies; the wire bytes are persisted (one atomic change)
    /// before any push, and reused on every retry.
    ///
    /// # Errors
    /// A store failure, an unreachable relay or a 401; other lookup failures back the row off.
    pub(crate) fn seal_drafts(&mut self) -> Result<(), HostError> {
        let now = now_ms();
        let drafts: Vec<OutRow> = self
            .store
            .rows()?
            .into_iter()
            .filter(|r| r.state == RowState::Draft && r.next_at <= now)
            .collect();
        let mut keys = EncKeys::new();
        for mut r in drafts {
            match self.seal_row(&mut r, &mut keys, now)? {
                Ok(()) => self.report.sealed += 1,
                Err(why) => back_off(&self.opts, &mut r, &why, now),
            }
            let mut b = self.store.batch();
            b.put_row(&r)?;
            b.commit()?;
            trace::mark("seal-durable", &r.item_id);
        }
        Ok(())
    }

    /// Seal the draft `r` for its peer's verified enc key (looked up once per target in `keys`):
    /// `Ok(Ok(()))` with `r` pending and its wire set, else `r` is unchanged and the inner error
    /// says why it cannot be sealed now. The caller commits `r`.
    ///
    /// # Errors
    /// A store failure, an unreachable relay or a 401.
    fn seal_row(
        &mut self,
        r: &mut OutRow,
        keys: &mut EncKeys,
        now: u64,
    ) -> Result<Result<(), String>, HostError> {
        let enc_key = match keys.get(&r.target_pubkey) {
            Some(k) => k.clone(),
            None => {
                let k = self.peer_enc_key(&r.target_pubkey)?;
                keys.insert(r.target_pubkey.clone(), k.clone());
                k
            }
        };
        let sealed = enc_key.and_then(|k| {
            let draft: Value = serde_json::from_str(r.draft.as_deref().unwrap_or(""))
                .map_err(|_| "draft is damaged".to_string())?;
            let env =
                seal_envelope(draft, &k, &self.name, &self.id.host).map_err(|e| e.to_string())?;
            let wire = canonical_bytes(&env);
            check_envelope_wire(&wire, &r.item_id)?;
            Ok(wire)
        });
        Ok(sealed.map(|wire| {
            r.wire_hash = wire_hash_hex(&wire);
            r.wire = Some(wire);
            r.draft = None;
            r.state = RowState::Pending;
            r.next_at = now;
            r.last_error = None;
        }))
    }

    /// Seal a draft before its first commit (the daemon's `send`): true when `r` is now pending
    /// with its wire bytes; on any failure it stays a draft, due now, for the pass to seal.
    pub(crate) fn seal_at_queue(&mut self, r: &mut OutRow) -> bool {
        let ok = matches!(self.seal_row(r, &mut EncKeys::new(), now_ms()), Ok(Ok(())));
        if ok {
            trace::mark("sealed-at-queue", &r.item_id);
        }
        ok
    }

    /// Push due pending rows in batches (bounded by `max_batch` and body size) until none is due.
    ///
    /// # Errors
    /// 401 (re-enrol), an unreachable relay (rows backed off first), or a store failure.
    pub(crate) fn push_due(&mut self) -> Result<(), HostError> {
        let mut pushed_ids = std::collections::HashSet::new();
        loop {
            let now = now_ms();
            let mut size = 0usize;
            let batch: Vec<OutRow> = self
                .store
                .rows()?
                .into_iter()
                .filter(|r| r.state == RowState::Pending && r.next_at <= now && r.wire.is_some())
                .filter(|r| !pushed_ids.contains(&r.id))
                .take_while(|r| {
                    // The first row always goes (one item is far below the relay's body cap).
                    let first = size == 0;
                    size += r.wire.as_ref().map_or(0, |w| w.len() * 4 / 3 + 200);
                    first || size <= MAX_PUSH_BODY
                })
                .take(self.relay.max_batch.max(1) as usize)
                .collect();
            if batch.is_empty() {
                return Ok(());
            }
            pushed_ids.extend(batch.iter().map(|r| r.id));
            self.push_batch(batch)?;
        }
    }

    fn push_batch(&mut self, mut rows: Vec<OutRow>) -> Result<(), HostError> {
        let items: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({"kind": r.kind.wire_name(), "item_id": r.item_id, "targets": [
                    {"host_pubkey": r.target_pubkey, "wire_b64": b64(r.wire.as_deref().unwrap_or_default())}
                ]})
            })
            .collect();
        self.report.pushed += rows.len() as u64;
        let body = json!({"items": items});
        rows.iter()
            .for_each(|r| trace::mark("push-sent", &r.item_id));
        let answer = self.client.post("/v2/relay/items", &body, true);
        rows.iter()
            .for_each(|r| trace::mark("push-answered", &r.item_id));
        let now = now_ms();
        let a = match answer {
            Ok(a) if a.status == 200 => a,
            other => {
                // Lost response, refusal or 401: the outcome is unknown, every row stays pending.
                let why = match &other {
                    Ok(a) => a.error(),
                    Err(e) => e.to_string(),
                };
                let mut b = self.store.batch();
                for r in &mut rows {
                    back_off(&self.opts, r, &why, now);
                    b.put_row(r)?;
                }
                b.commit()?;
                self.report.push_failures += rows.len() as u64;
                // A 401 re-enrols and an unreachable relay ends the pass; any other refusal
                // (429, 400, 413, 5xx) backs these rows off and lets the pass go on to pull.
                return match other {
                    Ok(a) if a.status == 401 => expect_ok(&a, "push"),
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                };
            }
        };
        relay_os::failpoint::hit("host-after-push-before-record");
        let results = a
            .body
            .get("results")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let relay_pub = self.relay.relay_pubkey.clone();
        let my_pub = self.my_pub();
        let mut checked = Vec::with_capacity(rows.len());
        for (i, r) in rows.iter().enumerate() {
            let res = results
                .get(i)
                .filter(|x| x.get("item_id").and_then(Value::as_str) == Some(r.item_id.as_str()))
                .ok_or_else(|| "missing result".to_string())
                .and_then(|x| {
                    check_accept(x, r, &self.relay_pk, &relay_pub, &my_pub)
                        .map(|ok| (ok, x.clone()))
                });
            checked.push(res);
        }
        // A new epoch in an accept re-arms older relay-accepted rows before these are recorded.
        if let Some(Ok(((_, epoch), _))) = checked.iter().find(|c| c.is_ok()) {
            let epoch = epoch.clone();
            self.new_epoch(&epoch)?;
        }
        let retention = self.relay.retention_ms;
        let mut b = self.store.batch();
        for (r, res) in rows.iter_mut().zip(checked) {
            match res {
                Ok(((seq, epoch), x)) => {
                    let accept = canonical_json(&x["accept"]);
                    let sig = x["sig"].as_str().unwrap_or_default().to_string();
                    r.acceptance = Some(Acceptance {
                        seq,
                        epoch,
                        accept,
                        sig,
                        accepted_at: now,
                    });
                    r.last_error = None;
                    if r.kind == ItemKind::Receipt {
                        r.state = RowState::Done;
                        r.settled_at = Some(now);
                    } else {
                        r.state = RowState::RelayAccepted;
                        // Fixed at the first valid accept (spec §3): a re-push after an epoch
                        // change must not move it out.
                        r.deadline
                            .get_or_insert(now + retention + self.opts.grace_ms);
                    }
                    self.report.relay_accepted += 1;
                    if x.get("status").and_then(Value::as_str) == Some("duplicate") {
                        self.report.relay_duplicates += 1;
                    }
                }
                Err(why) => {
                    back_off(&self.opts, r, &why, now);
                    self.report.push_failures += 1;
                }
            }
            b.put_row(r)?;
        }
        b.commit()?;
        rows.iter()
            .for_each(|r| trace::mark("accept-durable", &r.item_id));
        Ok(())
    }

    /// Envelope rows past their deadline without a delivery receipt become unconfirmed, with an
    /// alert (spec §3: the sender owns its deadline, whatever the relay says or doesn't); the
    /// deadline of a row never accepted is created_at + retention + grace. Receipt rows the relay
    /// never took by then are dropped without an alert (receipts are advisory).
    ///
    /// # Errors
    /// A store failure.
    pub(crate) fn enforce_deadlines(&mut self) -> Result<(), HostError> {
        let now = now_ms();
        let rows = self.store.rows()?;
        let confirmed_hosts: std::collections::HashSet<String> = rows
            .iter()
            .filter(|r| r.kind == ItemKind::Envelope && r.state == RowState::Done)
            .map(|r| r.target_pubkey.clone())
            .collect();
        let grace = self.relay.retention_ms + self.opts.grace_ms;
        let mut b = self.store.batch();
        let mut n = 0;
        for mut r in rows.into_iter().filter(|r| r.state.active()) {
            let deadline = r.deadline.unwrap_or(r.created_at + grace);
            if now < deadline {
                continue;
            }
            r.settled_at = Some(now);
            if r.kind == ItemKind::Receipt {
                // Receipts are advisory (T218): one the relay never took is dropped quietly.
                r.state = RowState::Expired;
                r.note = Some("receipt never accepted by the relay; dropped".into());
                b.put_row(&r)?;
                continue;
            }
            let text = if r.state != RowState::RelayAccepted {
                format!(
                    "Undelivered to {}: message {} was never accepted by the relay ({})",
                    r.target_name,
                    r.item_id,
                    r.last_error.as_deref().unwrap_or("no answer")
                )
            } else if confirmed_hosts.contains(&r.target_pubkey) {
                format!(
                    "Undelivered/unconfirmed to {}: no delivery receipt for message {}",
                    r.target_name, r.item_id
                )
            } else {
                format!(
                    "Undelivered/unconfirmed to {}: no delivery confirmation for message {} has ever arrived \
                    from that host; the peer may be older than 0.5.3",
                    r.target_name, r.item_id
                )
            };
            r.state = RowState::Unconfirmed;
            r.note = Some(text.clone());
            b.put_row(&r)?;
            b.alert(now, "unconfirmed", text)?;
            n += 1;
        }
        self.report.unconfirmed += n;
        b.commit()
    }
}

/// Percent-encode a base64 key for a query string (`+`, `/`, `=`).
pub fn encode_query(s: &str) -> String {
    s.bytes()
        .map(|c| match c {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (c as char).to_string()
            }
            _ => format!("%{c:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ItemKind, RowState};
    use relay_wire::accept::{accept_statement, AcceptTarget};
    use relay_wire::keys::SigningKey;

    const ITEM: &str = "01KB5Z2X3Y4Z5A6B7C8D9E0F1G";

    fn row(target: &str) -> OutRow {
        OutRow {
            id: 1,
            kind: ItemKind::Envelope,
            item_id: ITEM.into(),
            target_name: "b".into(),
            target_pubkey: target.into(),
            subject: String::new(),
            draft: None,
            wire: Some(b"wire".to_vec()),
            wire_hash: wire_hash_hex(b"wire"),
            state: RowState::Pending,
            attempts: 0,
            next_at: 0,
            created_at: 0,
            last_error: None,
            acceptance: None,
            deadline: None,
            settled_at: None,
            note: None,
        }
    }

    /// A result as the relay signs it, for `row`, by `relay`.
    fn result(relay: &SigningKey, sender: &str, r: &OutRow, status: &str, hash: &str) -> Value {
        let t = [AcceptTarget {
            host_pubkey: r.target_pubkey.clone(),
            seq: 42,
            wire_hash: hash.into(),
        }];
        let accept = accept_statement(
            &relay.public_b64(),
            "E1",
            sender,
            &r.item_id,
            &t,
            1_764_427_167_000,
        );
        let sig = relay.sign_canonical(&accept);
        json!({"item_id": r.item_id, "status": status, "targets": [{"host_pubkey": r.target_pubkey, "seq": 42}],
               "accept": accept, "sig": sig})
    }

    #[test]
    fn only_a_matching_accept_by_the_pinned_relay_settles_a_row() {
        let (relay, me, target) = (
            SigningKey::generate(),
            SigningKey::generate(),
            SigningKey::generate(),
        );
        let r = row(&target.public_b64());
        let (rp, mp) = (relay.public_b64(), me.public_b64());
        let ok = result(&relay, &mp, &r, "accepted", &r.wire_hash);
        assert_eq!(
            check_accept(&ok, &r, &relay.public(), &rp, &mp),
            Ok((42, "E1".into()))
        );
        let dup = result(&relay, &mp, &r, "duplicate", &r.wire_hash);
        assert!(check_accept(&dup, &r, &relay.public(), &rp, &mp).is_ok());

        // A bare 200 result, a rejection, a missing status.
        let bare = json!({"item_id": ITEM, "status": "accepted", "targets": []});
        assert!(check_accept(&bare, &r, &relay.public(), &rp, &mp).is_err());
        let rej =
            json!({"item_id": ITEM, "status": "rejected:quota:target queue items", "targets": []});
        assert_eq!(
            check_accept(&rej, &r, &relay.public(), &rp, &mp),
            Err("rejected:quota:target queue items".into())
        );
        assert!(check_accept(&json!({}), &r, &relay.public(), &rp, &mp).is_err());

        // Signed by another key than the pinned relay key.
        let other = SigningKey::generate();
        let forged = result(&other, &mp, &r, "accepted", &r.wire_hash);
        assert!(check_accept(&forged, &r, &relay.public(), &rp, &mp).is_err());
        // Another wire hash, target, sender or item.
        let wrong_hash = result(&relay, &mp, &r, "accepted", &wire_hash_hex(b"other"));
        assert!(check_accept(&wrong_hash, &r, &relay.public(), &rp, &mp).is_err());
        let other_target = row(&other.public_b64());
        let wrong_target = result(&relay, &mp, &other_target, "accepted", &r.wire_hash);
        assert!(check_accept(&wrong_target, &r, &relay.public(), &rp, &mp).is_err());
        let wrong_sender = result(&relay, &other.public_b64(), &r, "accepted", &r.wire_hash);
        assert!(check_accept(&wrong_sender, &r, &relay.public(), &rp, &mp).is_err());
        let mut other_item = r.clone();
        other_item.item_id = "01KB5Z2X3Y4Z5A6B7C8D9E0F1H".into();
        let wrong_item = result(&relay, &mp, &other_item, "accepted", &r.wire_hash);
        assert!(check_accept(&wrong_item, &r, &relay.public(), &rp, &mp).is_err());
        // A tampered seq breaks the signature.
        let mut tampered = ok.clone();
        tampered["accept"]["targets"][0]["seq"] = json!(43);
        assert!(check_accept(&tampered, &r, &relay.public(), &rp, &mp).is_err());
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let o = SyncOptions {
            backoff_base_ms: 100,
            backoff_cap_ms: 1_000,
            ..SyncOptions::default()
        };
        assert_eq!(
            [
                o.backoff(0),
                o.backoff(1),
                o.backoff(3),
                o.backoff(4),
                o.backoff(200)
            ],
            [100, 200, 800, 1_000, 1_000]
        );
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(encode_query("a+b/c=="), "a%2Bb%2Fc%3D%3D");
    }
}
