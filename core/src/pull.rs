//! Pull and ack (docs/protocol.md §3 "Pull", "Ack"): pages bounded by count and bytes, the epoch check,
//! and acks that never pass the head (`BAD_ACK`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use relay_store::{AckOutcome, Page};
use serde_json::{json, Value};

use std::time::Duration;

use super::code::ErrorCode;
use super::wake::{Ticket, MAX_WAIT_SECS};
use super::{Caller, Relay, RelayError, Reply, Status};
use relay_wire::js_value::string_to_number;

/// The reference relay's answer text for a pull or an ack of another epoch.
const EPOCH_CHANGED: &str = "relay epoch changed: pull again from 0";
/// The reference relay's text for an ack above the head (hosts treat it as an epoch change).
const ACK_BEYOND_HEAD: &str = "ack beyond the last allocated seq: treat as an epoch change";
/// mbx-relay's own text for a `through` that is not a non-negative integer (the reference
/// floors it; we delete nothing on a malformed ack).
const ACK_NOT_A_SEQ: &str = "ack through is not a non-negative integer";

/// A pull under way, between [`Relay::pull_open`] and its answer: only what its pages need
/// (kept small: thousands may wait). Its pages are read with [`Relay::pull_page`], each under a
/// byte bound the caller chose just before the read (the HTTP layer's memory account charges a
/// page before it is read, the first and a woken one alike); [`Relay::pull_wake`] waits between.
pub struct Pull {
    /// Registered for wake-ups when the pull may wait (`wait` asked and under the waiter cap).
    ticket: Option<Ticket>,
    deadline: tokio::time::Instant,
    target: relay_store::Key32,
    after: u64,
    limit: usize,
    /// The epoch the answer carries (checked when the pull started).
    epoch: String,
    /// The `epoch` the pull asked for, checked again after an epoch change.
    asked_epoch: Option<String>,
    /// The key's enrolment was looked at again before the first wait.
    checked_live: bool,
    /// Evicted by a newer wait of the key, or shutdown: the next page is the answer.
    ending: bool,
}

/// The query of a pull, as received (each parameter absent or its raw text).
#[derive(Debug, Clone, Copy, Default)]
pub struct PullQuery<'a> {
    /// `after`: the last seq the caller holds.
    pub after: Option<&'a str>,
    /// `limit`: most items wanted.
    pub limit: Option<&'a str>,
    /// `epoch`: the epoch the caller's `after` belongs to.
    pub epoch: Option<&'a str>,
    /// Seconds to hold the request while the queue is empty (mbx-relay extension).
    pub wait: Option<&'a str>,
}

impl Relay {
    /// `after` as the reference relay reads it: `Number(raw)` floored (`12.5` starts after
    /// 12, so at the next seq); missing, not a number or negative is 0.
    pub(crate) fn parse_after(raw: Option<&str>) -> u64 {
        raw.map_or(0, |s| floor_seq(string_to_number(s)))
    }

    /// The current epoch when `given` is it; else `Err` with the current one.
    fn epoch_is(&self, given: Option<&str>) -> Result<String, String> {
        // Another process on a shared store may have moved the epoch on (`epoch_watch`).
        self.recheck_epoch(given);
        let current = self.epoch();
        match given {
            Some(e) if e == current => Ok(current),
            _ => Err(current),
        }
    }

    /// 409 `{"error":"relay epoch changed: pull again from 0","epoch":CURRENT}` unless `given`
    /// is the current epoch (the pull's answer: no `code`, as the reference sends it).
    fn check_epoch(&self, given: Option<&str>) -> Result<String, RelayError> {
        self.epoch_is(given).map_err(|current| RelayError {
            status: Status::Conflict,
            body: json!({ "error": EPOCH_CHANGED, "epoch": current }),
        })
    }

    /// `GET /v2/relay/items?after&limit&epoch&wait` for the caller's queue: the checks and,
    /// with `wait` (docs/protocol.md §8), the waiter's registration (before any read, so a push
    /// that becomes durable after it wakes the pull); past the relay's waiter cap the pull
    /// does not wait. Nothing is read yet: the caller reads pages with [`Relay::pull_page`]
    /// (the first at once) and waits with [`Relay::pull_wake`] while a page is not the answer,
    /// so it can park the wait as a small future and free the request's own state.
    ///
    /// # Errors
    /// 400 bad `wait`; 409 wrong epoch.
    pub fn pull_open(&self, caller: &Caller, q: PullQuery<'_>) -> Result<Pull, RelayError> {
        let epoch = self.pull_epoch(q.epoch)?;
        let after = Self::parse_after(q.after);
        let wait = parse_wait(q.wait)?;
        let limit = pull_limit(q.limit, self.limits.max_pull);
        let ticket = match wait {
            Some(w) => self.wake.register(caller.key).ok().map(|t| (t, w)),
            None => None,
        };
        let now = tokio::time::Instant::now();
        let (ticket, deadline) = match ticket {
            Some((t, w)) => (Some(t), now + w),
            None => (None, now),
        };
        Ok(Pull {
            ticket,
            deadline,
            target: caller.key,
            after,
            limit,
            epoch,
            asked_epoch: q.epoch.map(str::to_owned),
            checked_live: false,
            ending: false,
        })
    }

    /// Read one page of `pull` of about `max_bytes` (at most `--max-pull-bytes`; at least one
    /// item) off the async workers: its answer's JSON text (see [`page_json`]) when the page
    /// holds items, the pull does not wait, its deadline passed or it is ending; `None` when
    /// it should wait ([`Relay::pull_wake`]) and read again.
    ///
    /// # Errors
    /// 401 `bad relay hop` when the key lost its live enrolment before the first wait; 503 store
    /// failure.
    pub async fn pull_page(
        &self,
        pull: &mut Pull,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, RelayError> {
        let max_bytes = max_bytes.min(self.limits.max_pull_bytes);
        let (epoch, after) = (pull.epoch.clone(), pull.after);
        let may_wait = pull.ticket.is_some() && !pull.ending;
        let deadline = pull.deadline;
        let text = self
            .read_page_then(pull.target, after, pull.limit, max_bytes, move |page| {
                let answer =
                    !may_wait || !page.items.is_empty() || tokio::time::Instant::now() >= deadline;
                answer.then(|| page_json(&epoch, after, &page))
            })
            .await?;
        if text.is_none() && !pull.checked_live {
            // A revocation between the hop check and the registration woke nobody: look again.
            self.ensure_live(&pull.target)?;
            pull.checked_live = true;
        }
        Ok(text)
    }

    /// Wait for a wake of `pull` or its deadline (then read its page again).
    ///
    /// # Errors
    /// 401 `bad relay hop` when the key is revoked, rotated away or expired while waiting
    /// ([`super::revoke_watch`]); 409 when an epoch change leaves the pull's `epoch` behind.
    pub async fn pull_wake(&self, pull: &mut Pull) -> Result<(), RelayError> {
        let Some(ticket) = &pull.ticket else {
            return Ok(());
        };
        let woken = tokio::select! {
            w = ticket.woken() => Some(w),
            () = tokio::time::sleep_until(pull.deadline) => None,
        };
        match woken {
            // The key lost its enrolment: the answer its next hop would get, now.
            Some(w) if w.revoked() => return Err(RelayError::bad_hop()),
            // An epoch change answers as a fresh pull would (409 when `epoch` is gone).
            Some(w) if w.epoch() => pull.epoch = self.pull_epoch(pull.asked_epoch.as_deref())?,
            // Evicted by a newer wait of this key, or shutdown: the next page is the answer.
            Some(w) if w.ending() => pull.ending = true,
            _ => {}
        }
        Ok(())
    }

    /// The epoch a pull answers with: the given one if current (else 409), or the current one.
    fn pull_epoch(&self, given: Option<&str>) -> Result<String, RelayError> {
        match given {
            Some(e) => self.check_epoch(Some(e)),
            None => Ok(self.epoch()),
        }
    }

    /// The last seq allocated for `target` (0 if none), from durable state.
    ///
    /// # Errors
    /// 503 store failure.
    pub fn head_seq(&self, target: &relay_store::Key32) -> Result<u64, RelayError> {
        Ok(self.store.cursor(target)?.head_seq)
    }

    /// Read one page of at most `limit` items and about `max_bytes` off the async workers (a
    /// page may be megabytes).
    pub(crate) async fn read_page(
        &self,
        target: relay_store::Key32,
        after: u64,
        limit: usize,
        max_bytes: u64,
    ) -> Result<relay_store::Page, RelayError> {
        self.read_page_then(target, after, limit, max_bytes, |page| page)
            .await
    }

    /// Read one bounded page and turn it into `T` with `then`, both on a blocking thread.
    async fn read_page_then<T: Send + 'static>(
        &self,
        target: relay_store::Key32,
        after: u64,
        limit: usize,
        max_bytes: u64,
        then: impl FnOnce(relay_store::Page) -> T + Send + 'static,
    ) -> Result<T, RelayError> {
        let store = self.store.clone();
        let t = std::time::Instant::now();
        let read = tokio::task::spawn_blocking(move || {
            store
                .pull(&target, after, limit, max_bytes)
                .map(|page| (page.items.len(), then(page)))
        })
        .await;
        self.metrics.store_read.observe(t.elapsed().as_secs_f64());
        let (items, answer) = read
            .map_err(|_| RelayError::unavailable("store read was interrupted"))?
            .map_err(RelayError::from)?;
        // Every page read here is answered (an empty one while a pull waits counts nothing).
        self.metrics.delivered(items);
        Ok(answer)
    }

    /// `POST /v2/relay/ack {"epoch","through"}`.
    ///
    /// # Errors
    /// 409 `EPOCH` (with `epoch` and `head_seq`) for a missing or wrong epoch; 400 `BAD_ACK`
    /// when `through` is not a non-negative integer or is above the head; 503 store failure.
    pub async fn ack(&self, caller: &Caller, body: &Value) -> Reply {
        let obj = super::expect_object(body)?;
        let answer =
            |status, code: ErrorCode, text: &str, epoch: String, head_seq: u64| RelayError {
                status,
                body: json!({
                    "error": text,
                    "code": code.wire(),
                    "epoch": epoch,
                    "head_seq": head_seq,
                }),
            };
        let epoch = match self.epoch_is(obj.get("epoch").and_then(Value::as_str)) {
            Ok(e) => e,
            Err(current) => {
                let head_seq = self.store.cursor(&caller.key)?.head_seq;
                return Err(answer(
                    Status::Conflict,
                    ErrorCode::Epoch,
                    EPOCH_CHANGED,
                    current,
                    head_seq,
                ));
            }
        };
        let Some(through) = obj.get("through").and_then(Value::as_u64) else {
            let head_seq = self.store.cursor(&caller.key)?.head_seq;
            return Err(answer(
                Status::BadRequest,
                ErrorCode::BadAck,
                ACK_NOT_A_SEQ,
                epoch,
                head_seq,
            ));
        };
        let outcome = self.write(self.store.ack(&caller.key, through)).await?;
        relay_os::failpoint::hit("relay-ack-after-commit");
        match outcome {
            AckOutcome::Acked {
                acked_through,
                deleted,
                head_seq,
            } => {
                self.metrics.acked(deleted);
                Ok(
                    json!({ "acked_through": acked_through, "deleted": deleted, "head_seq": head_seq }),
                )
            }
            AckOutcome::BeyondHead { head_seq } => Err(answer(
                Status::BadRequest,
                ErrorCode::BadAck,
                ACK_BEYOND_HEAD,
                epoch,
                head_seq,
            )),
        }
    }
}

/// The pull answer as compact JSON text, exactly what serialising it as a `serde_json::Value`
/// gives (keys in sorted order, the same escaping):
/// `{"epoch","head_seq","items":[{"item_id","kind","sender_pubkey","seq","wire_b64"}],
/// "last_seq","more"}`. Written straight into one buffer sized up front, base64 included, with no
/// value tree or string per item: this is the hot path of draining a queue.
pub(crate) fn page_json(epoch: &str, after: u64, page: &Page) -> Vec<u8> {
    const FIXED: usize = 128;
    const PER_ITEM: usize = 128;
    let last_seq = page.items.last().map_or(after, |i| i.seq);
    let size = FIXED
        + epoch.len() * 6
        + page
            .items
            .iter()
            .map(|i| PER_ITEM + i.item_id.len() * 6 + b64_len(i.wire.len()))
            .sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(b"{\"epoch\":");
    json_str(&mut out, epoch);
    out.extend_from_slice(b",\"head_seq\":");
    json_u64(&mut out, page.head_seq);
    out.extend_from_slice(b",\"items\":[");
    for (n, i) in page.items.iter().enumerate() {
        if n > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"item_id\":");
        json_str(&mut out, &i.item_id);
        out.extend_from_slice(b",\"kind\":");
        json_str(&mut out, i.kind.as_str());
        // Standard base64 never needs JSON escaping.
        out.extend_from_slice(b",\"sender_pubkey\":\"");
        push_b64(&mut out, &i.sender);
        out.extend_from_slice(b"\",\"seq\":");
        json_u64(&mut out, i.seq);
        out.extend_from_slice(b",\"wire_b64\":\"");
        push_b64(&mut out, &i.wire);
        out.extend_from_slice(b"\"}");
    }
    out.extend_from_slice(b"],\"last_seq\":");
    json_u64(&mut out, last_seq);
    out.extend_from_slice(if page.more {
        b",\"more\":true}"
    } else {
        b",\"more\":false}"
    });
    out
}

/// Padded standard base64 length of `n` bytes.
fn b64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Append the padded standard base64 of `bytes`, encoded in place.
fn push_b64(out: &mut Vec<u8>, bytes: &[u8]) {
    let at = out.len();
    out.resize(at + b64_len(bytes.len()), 0);
    // The slice is exactly the encoded length, so this cannot fail.
    let n = STANDARD.encode_slice(bytes, &mut out[at..]).unwrap_or(0);
    out.truncate(at + n);
}

/// Append a JSON string (quoted, escaped as serde_json escapes it).
fn json_str(out: &mut Vec<u8>, s: &str) {
    // Writing a &str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
}

/// Append a JSON integer.
fn json_u64(out: &mut Vec<u8>, n: u64) {
    let _ = serde_json::to_writer(&mut *out, &n);
}

/// `wait` (mbx-relay extension): missing, empty or 0 means answer at once; else whole seconds
/// up to [`MAX_WAIT_SECS`].
///
/// # Errors
/// 400 `bad wait: ...` for anything else.
pub(crate) fn parse_wait(raw: Option<&str>) -> Result<Option<Duration>, RelayError> {
    let secs = match raw {
        None | Some("") => 0,
        Some(s) => s
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_WAIT_SECS)
            .ok_or_else(|| {
                RelayError::bad_request(format!(
                    "bad wait: an integer number of seconds from 0 to {MAX_WAIT_SECS}"
                ))
            })?,
    };
    Ok((secs > 0).then(|| Duration::from_secs(secs)))
}

/// `limit` as the reference relay reads it: `Number(raw)` floored; missing, zero or not a
/// number means `max`; another is clamped to 1..=max (`1.9` is 1, `-3` is 1).
pub(crate) fn pull_limit(raw: Option<&str>, max: usize) -> usize {
    let n = raw.map_or(f64::NAN, string_to_number).floor();
    if n.is_nan() || n == 0.0 {
        max
    } else if n < 1.0 {
        1
    } else if n >= max as f64 {
        max
    } else {
        // 1 <= n < max: a whole number that fits.
        n as usize
    }
}

/// A seq or cursor read as JavaScript's `Math.max(0, Math.floor(x) || 0)`: NaN and negatives
/// are 0; beyond `u64::MAX` (Infinity included) is `u64::MAX`, past any seq.
pub(crate) fn floor_seq(x: f64) -> u64 {
    if x.is_nan() || x <= 0.0 {
        0
    } else {
        // `as` saturates at u64::MAX.
        x.floor() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object;
    use relay_store::{ItemKind, QueuedItem};

    /// The answer as it was built before [`page_json`]: a `serde_json::Value`, serialised.
    fn page_value(epoch: &str, after: u64, page: &Page) -> String {
        let b64 = relay_wire::keys::b64;
        let items: Vec<Value> = page
            .items
            .iter()
            .map(|i| {
                object([
                    ("seq", json!(i.seq)),
                    ("kind", json!(i.kind.as_str())),
                    ("item_id", Value::String(i.item_id.clone())),
                    ("sender_pubkey", Value::String(b64(&i.sender))),
                    ("wire_b64", Value::String(b64(&i.wire))),
                ])
            })
            .collect();
        object([
            ("epoch", Value::String(epoch.to_owned())),
            ("head_seq", json!(page.head_seq)),
            ("items", Value::Array(items)),
            (
                "last_seq",
                json!(page.items.last().map_or(after, |i| i.seq)),
            ),
            ("more", Value::Bool(page.more)),
        ])
        .to_string()
    }

    fn item(seq: u64, kind: ItemKind, id: &str, wire_len: usize) -> QueuedItem {
        QueuedItem {
            seq,
            kind,
            item_id: id.to_owned(),
            sender: [seq as u8; 32],
            wire: (0..wire_len)
                .map(|n| (n as u64).wrapping_mul(7).wrapping_add(seq) as u8)
                .collect(),
            accepted_at_ms: 1,
            expires_at_ms: 2,
        }
    }

    /// Byte for byte the old `Value` answer: empty pages, every kind, every base64 padding,
    /// ids and epochs that need escaping, both `more` values, large numbers.
    #[test]
    fn page_json_is_the_value_answer_byte_for_byte() {
        let pages = [
            Page {
                items: vec![],
                head_seq: 0,
                acked_through: 0,
                more: false,
            },
            Page {
                items: vec![
                    item(1, ItemKind::Envelope, "01ARZ3NDEKTSV4RRFFQ69G5FAV", 0),
                    item(2, ItemKind::Receipt, "q\"uote\\back\nnl\u{1}é😀", 1),
                    item(3, ItemKind::Expired, "x", 2),
                    item(u64::MAX, ItemKind::Envelope, "", 1000),
                ],
                head_seq: u64::MAX,
                acked_through: 0,
                more: true,
            },
        ];
        for (epoch, after) in [("e1", 0), ("ep\"och\u{7f}\t", 12_345)] {
            for page in &pages {
                let got = page_json(epoch, after, page);
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    page_value(epoch, after, page)
                );
            }
        }
    }

    /// `Number(limit)` floored, as the reference: missing, 0 or not a number is the maximum.
    #[test]
    fn limit_is_read_as_the_reference_reads_it() {
        let cases = [
            (None, 500),
            (Some("0"), 500),
            (Some(""), 500),
            (Some("abc"), 500),
            (Some("0.9"), 500),
            (Some("-3"), 1),
            (Some("-0.5"), 1),
            (Some("-Infinity"), 1),
            (Some("7"), 7),
            (Some("1.9"), 1),
            (Some("7.99"), 7),
            (Some(" 7 "), 7),
            (Some("1e2"), 100),
            (Some("0x10"), 16),
            (Some("100000"), 500),
            (Some("Infinity"), 500),
            (Some("499.5"), 499),
        ];
        for (raw, want) in cases {
            assert_eq!(pull_limit(raw, 500), want, "{raw:?}");
        }
    }

    /// `Number(after)` floored, as the reference: not a number or negative is 0.
    #[test]
    fn after_is_read_as_the_reference_reads_it() {
        let cases = [
            (None, 0),
            (Some(""), 0),
            (Some("42"), 42),
            (Some("42.5"), 42),
            (Some("-1"), 0),
            (Some("x"), 0),
            (Some("12abc"), 0),
            (Some("1e3"), 1000),
            (Some("Infinity"), u64::MAX),
            (Some("1795963620919.999"), 1_795_963_620_919),
        ];
        for (raw, want) in cases {
            assert_eq!(Relay::parse_after(raw), want, "{raw:?}");
        }
    }
}
