//! Legacy v1 mail (docs/protocol.md §3 "Legacy v1 mail", spec §11): envelopes routed by recipient host
//! name, atomic per envelope, deduplicated by (sender, envelope id, target); name-routed pulls of
//! envelopes only; cursor acks.

use std::collections::HashMap;

use relay_store::{AckOutcome, ItemKind, Key32, NewTarget, NEVER_EXPIRES};
use serde_json::{json, Value};

use super::enc_ad::pick_one;
use super::pull::floor_seq;
use super::push::{Committed, Prepared, TargetCache};
use super::reason::{Reason, Rejection};
use super::{expect_object, object, Caller, Relay, RelayError, Reply, Status};
use relay_wire::accept::sha256;
use relay_wire::envelope::{envelope_recipient_hosts, envelope_shape_error};
use relay_wire::js_value::{stringify_parsed, to_number};
use relay_wire::json_node::Node;
use relay_wire::keys::b64;

impl Relay {
    /// `POST /v1/relay/messages {"envelopes":[...]}` → `{"stored":N}` or `{"stored":N,"error"}`;
    /// processing stops at the first envelope that cannot be stored. Nothing stored and an error
    /// answers 413 with the same body.
    ///
    /// Error texts are the reference relay's (older hosts match on them).
    ///
    /// Each envelope is stored as sent: the text `JSON.stringify` gives for it after
    /// `JSON.parse` of the body (the sender's key order, never canonicalised), so a v2 push of
    /// the bytes a JavaScript v1 host sent is a duplicate of it.
    ///
    /// # Errors
    /// 400 `malformed JSON: ...` as [`crate::parse_json`]; 400 `bad batch` when `envelopes` is
    /// not an array; 413 as above (also `batch over limit N` and `push rate exceeded (N/min)`);
    /// 503 store failure.
    pub async fn push_v1(&self, caller: &Caller, body: &[u8]) -> Reply {
        let tree: Node<'_> = crate::parse_json_as(body)?;
        let envelopes = tree
            .get("envelopes")
            .and_then(Node::as_array)
            .ok_or_else(|| RelayError::bad_request("bad batch"))?;
        if envelopes.len() > self.limits.max_batch {
            return Err(nothing_stored(
                Reason::BatchOverLimitV1(self.limits.max_batch).into(),
            ));
        }
        let mut error: Option<Rejection> = None;
        let mut prepared = Vec::new();
        // The enrolled name of every target, for the quota texts.
        let mut names: HashMap<Key32, String> = HashMap::new();
        if !envelopes.is_empty() && !self.sender_rate.hit(&caller.key, self.now_ms()) {
            error = Some(Reason::PushRateV1(self.limits.pushes_per_minute).into());
        } else {
            let mut cache = TargetCache::default();
            for env in envelopes {
                match self.prepare_v1(caller, env, &mut cache, &mut names) {
                    Ok(p) => prepared.push(p),
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            // A store failure answers 503: no refusal to count then.
            cache.take_failure()?;
            if let Some(e) = &error {
                self.metrics.rejected(&e.reason);
            }
        }
        let mut stored = 0u64;
        // v1 items never expire: a v1 sender dropped its row on the 200 and v1 pulls carry no
        // notices, so an expiry would lose mail silently (the reference relay does the same).
        for c in self.commit(&caller.key, prepared, NEVER_EXPIRES).await? {
            match c {
                Committed::Stored { targets, .. } => {
                    stored += 1;
                    self.metrics.stored(targets.iter().all(|t| t.duplicate));
                }
                Committed::Rejected(reason) => {
                    self.metrics.rejected(&reason);
                    error.get_or_insert(reason.into());
                }
                Committed::OverQuota { target, which } => {
                    let host = names.get(&target).cloned().unwrap_or_default();
                    let reason = Reason::QuotaV1 { which, host };
                    self.metrics.rejected(&reason);
                    error.get_or_insert(reason.into());
                }
            }
        }
        relay_os::failpoint::hit("relay-after-commit");
        match error {
            None => Ok(json!({ "stored": stored })),
            Some(e) if stored == 0 => Err(nothing_stored(e)),
            Some(e) => Ok(json!({ "stored": stored, "error": e.wire_text() })),
        }
    }

    /// Check one v1 envelope and resolve its recipient hosts to keys.
    fn prepare_v1(
        &self,
        caller: &Caller,
        sent: &Node<'_>,
        cache: &mut TargetCache,
        names: &mut HashMap<Key32, String>,
    ) -> Result<Prepared, Rejection> {
        // The stored bytes, and the value every check reads (parsed back from those bytes, so
        // the checks see exactly what is stored).
        let wire = stringify_parsed(sent).into_bytes();
        let env: Value = serde_json::from_slice(&wire)
            .map_err(|_| Reason::BadEnvelope("not an object".into()))?;
        let env = &env;
        if let Some(why) = envelope_shape_error(env) {
            return Err(Reason::BadEnvelope(why).into());
        }
        let id = env
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| Reason::BadEnvelope("bad id".into()))?;
        if wire.len() as u64 > self.limits.max_item_bytes {
            return Err(Reason::EnvelopeOverSizeLimit.into());
        }
        let hosts = envelope_recipient_hosts(env);
        if hosts.is_empty() {
            return Err(Reason::NoRecipientHost.into());
        }
        let mut keys: Vec<Key32> = Vec::with_capacity(hosts.len());
        for host in hosts.iter().take(self.limits.max_targets.saturating_add(1)) {
            let (target, name) = self.route_v1(caller, host, cache)?;
            self.admit_target(cache, &caller.key, &target)
                .map_err(|r| match r {
                    Reason::SenderNotAccepted => Reason::SenderNotAcceptedBy(host.clone()),
                    _ => Reason::RecipientHostNotEnrolled(host.clone()),
                })?;
            if !keys.contains(&target) {
                keys.push(target);
                names.entry(target).or_insert(name);
            }
        }
        if keys.len() > self.limits.max_targets {
            return Err(Reason::BadTargets.into());
        }
        // v1 dedup is by envelope id: v1 senders seal again on every retry, so a target that
        // already holds this id from this sender counts as stored whatever the new bytes are
        // (an item left with no target stores nothing and counts as stored).
        keys.retain(|t| match self.store.dedup(&caller.key, id, t) {
            Ok(row) => row.is_none(),
            Err(e) => {
                cache.note_failure(e.into());
                true
            }
        });
        let wire_hash = sha256(&wire);
        let targets = keys
            .into_iter()
            .map(|target| NewTarget {
                target,
                wire: wire.clone(),
                wire_hash,
            })
            .collect();
        Ok(Prepared {
            item_id: id.to_owned(),
            kind: ItemKind::Envelope,
            targets,
        })
    }

    /// The one live key a v1 recipient host name designates, with its enrolled name. A store
    /// failure is noted in `cache` (the request answers 503).
    fn route_v1(
        &self,
        caller: &Caller,
        host: &str,
        cache: &mut TargetCache,
    ) -> Result<(Key32, String), Reason> {
        // On a store failure the request answers 503 (noted in `cache`), never this reason.
        let candidates = self.name_candidates(host).map_err(|e| {
            cache.note_failure(e);
            Reason::RecipientHostNotEnrolled(host.to_owned())
        })?;
        let many = candidates.as_ref().is_none_or(|c| c.len() > 1);
        match pick_one(caller, candidates) {
            Some(e) => Ok((e.host_pubkey, e.host_name)),
            None if many => Err(Reason::RecipientHostAmbiguous(host.to_owned())),
            None => Err(Reason::RecipientHostNotEnrolled(host.to_owned())),
        }
    }

    /// `GET /v1/relay/messages?after=S` → `{"items":[{"seq","envelope","from"}],"cursor"}`:
    /// envelopes only; the cursor is the last seq read, so it never skips an unread envelope.
    ///
    /// # Errors
    /// 503 store failure.
    pub async fn pull_v1(&self, caller: &Caller, after: Option<&str>) -> Reply {
        let after = Self::parse_after(after);
        let page = self
            .read_page(
                caller.key,
                after,
                self.limits.max_pull,
                self.limits.max_pull_bytes,
            )
            .await?;
        let cursor = page.items.last().map_or(after, |i| i.seq);
        let mut names: HashMap<Key32, String> = HashMap::new();
        let mut items = Vec::with_capacity(page.items.len());
        for i in page.items.iter().filter(|i| i.kind == ItemKind::Envelope) {
            let Ok(envelope) = serde_json::from_slice::<Value>(&i.wire) else {
                continue;
            };
            let from = match names.entry(i.sender) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    let name = self
                        .store
                        .enrolment(&i.sender)?
                        .map_or_else(|| b64(&i.sender), |e| e.host_name);
                    v.insert(name)
                }
            };
            items.push(object([
                ("seq", json!(i.seq)),
                ("envelope", envelope),
                ("from", Value::String(from.clone())),
            ]));
        }
        Ok(object([
            ("items", Value::Array(items)),
            ("cursor", json!(cursor)),
        ]))
    }

    /// `POST /v1/relay/ack {"cursor"}` → `{"ok":true}`, as the reference reads the cursor:
    /// `Number(cursor)` floored, clamped to 0..=head (missing, not a number or negative is 0
    /// and deletes nothing; past the head acks the head).
    ///
    /// # Errors
    /// 400 when the body is not an object; 503 store failure.
    pub async fn ack_v1(&self, caller: &Caller, body: &Value) -> Reply {
        let obj = expect_object(body)?;
        let cursor = floor_seq(obj.get("cursor").map_or(0.0, to_number));
        let head = self.store.cursor(&caller.key)?.head_seq;
        let outcome = self
            .write(self.store.ack(&caller.key, cursor.min(head)))
            .await?;
        relay_os::failpoint::hit("relay-ack-after-commit");
        if let AckOutcome::Acked { deleted, .. } = outcome {
            self.metrics.acked(deleted);
        }
        Ok(json!({ "ok": true }))
    }
}

/// The v1 answer when nothing was stored: 413 `{"stored":0,"error"}`.
fn nothing_stored(error: Rejection) -> RelayError {
    RelayError {
        status: Status::TooLarge,
        body: json!({ "stored": 0, "error": error.wire_text() }),
    }
}
