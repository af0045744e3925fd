//! v2 push (docs/protocol.md §3 "Push"): per-item checks in the protocol's exact order on the request
//! task (decode, hash, wire checks run in parallel across requests), then one store submission
//! for the whole request whose commit decides conflict and quotas, then accept statements signed
//! only after the commit is durable.

use std::collections::{HashMap, HashSet};

use relay_store::{
    Admission, InsertOutcome, InsertRequest, ItemKind, Key32, NewItem, NewTarget, QuotaKind,
    TargetSeq,
};
use serde_json::Value;

use super::reason::{Reason, Rejection};
use super::{item_ids, Caller, Relay, RelayError, Reply};
use relay_wire::accept::{hex, sha256, AcceptParts, AcceptTarget};
use relay_wire::canonical::write_string;
use relay_wire::envelope::envelope_wire_error;
use relay_wire::json_node::Node;
use relay_wire::keys::{b64, parse_pubkey, unb64};
use relay_wire::receipt::check_receipt_wire;

/// Longest item id, in UTF-16 code units as JavaScript counts them.
const MAX_ITEM_ID: usize = 300;

/// An item that passed every check before the commit.
pub struct Prepared {
    pub item_id: String,
    pub kind: ItemKind,
    pub targets: Vec<NewTarget>,
}

/// How an item ended after the commit.
pub enum Committed {
    Stored {
        at_ms: u64,
        targets: Vec<TargetSeq>,
    },
    Rejected(Reason),
    /// A quota of `target` would be exceeded (v2 answers `quota:<which>`; v1 has its own texts).
    OverQuota {
        target: Key32,
        which: QuotaKind,
    },
}

/// Most targets memoised per request.
const MAX_CACHED_TARGETS: usize = 4096;

/// Per-request memo of target admission, so a batch to one target reads the store once; also
/// remembers a store read failure so the request answers 503 instead of a verdict.
#[derive(Default)]
pub(crate) struct TargetCache {
    map: HashMap<Key32, Result<(), Reason>>,
    failed: Option<RelayError>,
}

impl TargetCache {
    /// Remember a store failure (the first one wins).
    pub(crate) fn note_failure(&mut self, e: RelayError) {
        self.failed.get_or_insert(e);
    }

    /// The store failure met while checking targets, if any.
    pub(crate) fn take_failure(&mut self) -> Result<(), RelayError> {
        self.failed.take().map_or(Ok(()), Err)
    }
}

/// A target's admission of a push from `sender`, from what the store read: `target not
/// enrolled` (unknown or revoked), then `sender not accepted by target` (a list that does not
/// name the sender; no list accepts everyone).
fn admits(a: &Admission, sender: &Key32) -> Result<(), Reason> {
    match &a.enrolment {
        Some(e) if e.revoked_at_ms.is_none() => {}
        _ => return Err(Reason::TargetNotEnrolled),
    }
    match &a.senders {
        Some(list) if !list.senders.contains(sender) => Err(Reason::SenderNotAccepted),
        _ => Ok(()),
    }
}

impl Relay {
    /// [`Self::push_json`] over a value tree, answered as one (for callers that hold a value
    /// and inspect the answer; the HTTP adapter passes the body's bytes and sends the text).
    ///
    /// # Errors
    /// As [`Self::push_json`].
    pub async fn push(&self, caller: &Caller, body: &Value) -> Reply {
        let bytes = serde_json::to_vec(body)
            .map_err(|_| RelayError::unavailable("push body is not JSON"))?;
        let text = self.push_json(caller, &bytes).await?;
        serde_json::from_slice(&text)
            .map_err(|_| RelayError::unavailable("push answer is not JSON"))
    }

    /// `POST /v2/relay/items` → `{"results":[...]}`, one result per item, in order, as JSON
    /// text: exactly what serialising the answer as a `serde_json::Value` gives (sorted keys),
    /// written without the value tree. A sender past its push rate is answered from a scan of
    /// the body that builds no tree ([`Self::push_rate_refused`]); otherwise the body is parsed
    /// into a borrowed [`Node`] tree (no copy of its strings: the push hot path) and pushed
    /// ([`Self::push_tree`]). The HTTP adapter runs the same steps, the large parses off its
    /// async workers.
    ///
    /// # Errors
    /// 400 `malformed JSON: ...` as [`crate::parse_json`]; 400 when `items` is not an array or
    /// holds more than `max_batch`; 503 on store failure.
    pub async fn push_json(&self, caller: &Caller, body: &[u8]) -> Result<Vec<u8>, RelayError> {
        if self.push_rate_exhausted(caller) {
            return self.push_rate_refused(body);
        }
        let tree: Node<'_> = parse_push(body)?;
        self.push_tree(caller, &tree).await
    }

    /// Whether the caller's pushes this minute are used up (nothing counted): checked before a
    /// push body is parsed, so a sender past its rate never costs a tree.
    pub fn push_rate_exhausted(&self, caller: &Caller) -> bool {
        self.sender_rate.wait(&caller.key, self.now_ms()).is_some()
    }

    /// The answer to a push whose sender is past its rate: every item `rejected:rate` with its
    /// echoed id, the same 400s as a parsed push, read by a scan that keeps only the item ids
    /// (no tree: memory is the ids, at most `max_batch` of them).
    ///
    /// # Errors
    /// As [`Self::push_json`] (no store is read).
    pub fn push_rate_refused(&self, body: &[u8]) -> Result<Vec<u8>, RelayError> {
        let max_batch = self.limits.max_batch;
        let bad_batch =
            || RelayError::bad_request(format!("batch must be an array of at most {max_batch}"));
        let ids = item_ids::scan(body, max_batch)?.ok_or_else(bad_batch)?;
        let reason: Rejection = Reason::Rate.into();
        let results = ids
            .iter()
            .map(|id| {
                self.metrics.rejected(&reason.reason);
                Some(rejected_text(id, &reason))
            })
            .collect();
        Ok(results_text(results))
    }

    /// [`Self::push_json`] over a tree already parsed (borrowed from the body, or owned when it
    /// was parsed on another thread).
    ///
    /// # Errors
    /// As [`Self::push_json`].
    pub async fn push_tree(&self, caller: &Caller, tree: &Node<'_>) -> Result<Vec<u8>, RelayError> {
        // One text for both, the reference relay's.
        let bad_batch = || {
            RelayError::bad_request(format!(
                "batch must be an array of at most {}",
                self.limits.max_batch
            ))
        };
        let items = tree
            .get("items")
            .and_then(Node::as_array)
            .filter(|items| items.len() <= self.limits.max_batch)
            .ok_or_else(bad_batch)?;
        let rate_ok = self.sender_rate.hit(&caller.key, self.now_ms());
        let mut results: Vec<Option<String>> = vec![None; items.len()];
        let mut prepared = Vec::with_capacity(items.len());
        let mut cache = TargetCache::default();
        if rate_ok {
            self.read_admissions(&caller.key, items, &mut cache).await;
        }
        let mut early = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let check = if rate_ok {
                self.prepare_v2_item(caller, item, &mut cache)
            } else {
                Err(Reason::Rate.into())
            };
            match check {
                Ok(p) => prepared.push((i, p)),
                Err(reason) => {
                    results[i] = Some(rejected_text(echoed_item_id(item), &reason));
                    early.push(reason.reason);
                }
            }
        }
        // A store failure answers 503: the refusals above are counted only when answered.
        cache.take_failure()?;
        for reason in &early {
            self.metrics.rejected(reason);
        }
        let (indexes, prepared): (Vec<usize>, Vec<Prepared>) = prepared.into_iter().unzip();
        let item_ids: Vec<String> = prepared.iter().map(|p| p.item_id.clone()).collect();
        let target_keys: Vec<Vec<(Key32, [u8; 32])>> = prepared
            .iter()
            .map(|p| p.targets.iter().map(|t| (t.target, t.wire_hash)).collect())
            .collect();
        let committed = self
            .commit(&caller.key, prepared, self.limits.retention_ms())
            .await?;
        relay_os::failpoint::hit("relay-after-commit");
        let epoch = self.epoch();
        let sender_b64 = b64(&caller.key);
        let mut accepts = Vec::with_capacity(committed.len());
        for (((i, item_id), targets), outcome) in indexes
            .into_iter()
            .zip(item_ids)
            .zip(target_keys)
            .zip(committed)
        {
            match outcome {
                Committed::Rejected(reason) => {
                    self.metrics.rejected(&reason);
                    results[i] = Some(rejected_text(&item_id, &reason.into()));
                }
                Committed::OverQuota { which, .. } => {
                    let reason = Reason::Quota(which);
                    self.metrics.rejected(&reason);
                    results[i] = Some(rejected_text(&item_id, &reason.into()));
                }
                Committed::Stored {
                    at_ms,
                    targets: seqs,
                } => {
                    accepts.push(AcceptDraft::new(i, item_id, &targets, &seqs, at_ms));
                }
            }
        }
        self.sign_accepts(&epoch, &sender_b64, accepts, &mut results);
        Ok(results_text(results))
    }

    /// Every pre-commit check of one v2 item, in docs/protocol.md's order; the reason on failure.
    fn prepare_v2_item(
        &self,
        caller: &Caller,
        item: &Node<'_>,
        cache: &mut TargetCache,
    ) -> Result<Prepared, Rejection> {
        let item_id = item
            .get("item_id")
            .and_then(Node::as_str)
            .filter(|s| !s.is_empty() && s.encode_utf16().count() <= MAX_ITEM_ID)
            .ok_or(Reason::BadItemId)?;
        let kind = match item.get("kind").and_then(Node::as_str) {
            Some("envelope") => ItemKind::Envelope,
            Some("receipt") => ItemKind::Receipt,
            _ => return Err(Reason::BadKind.into()),
        };
        let targets = item
            .get("targets")
            .and_then(Node::as_array)
            .filter(|t| !t.is_empty() && t.len() <= self.limits.max_targets)
            .ok_or(Reason::BadTargets)?;
        let mut seen = HashSet::with_capacity(targets.len());
        let mut out = Vec::with_capacity(targets.len());
        for t in targets {
            let target = t
                .get("host_pubkey")
                .and_then(Node::as_str)
                .and_then(parse_pubkey)
                .ok_or(Reason::TargetNotEnrolled)?;
            self.admit_target(cache, &caller.key, &target)?;
            if !seen.insert(target) {
                return Err(Reason::DuplicateTarget.into());
            }
            let wire = t
                .get("wire_b64")
                .and_then(Node::as_str)
                .and_then(unb64)
                .ok_or(Reason::BadWire)?;
            if wire.len() as u64 > self.limits.max_item_bytes {
                return Err(Reason::ItemOverSizeLimit.into());
            }
            check_wire(kind, &wire, item_id, &caller.key)?;
            let wire_hash = sha256(&wire);
            out.push(NewTarget {
                target,
                wire,
                wire_hash,
            });
        }
        Ok(Prepared {
            item_id: item_id.to_owned(),
            kind,
            targets: out,
        })
    }

    /// Read the admission of every target named in `items` (up to the cache's bound) in one
    /// store read, without blocking the worker, into `cache`: the per-item checks then find
    /// their verdicts there in their own order. A target it cannot parse is left to those
    /// checks; a failed read is remembered (the request answers 503).
    pub(crate) async fn read_admissions(
        &self,
        sender: &Key32,
        items: &[Node<'_>],
        cache: &mut TargetCache,
    ) {
        let mut keys = Vec::new();
        let mut seen = HashSet::new();
        let named = items
            .iter()
            .filter_map(|item| item.get("targets").and_then(Node::as_array))
            .flatten()
            .filter_map(|t| t.get("host_pubkey").and_then(Node::as_str));
        for target in named.filter_map(parse_pubkey) {
            if seen.len() >= MAX_CACHED_TARGETS {
                break;
            }
            if seen.insert(target) {
                keys.push(target);
            }
        }
        match self.store.admissions(&keys).await {
            Ok(read) => {
                for (target, a) in keys.iter().zip(&read) {
                    cache.map.insert(*target, admits(a, sender));
                }
            }
            Err(e) => cache.note_failure(e.into()),
        }
    }

    /// `target not enrolled` (unknown or revoked), then `sender not accepted by target`, from
    /// `cache` or else read now. After a failed store read nothing more is read: the request
    /// answers 503 and the target reads as not enrolled here.
    pub(crate) fn admit_target(
        &self,
        cache: &mut TargetCache,
        sender: &Key32,
        target: &Key32,
    ) -> Result<(), Reason> {
        if let Some(r) = cache.map.get(target) {
            return r.clone();
        }
        if cache.failed.is_some() {
            return Err(Reason::TargetNotEnrolled);
        }
        let r = match self.store.admission(target) {
            Ok(a) => admits(&a, sender),
            Err(e) => {
                cache.note_failure(e.into());
                return Err(Reason::TargetNotEnrolled);
            }
        };
        if cache.map.len() < MAX_CACHED_TARGETS {
            cache.map.insert(*target, r.clone());
        }
        r
    }

    /// Submit prepared items together (one store submission, each item atomic) and map outcomes.
    /// Items expire after `retention_ms` (`relay_store::NEVER_EXPIRES`: never).
    ///
    /// # Errors
    /// 503 when the store fails: nothing is answered as accepted; 401 `bad relay hop` when the
    /// sender's enrolment is no longer live at the commit.
    pub async fn commit(
        &self,
        sender: &Key32,
        prepared: Vec<Prepared>,
        retention_ms: u64,
    ) -> Result<Vec<Committed>, RelayError> {
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let quotas = self.limits.quotas();
        let reqs: Vec<InsertRequest> = prepared
            .into_iter()
            .map(|p| InsertRequest {
                item: NewItem {
                    kind: p.kind,
                    item_id: p.item_id,
                    sender: *sender,
                    targets: p.targets,
                },
                quotas,
                retention_ms,
                require_live_sender: true,
            })
            .collect();
        self.metrics.items_per_submit.observe(reqs.len() as f64);
        // A push to a target is a sighting of it (issue 13: last seen); noted once stored.
        let target_keys: Vec<Vec<Key32>> = reqs
            .iter()
            .map(|r| r.item.targets.iter().map(|t| t.target).collect())
            .collect();
        relay_os::failpoint::hit("relay-before-commit");
        let outcomes = self.write(self.store.insert_many(reqs)).await?;
        // The sender was revoked (rotated, expired) after its hop was checked: answered as a
        // revoked key's hop is, and nothing of it was stored (the check is per item, against
        // the one state the whole submission commits on).
        if outcomes
            .iter()
            .any(|o| matches!(o, InsertOutcome::SenderNotEnrolled))
        {
            return Err(RelayError::bad_hop());
        }
        // Durable now: wake whoever waits for these targets (never before the fsync).
        self.wake
            .queued(outcomes.iter().zip(&target_keys).flat_map(|(o, keys)| {
                let seqs = match o {
                    InsertOutcome::Stored { targets, .. } => targets.as_slice(),
                    _ => &[],
                };
                keys.iter()
                    .zip(seqs)
                    .filter(|(_, s)| !s.duplicate)
                    .map(|(k, s)| (*k, s.seq))
            }));
        Ok(outcomes
            .into_iter()
            .zip(target_keys)
            .map(|(o, keys)| match o {
                InsertOutcome::Stored { at_ms, targets } => {
                    keys.iter().for_each(|k| self.note_seen(k));
                    Committed::Stored { at_ms, targets }
                }
                InsertOutcome::Conflict { .. } => Committed::Rejected(Reason::Conflict),
                InsertOutcome::Quota { target, which } => Committed::OverQuota { target, which },
                InsertOutcome::TargetNotEnrolled { .. } | InsertOutcome::SenderNotEnrolled => {
                    Committed::Rejected(Reason::TargetNotEnrolled)
                }
            })
            .collect())
    }

    /// Fill in the accepted or duplicate results: each accept statement's canonical text is
    /// built once, all of them are signed by the relay key as one batch, and each (seqs up to
    /// 2^53) is answered as is:
    /// `{"accept","item_id","sig","status","targets":[{"host_pubkey","seq"}]}`.
    fn sign_accepts(
        &self,
        epoch: &str,
        sender_b64: &str,
        accepts: Vec<AcceptDraft>,
        results: &mut [Option<String>],
    ) {
        let parts = |a| AcceptDraft::parts(a, &self.pubkey_b64, epoch, sender_b64);
        let canonicals: Vec<String> = accepts.iter().map(|a| parts(a).canonical()).collect();
        let signed: Vec<&[u8]> = canonicals.iter().map(String::as_bytes).collect();
        let sigs = self.key.sign_many(&signed);
        for ((a, canonical), sig) in accepts.iter().zip(canonicals).zip(sigs) {
            self.metrics.stored(a.all_dup);
            let accept = parts(a).answer_text(canonical);
            results[a.index] = Some(accepted_text(
                &accept, &a.item_id, &sig, a.all_dup, &a.targets,
            ));
        }
    }
}

/// A stored item waiting for its signed accept: where its result goes and what the accept
/// statement names.
struct AcceptDraft {
    index: usize,
    item_id: String,
    targets: Vec<AcceptTarget>,
    at_ms: u64,
    /// Every target was already stored (a retry): the status is `duplicate`.
    all_dup: bool,
}

impl AcceptDraft {
    /// The accept statement of this item.
    fn parts<'a>(
        &'a self,
        relay_pubkey: &'a str,
        epoch: &'a str,
        sender_pubkey: &'a str,
    ) -> AcceptParts<'a> {
        AcceptParts {
            relay_pubkey,
            epoch,
            sender_pubkey,
            item_id: &self.item_id,
            targets: &self.targets,
            at_ms: self.at_ms,
        }
    }

    fn new(
        index: usize,
        item_id: String,
        targets: &[(Key32, [u8; 32])],
        seqs: &[TargetSeq],
        at_ms: u64,
    ) -> AcceptDraft {
        AcceptDraft {
            index,
            item_id,
            targets: targets
                .iter()
                .zip(seqs)
                .map(|((t, h), s)| AcceptTarget {
                    host_pubkey: b64(t),
                    seq: s.seq,
                    wire_hash: hex(h),
                })
                .collect(),
            at_ms,
            all_dup: seqs.iter().all(|s| s.duplicate),
        }
    }
}

/// `{"accept","item_id","sig","status","targets":[{"host_pubkey","seq"}]}` with `accept`
/// already JSON text; keys in `serde_json`'s sorted order, seqs as exact integers.
fn accepted_text(
    accept: &str,
    item_id: &str,
    sig: &str,
    all_dup: bool,
    targets: &[AcceptTarget],
) -> String {
    let mut out =
        String::with_capacity(accept.len() + sig.len() + item_id.len() + 96 * (targets.len() + 1));
    out.push_str("{\"accept\":");
    out.push_str(accept);
    out.push_str(",\"item_id\":");
    write_string(&mut out, item_id);
    out.push_str(",\"sig\":");
    write_string(&mut out, sig);
    out.push_str(if all_dup {
        ",\"status\":\"duplicate\",\"targets\":["
    } else {
        ",\"status\":\"accepted\",\"targets\":["
    });
    for (i, t) in targets.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"host_pubkey\":");
        write_string(&mut out, &t.host_pubkey);
        out.push_str(",\"seq\":");
        out.push_str(&t.seq.to_string());
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// A push body parsed into its borrowed tree (the same parser and error texts as
/// [`crate::parse_json`]).
///
/// # Errors
/// 400 `malformed JSON: ...`.
pub fn parse_push(body: &[u8]) -> Result<Node<'_>, RelayError> {
    crate::parse_json_as(body)
}

/// The `item_id` a rejected result echoes: the item's `item_id` when it is a string, else `""`
/// (a `null` or non-object item, a missing or non-string `item_id`), as the reference relay
/// answers; never an echo of another value.
fn echoed_item_id<'a>(item: &'a Node<'_>) -> &'a str {
    item.get("item_id").and_then(Node::as_str).unwrap_or("")
}

/// A rejected result's JSON text: `{"item_id","status":"rejected:<reason>","targets":[]}`,
/// exactly as `serde_json` prints that object.
fn rejected_text(item_id: &str, reason: &Rejection) -> String {
    let mut out = String::with_capacity(96);
    out.push_str("{\"item_id\":");
    write_string(&mut out, item_id);
    out.push_str(",\"status\":");
    write_string(&mut out, &format!("rejected:{}", reason.wire_text()));
    out.push_str(",\"targets\":[]}");
    out
}

/// `{"results":[...]}` from the results' JSON texts, in order (a missing one prints `null`).
fn results_text(results: Vec<Option<String>>) -> Vec<u8> {
    let size = 16
        + results
            .iter()
            .map(|r| r.as_ref().map_or(4, String::len) + 1)
            .sum::<usize>();
    let mut out = String::with_capacity(size);
    out.push_str("{\"results\":[");
    for (i, r) in results.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(r.as_deref().unwrap_or("null"));
    }
    out.push_str("]}");
    out.into_bytes()
}

/// The §5 wire check for the item's kind.
pub fn check_wire(
    kind: ItemKind,
    wire: &[u8],
    item_id: &str,
    sender: &Key32,
) -> Result<(), Rejection> {
    match kind {
        ItemKind::Envelope => envelope_wire_error(wire, item_id),
        ItemKind::Receipt => check_receipt_wire(wire, item_id, sender),
        ItemKind::Expired => return Err(Reason::BadKind.into()),
    }
    .map_err(Rejection::of_wire_check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object;
    use relay_wire::accept::accept_statement;
    use relay_wire::keys::SigningKey;
    use serde_json::json;

    /// The answer as it was built before (a value tree serialised by `serde_json`).
    fn reference_answer(
        parts: &AcceptParts<'_>,
        key: &SigningKey,
        all_dup: bool,
    ) -> (String, Value) {
        let accept = accept_statement(
            parts.relay_pubkey,
            parts.epoch,
            parts.sender_pubkey,
            parts.item_id,
            parts.targets,
            parts.at_ms,
        );
        let sig = key.sign_canonical(&accept);
        let brief: Vec<Value> = parts
            .targets
            .iter()
            .map(|t| json!({ "host_pubkey": t.host_pubkey, "seq": t.seq }))
            .collect();
        let result = object([
            ("item_id", Value::String(parts.item_id.to_owned())),
            (
                "status",
                json!(if all_dup { "duplicate" } else { "accepted" }),
            ),
            ("targets", Value::Array(brief)),
            ("accept", accept),
            ("sig", Value::String(sig.clone())),
        ]);
        (sig, result)
    }

    #[test]
    fn result_texts_equal_the_value_answers() {
        let key = SigningKey::from_seed(&[4u8; 32]);
        let strings = relay_wire::test_util::adversarial_strings(21, 600);
        let mut texts = Vec::new();
        let mut values = Vec::new();
        for (n, w) in strings.chunks_exact(3).enumerate() {
            let targets: Vec<AcceptTarget> = (0..1 + n % 3)
                .map(|i| AcceptTarget {
                    host_pubkey: b64(&[i as u8; 32]),
                    seq: [1, 77, (1 << 53) + 1, u64::MAX][(n + i) % 4],
                    wire_hash: hex(&[n as u8; 32]),
                })
                .collect();
            let parts = AcceptParts {
                relay_pubkey: &w[0],
                epoch: &w[1],
                sender_pubkey: "c2VuZGVy",
                item_id: &w[2],
                targets: &targets,
                at_ms: 1_795_963_620_919 + n as u64,
            };
            let all_dup = n % 2 == 0;
            let canonical = parts.canonical();
            let sig = key.sign(canonical.as_bytes());
            let (want_sig, want) = reference_answer(&parts, &key, all_dup);
            assert_eq!(sig, want_sig, "the signed bytes are the canonical accept");
            let text = accepted_text(
                &parts.answer_text(canonical),
                &w[2],
                &sig,
                all_dup,
                &targets,
            );
            assert_eq!(text, want.to_string());
            texts.push(Some(text));
            values.push(want);
        }
        texts.push(None);
        values.push(Value::Null);
        assert_eq!(
            results_text(texts),
            object([("results", Value::Array(values))])
                .to_string()
                .into_bytes()
        );
        assert_eq!(results_text(Vec::new()), b"{\"results\":[]}");
    }

    /// The text is what serialising the object as a value gives; the echoed id is the item's
    /// string `item_id`, else `""` (a null or non-object item, a missing or other `item_id`).
    #[test]
    fn rejected_texts_equal_the_value_answers() {
        let reason: Rejection = Reason::BadKind.into();
        let mut items: Vec<(String, Value)> = [
            r#"{"item_id":17}"#,
            r#"{"item_id":-0}"#,
            r#"{"item_id":1.50}"#,
            r#"{"item_id":{"b":1,"a":[true,null]}}"#,
            r#"{"item_id":[]}"#,
            r#"{"item_id":null}"#,
            r#"{"item_id":false}"#,
            r#"{"kind":"x"}"#,
            "null",
            "5",
            r#""x""#,
            "[]",
        ]
        .iter()
        .map(|s| ((*s).to_owned(), json!("")))
        .collect();
        items.push((
            r#"{"item_id":"\u0001\"\u00e9\u2028"}"#.into(),
            json!("\u{1}\"é\u{2028}"),
        ));
        for s in relay_wire::test_util::adversarial_strings(9, 200) {
            items.push((json!({ "item_id": s }).to_string(), json!(s)));
        }
        for (text, want_id) in items {
            let item: Node<'_> = crate::parse_json_as(text.as_bytes()).unwrap();
            let want = json!({
                "item_id": want_id,
                "status": format!("rejected:{}", reason.wire_text()),
                "targets": [],
            })
            .to_string();
            assert_eq!(
                rejected_text(echoed_item_id(&item), &reason),
                want,
                "{text}"
            );
        }
    }
}

#[cfg(test)]
mod admission_tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::Limits;
    use relay_keyspace::{EnrolRequest, OpenOptions, Store};
    use relay_store::SystemClock;
    use relay_wire::keys::SigningKey;

    fn enrol(relay: &Relay, pk: Key32, name: &str) -> relay_store::Enrolment {
        relay
            .store()
            .enrol(EnrolRequest {
                host_pubkey: pk,
                host_name: name.into(),
                owner_fp: String::new(),
                account: None,
                authorized_by: "host-key".into(),
                authority_rank: 0,
                max_live: 100,
                invite: relay_store::InviteClaim::NotNeeded,
                org: None,
                client_id: None,
                denied_if: Vec::new(),
            })
            .wait()
            .unwrap();
        relay.store().enrolment(&pk).unwrap().unwrap()
    }

    /// The admission read runs before the per-item checks: when it fails the push answers
    /// 503 (retry), never a verdict read from a store it could not read.
    #[test]
    fn a_push_whose_admission_read_fails_answers_503_not_a_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = Arc::new(Store::open(dir.path(), OpenOptions::default()).unwrap());
        let relay = rt
            .block_on(crate::startup::start(
                store,
                SigningKey::generate(),
                Limits::default(),
                Arc::new(SystemClock),
            ))
            .unwrap();
        let (sender, target) = ([1u8; 32], SigningKey::generate().public());
        let caller = Caller {
            key: sender,
            enrolment: enrol(&relay, sender, "sender"),
        };
        enrol(&relay, target, "target");
        // An admitted target and a wire that fails its check: a verdict for the item.
        let body = format!(
            r#"{{"items":[{{"item_id":"i1","kind":"envelope","targets":[{{"host_pubkey":"{}","wire_b64":"AAAA"}}]}}]}}"#,
            b64(&target)
        );
        let answer = rt
            .block_on(relay.push_json(&caller, body.as_bytes()))
            .unwrap();
        assert!(
            String::from_utf8_lossy(&answer).contains(r#""status":"rejected:bad wire""#),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        relay.store().close().unwrap();
        let err = rt
            .block_on(relay.push_json(&caller, body.as_bytes()))
            .expect_err("the admission read failed");
        assert_eq!(err.status, crate::Status::Unavailable, "{:?}", err.body);
    }
}
