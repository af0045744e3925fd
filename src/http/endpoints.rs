//! One handler per row of the route table ([`super::route`]): each takes the admitted call
//! (caller, bytes, parsed JSON, query) and calls one relay-core method, answering its JSON.
//! Nothing here checks a hop, caps a body or counts a request: the pipeline did that.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::account::{Held, Refused as MemoryRefused};
use super::answer::{json_response, memory_refused, reply_response, text_reply_response};
use super::call::Call;
use super::conn::{Answer, Streaming};
use super::off_worker::INLINE_PARSE_MAX;
use super::{held_body, parked, retry_after, App};
use relay_core::EncLookup;
use relay_core::ErrorCode;
use relay_core::{parse_push, Pull, PullQuery};
use relay_core::{Caller, RelayError};
use relay_wire::json_node::Node;

/// Where a recent durable write proves the store writable, reuse it; else write the heartbeat.
const HEALTH_FRESH_MS: u64 = 5_000;
/// Longest `/health` waits for its heartbeat write: a store that hangs (a database with no
/// writable node) answers 503 well within `mbx-relay health`'s 5 s probe timeout.
const HEALTH_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3);

/// `GET /health`: 200 only while the store is open and writable.
pub(crate) fn health(c: Call<()>) -> Answer {
    Box::pin(async move {
        let relay = &c.app.relay;
        let (last_ok, failed) = relay.metrics.write_health();
        let now = relay_core::now_ms();
        if !failed && now.saturating_sub(last_ok) <= HEALTH_FRESH_MS {
            return json_response(StatusCode::OK, &json!({ "ok": true }));
        }
        match tokio::time::timeout(HEALTH_DEADLINE, relay.heartbeat()).await {
            Ok(Ok(())) => json_response(StatusCode::OK, &json!({ "ok": true })),
            Ok(Err(e)) => json_response(StatusCode::SERVICE_UNAVAILABLE, &e.body),
            Err(_) => {
                tracing::warn!(
                    ?HEALTH_DEADLINE,
                    "health: the store did not confirm a write in time"
                );
                json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &json!({ "error": relay_core::STORE_UNAVAILABLE }),
                )
            }
        }
    })
}

/// An answer known without waiting.
fn ready(r: Response) -> Answer {
    Box::pin(std::future::ready(r))
}

/// `GET /v2/relay/info` signed: the caller's own figures too.
pub(crate) fn info_signed(c: Call<Caller>) -> Answer {
    ready(reply_response(c.app.relay.info(Some(&c.who))))
}

/// `GET /v2/relay/info` unsigned (or with a hop that failed).
pub(crate) fn info_open(c: Call<()>) -> Answer {
    ready(reply_response(c.app.relay.info(None)))
}

/// `POST /v1/relay/challenge`.
pub(crate) fn challenge(c: Call<()>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.challenge(&c.json).await) })
}

/// `POST /v1/relay/enrol`. At the enrolment cap (`FULL`) a slot frees only when the sweep
/// deletes an idle enrolment (every `--sweep-interval`) or an operator revokes or purges one:
/// `Retry-After` says the sweep interval, not the short backoff.
pub(crate) fn enrol(c: Call<()>) -> Answer {
    Box::pin(async move {
        let relay = &c.app.relay;
        let r = relay.enrol(&c.json).await;
        let full = r.as_ref().err().and_then(RelayError::code) == Some(ErrorCode::Full.wire());
        let mut resp = reply_response(r);
        if full {
            retry_after::set(&mut resp, relay.limits().sweep_interval);
        }
        resp
    })
}

/// `POST /v2/relay/rotate` (signed inside its body, not by a hop).
pub(crate) fn rotate(c: Call<()>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.rotate(&c.json).await) })
}

/// `POST /v1/relay/enc-key`.
pub(crate) fn put_enc_ad_v1(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.put_enc_ad(&c.who, &c.json).await) })
}

/// `POST /v2/relay/enc-key`.
pub(crate) fn put_enc_ad_v2(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.put_enc_ad_v2(&c.who, &c.json).await) })
}

/// `GET /v1/relay/enc-key?pubkey=` or `?host=`.
pub(crate) fn get_enc_ad_v1(c: Call<Caller>) -> Answer {
    let q = c.query();
    let lookup = q
        .get("pubkey")
        .map(|k| EncLookup::Key(k))
        .or_else(|| q.get("host").map(|n| EncLookup::Name(n)));
    ready(reply_response(c.app.relay.get_enc_ad(&c.who, lookup)))
}

/// `GET /v2/relay/enc-key?pubkey=`.
pub(crate) fn get_enc_ad_v2(c: Call<Caller>) -> Answer {
    let q = c.query();
    let lookup = q.get("pubkey").map(|k| EncLookup::Key(k));
    ready(reply_response(c.app.relay.get_enc_ad(&c.who, lookup)))
}

/// `POST /v2/relay/senders`.
pub(crate) fn put_sender_list(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.put_sender_list(&c.who, &c.json).await) })
}

/// `POST /v2/relay/items`: a sender past its push rate is answered from a scan of the body that
/// builds no tree; otherwise the body is parsed into its tree (borrowed, on the async worker,
/// when small; owning its strings, on the off-worker pool, when large) and pushed. The results
/// arrive as finished JSON text (no value tree: the push hot path). What the parse holds was
/// charged at admission ([`super::parse_cost::Parse::Push`]) and stays held until the answer.
pub(crate) fn push(c: Call<Caller>) -> Answer {
    Box::pin(async move {
        let Call {
            app,
            who,
            body,
            _held: held,
            ..
        } = c;
        let relay = app.relay.clone();
        let answer = if relay.push_rate_exhausted(&who) {
            app.off_worker
                .over(body, move |b| relay.push_rate_refused(b))
                .await
                .0
        } else if body.len() <= INLINE_PARSE_MAX {
            match parse_push(&body) {
                Ok(tree) => relay.push_tree(&who, &tree).await,
                Err(e) => Err(e),
            }
        } else {
            let parsed = app
                .off_worker
                .over(body, |b| parse_push(b).map(Node::into_owned));
            match parsed.await.0 {
                Ok(tree) => relay.push_tree(&who, &tree).await,
                Err(e) => Err(e),
            }
        };
        drop(held);
        text_reply_response(answer)
    })
}

/// `GET /v2/relay/items`: the page arrives as finished JSON text (no value tree: the drain hot
/// path); a pull with `wait` that finds nothing parks until a push or its timeout.
///
/// Every page read, the first and a woken pull's alike ([`next_page`]), is in the account from
/// before it is read until its last byte is written ([`held_body`]): the largest page bound
/// whose charge ([`page_charge`]) fits the caller's shares and the budget now is the page's
/// byte bound (halving down to one item's size), so a key or address that holds many unread
/// pages gets smaller pages, then 429, never gigabytes. A parked pull holds nothing while it
/// waits.
pub(crate) fn pull(c: Call<Caller>) -> Answer {
    let q = c.query();
    // A pull may wait up to a minute: hold nothing of the request meanwhile (its head, body
    // and their memory are a waiter's largest cost); each page is held for the key alone.
    let Call { app, who, .. } = c;
    Box::pin(async move {
        let pq = PullQuery {
            after: q.get("after").map(String::as_str),
            limit: q.get("limit").map(String::as_str),
            epoch: q.get("epoch").map(String::as_str),
            wait: q.get("wait").map(String::as_str),
        };
        let mut pull = match app.relay.pull_open(&who, pq) {
            Ok(p) => p,
            Err(e) => return text_reply_response(Err(e)),
        };
        if let Some(answer) = next_page(&app, who.key, &mut pull).await {
            return answer;
        }
        // Parked as a small future: the request's own futures end here.
        parked::response(async move {
            loop {
                if let Err(e) = app.relay.pull_wake(&mut pull).await {
                    return text_reply_response(Err(e));
                }
                if let Some(answer) = next_page(&app, who.key, &mut pull).await {
                    return answer;
                }
            }
        })
    })
}

/// The next page of `pull`, charged to `key` before it is read: its answer, or `None` when the
/// pull waits on (nothing held then).
async fn next_page(app: &App, key: relay_core::Key32, pull: &mut Pull) -> Option<Response> {
    let relay = &app.relay;
    let mut held = app.memory.for_key(key);
    let max_bytes = match reserve_page(relay.limits(), &mut held).await {
        Ok(b) => b,
        Err(r) => return Some(memory_refused(r)),
    };
    match relay.pull_page(pull, max_bytes).await {
        Ok(Some(text)) => Some(page_response(text, held)),
        Ok(None) => None,
        Err(e) => Some(text_reply_response(Err(e))),
    }
}

/// Bytes charged per item of a page besides its wire bytes: the JSON around it, its seq, kind,
/// sender key and an item id escaped at worst.
const PAGE_ITEM_TEXT: u64 = 2 * 1024;

/// What building a page of at most `raw` wire bytes holds at its peak: the page read from the
/// store and its JSON text (base64: 4/3) side by side, plus [`PAGE_ITEM_TEXT`] per item.
fn page_charge(limits: &relay_core::Limits, raw: u64) -> u64 {
    let items = limits.max_pull as u64;
    raw.saturating_mul(7) / 3 + items.saturating_mul(PAGE_ITEM_TEXT)
}

/// Charge `held` for the largest page bound that fits now (`--max-pull-bytes`, halved down to
/// one item's `--max-item-bytes`, as a page always holds at least one item). When not even that
/// fits, wait: for room in the shared budget as a request body does (fairly), or for the key's
/// other pages to be written (a key's concurrent pulls take turns), within
/// `--body-budget-wait`. The bound.
///
/// # Errors
/// No room came in time: why.
async fn reserve_page(limits: &relay_core::Limits, held: &mut Held) -> Result<u64, MemoryRefused> {
    let least = limits.max_item_bytes.max(1);
    let give_up = tokio::time::Instant::now() + held.wait();
    loop {
        let mut raw = limits.max_pull_bytes.max(least);
        let refused = loop {
            match held.grow_now(page_charge(limits, raw)) {
                Ok(()) => return Ok(raw),
                Err(e) if raw <= least => break e,
                Err(_) => raw = (raw / 2).max(least),
            }
        };
        if refused == MemoryRefused::Busy {
            return held
                .grow_to(page_charge(limits, least))
                .await
                .map(|()| least);
        }
        if tokio::time::Instant::now() >= give_up {
            return Err(refused);
        }
        tokio::time::sleep(KEY_TURN).await;
    }
}

/// How often a pull whose key's share is full looks again.
const KEY_TURN: std::time::Duration = std::time::Duration::from_millis(10);

/// A page's answer holding its text's bytes until written: the charge shrinks to the text's
/// length; a text that outgrew it (a page may pass its bound by part of an item) takes the room
/// that is free now, else goes out counted as charged (it was read: refusing it would waste it).
fn page_response(text: Vec<u8>, mut held: Held) -> Response {
    let len = text.len() as u64;
    if len <= held.held() {
        held.shrink_to(len);
    } else {
        let _ = held.grow_now(len);
    }
    held_body::json_holding(text, held)
}

/// `POST /v2/relay/ack`.
pub(crate) fn ack(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.ack(&c.who, &c.json).await) })
}

/// `POST /v1/relay/messages`.
pub(crate) fn push_v1(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.push_v1(&c.who, &c.body).await) })
}

/// `GET /v1/relay/messages?after=`.
pub(crate) fn pull_v1(c: Call<Caller>) -> Answer {
    let q = c.query();
    Box::pin(async move {
        let after = q.get("after").map(String::as_str);
        reply_response(c.app.relay.pull_v1(&c.who, after).await)
    })
}

/// `POST /v1/relay/ack`.
pub(crate) fn ack_v1(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.ack_v1(&c.who, &c.json).await) })
}

/// `GET /v2/relay/events`: the live-delivery stream ([`super::events`]).
pub(crate) fn events(c: Call<Caller>) -> Answer {
    let streaming = c.parts.extensions.get::<Streaming>();
    ready(super::events::response(
        c.app.relay.clone(),
        c.who.key,
        streaming,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::http::account::MemoryAccount;

    #[tokio::test]
    async fn a_page_takes_the_largest_bound_that_fits_waits_its_turn_then_is_refused() {
        let limits = relay_core::Limits::default();
        let full = limits.max_pull_bytes;
        // The key's share fits one full page and one of half the bound.
        let share = page_charge(&limits, full) + page_charge(&limits, full / 2);
        let account = Arc::new(MemoryAccount::new(
            1 << 40,
            u64::MAX,
            share,
            Duration::from_millis(50),
        ));
        let key = [1u8; 32];
        let mut first = account.for_key(key);
        assert_eq!(reserve_page(&limits, &mut first).await, Ok(full));
        let mut second = account.for_key(key);
        assert_eq!(reserve_page(&limits, &mut second).await, Ok(full / 2));
        // No room even for one item's page: the third waits its turn, then 429 for the key.
        let mut third = account.for_key(key);
        assert_eq!(
            reserve_page(&limits, &mut third).await,
            Err(MemoryRefused::KeyBusy)
        );
        assert_eq!(third.held(), 0, "a refusal holds nothing");
        // Another key is not affected, and the first page written frees its room.
        assert_eq!(
            reserve_page(&limits, &mut account.for_key([2u8; 32])).await,
            Ok(full)
        );
        drop(first);
        assert_eq!(reserve_page(&limits, &mut third).await, Ok(full));
    }
}
