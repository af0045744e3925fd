//! `GET /v2/relay/events` (docs/protocol.md, "mbx-relay extension: live delivery"): a
//! `text/event-stream` telling a hop-signed caller when its queue grew (`queued` with the new
//! `head_seq`, at most one per [`COALESCE`]), when the epoch changed (`epoch`), and a `: hb`
//! comment after [`HEARTBEAT`] without events. Nothing about items (content, ids, senders,
//! sizes) is ever sent. The stream ends when a newer waiter of the same key evicts it, when its
//! key is revoked, rotated away, expired or purged ([`relay_core::revoke_watch`]), at
//! `--max-stream-lifetime`, or when the relay shuts down; it counts as a waiter
//! ([`relay_core::wake`]).

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use hyper::body::Frame;
use relay_core::Key32;
use serde_json::json;
use tokio::time::Instant;

use super::answer::{json_response, retry_later, status_code};
use super::conn::{Streaming, StreamingHeld};
use relay_core::Relay;
use relay_core::{Refused, Ticket};

/// Time without events after which a heartbeat comment is sent.
pub(super) const HEARTBEAT: Duration = Duration::from_secs(15);
/// Shortest time between two `queued` events of one stream.
pub(super) const COALESCE: Duration = Duration::from_millis(10);
/// Tests only: a heartbeat interval in milliseconds instead of [`HEARTBEAT`] (undocumented for
/// operators; a test cannot wait 15 s per heartbeat).
pub(super) const HEARTBEAT_TEST_ENV: &str = "MBX_RELAY_TEST_EVENTS_HEARTBEAT_MS";

/// The heartbeat interval in force.
fn heartbeat() -> Duration {
    static HB: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *HB.get_or_init(|| {
        std::env::var(HEARTBEAT_TEST_ENV)
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|ms| *ms > 0)
            .map_or(HEARTBEAT, Duration::from_millis)
    })
}

/// The events stream for `target` (the caller's key), or the refusal when no waiter may be
/// added (503: shutting down, or the global waiter cap).
pub(super) fn response(
    relay: Arc<Relay>,
    target: Key32,
    streaming: Option<&Streaming>,
) -> Response {
    let ticket = match relay.wake().register(target) {
        Ok(t) => t,
        Err(Refused::Closed) => {
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &json!({ "error": "server is shutting down" }),
            )
        }
        Err(Refused::Full) => {
            return retry_later(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many waiting clients, retry later",
                super::retry_after::OVERLOAD,
            )
        }
    };
    // A revocation between the hop check and the registration ended nobody: look again.
    if let Err(e) = relay.ensure_live(&target) {
        return json_response(status_code(e.status), &e.body);
    }
    // Read after registering: a push durable from now on raises the ticket's head.
    let head = match relay.head_seq(&target) {
        Ok(h) => h,
        Err(e) => return json_response(status_code(e.status), &e.body),
    };
    let stream = Events {
        ends_at: Instant::now() + relay.limits().max_stream_lifetime,
        epoch: relay.epoch(),
        relay,
        ticket,
        sent_head: head,
        last_queued: None,
        _held: streaming.map(Streaming::hold),
    };
    let first = queued_event(head);
    let body = EventBody {
        step: Some(Box::pin(async move { Some((first, stream)) })),
    };
    let mut r = Response::new(Body::new(body));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r
}

/// One stream's state between events.
struct Events {
    relay: Arc<Relay>,
    ticket: Ticket,
    /// Last `head_seq` sent.
    sent_head: u64,
    /// Last epoch the stream knows.
    epoch: String,
    /// When the last `queued` event was sent.
    last_queued: Option<Instant>,
    /// `--max-stream-lifetime` after the start: the stream ends cleanly then.
    ends_at: Instant,
    /// Keeps the connection's idle timeout off while the stream lives.
    _held: Option<StreamingHeld>,
}

impl Events {
    /// The next event, or `None` when the stream ends.
    async fn next(mut self) -> Option<(Bytes, Self)> {
        loop {
            if self.ticket.head() > self.sent_head {
                if let Some(at) = self.last_queued {
                    tokio::time::sleep_until(at + COALESCE).await;
                }
                // Everything stored while coalescing is in this one event.
                self.sent_head = self.ticket.head();
                self.last_queued = Some(Instant::now());
                return Some((queued_event(self.sent_head), self));
            }
            let epoch = self.relay.epoch();
            if epoch != self.epoch {
                let event = Bytes::from(format!(
                    "event: epoch\ndata: {}\n\n",
                    json!({ "epoch": epoch })
                ));
                self.epoch = epoch;
                return Some((event, self));
            }
            tokio::select! {
                w = self.ticket.woken() => if w.ending() {
                    return None;
                },
                () = tokio::time::sleep(heartbeat()) => {
                    return Some((Bytes::from_static(b": hb\n\n"), self));
                }
                () = tokio::time::sleep_until(self.ends_at) => return None,
            }
        }
    }
}

/// `event: queued` with the queue's head.
fn queued_event(head: u64) -> Bytes {
    Bytes::from(format!("event: queued\ndata: {{\"head_seq\":{head}}}\n\n"))
}

type Step = Pin<Box<dyn Future<Output = Option<(Bytes, Events)>> + Send>>;

/// The response body: each frame is the next event.
struct EventBody {
    step: Option<Step>,
}

impl HttpBody for EventBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let Some(step) = self.step.as_mut() else {
            return Poll::Ready(None);
        };
        match step.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.step = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some((bytes, events))) => {
                self.step = Some(Box::pin(events.next()));
                Poll::Ready(Some(Ok(Frame::data(bytes))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.step.is_none()
    }
}
