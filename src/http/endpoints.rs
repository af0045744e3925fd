//! One handler per row of the route table ([`super::route`]): each takes the admitted call
//! (caller, bytes, parsed JSON, query) and calls one relay-core method, answering its JSON.
//! Nothing here checks a hop, caps a body or counts a request: the pipeline did that.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::answer::{json_response, reply_response, text_reply_response};
use super::conn::{Answer, Streaming};
use super::pipeline::Call;
use super::{parked, retry_after};
use relay_core::code::ErrorCode;
use relay_core::enc_ad::EncLookup;
use relay_core::pull::{PullQuery, PullStart};
use relay_core::{Caller, RelayError};

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
        let now = relay_store::Clock::now_ms(&relay_store::SystemClock);
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
                    &json!({ "error": relay_core::error::STORE_UNAVAILABLE }),
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

/// `POST /v2/relay/items`: the body is read as a borrowed tree and the results arrive as
/// finished JSON text (no value tree: the push hot path).
pub(crate) fn push(c: Call<Caller>) -> Answer {
    Box::pin(async move { text_reply_response(c.app.relay.push_json(&c.who, &c.body).await) })
}

/// `GET /v2/relay/items`: the page arrives as finished JSON text (no value tree: the drain hot
/// path); a pull with `wait` that finds nothing parks until a push or its timeout.
pub(crate) fn pull(c: Call<Caller>) -> Answer {
    let q = c.query();
    // A pull may wait up to a minute: hold nothing of the request meanwhile (its head, body
    // and body reservation are a waiter's largest cost).
    let Call {
        app,
        who,
        parts,
        body,
        held,
        ..
    } = c;
    drop((parts, body, held));
    Box::pin(async move {
        let pq = PullQuery {
            after: q.get("after").map(String::as_str),
            limit: q.get("limit").map(String::as_str),
            epoch: q.get("epoch").map(String::as_str),
            wait: q.get("wait").map(String::as_str),
        };
        let relay = &app.relay;
        match relay.pull_start(&who, pq).await {
            Ok(PullStart::Answer(text)) => text_reply_response(Ok(text)),
            Ok(PullStart::Wait(w)) => {
                // Parked as a small future: the request's own futures end here.
                let relay = relay.clone();
                parked::response(async move { text_reply_response(relay.pull_wait(w).await) })
            }
            Err(e) => text_reply_response(Err(e)),
        }
    })
}

/// `POST /v2/relay/ack`.
pub(crate) fn ack(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.ack(&c.who, &c.json).await) })
}

/// `POST /v1/relay/messages`.
pub(crate) fn push_v1(c: Call<Caller>) -> Answer {
    Box::pin(async move { reply_response(c.app.relay.push_v1(&c.who, &c.json).await) })
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
