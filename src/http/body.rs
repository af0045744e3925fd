//! Request bodies read while streaming under a cap, with their memory reserved as they arrive: a
//! body over the cap is refused as soon as the declared length or the bytes received so far
//! exceed it, before the rest is buffered; and what a body holds grows with what it has sent (a
//! declared length reserves nothing by itself), counted against the shared budget and the shares
//! of its client address and hop key ([`super::body_budget`]).

use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, HttpBody as _};

pub use super::account::{Held, MemoryAccount, Refused};

/// The general request body cap (docs/protocol.md §3): 8 MiB.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// The cap for challenge, enrol and rotate bodies (and the bodies of info, health and metrics).
pub(crate) const MAX_SMALL_BODY: usize = 8_192;
/// The cap for bodies holding one small record (an ack, an enc-key ad): a real one is under
/// 1 KiB, so 1 MiB leaves room for the extra fields, whitespace and escapes a host may send while
/// bounding what a parse of one can cost to an eighth of a full body's. (A sender list keeps the
/// full cap: a list over its 65,536-byte canonical bound answers `400 bad sender list`, as the
/// reference does for any list under its 8 MiB body cap; its parse is charged like any other.)
pub(crate) const MAX_RECORD_BODY: usize = 1024 * 1024;

/// Room in a push body for everything but one target's `wire_b64`: the JSON around it, a
/// 300-unit item id escaped as `\uXXXX` (1,800 bytes), kind and host key, with margin.
pub(crate) const PUSH_ENVELOPE_ALLOWANCE: usize = 4_096;

/// The largest `--max-item-bytes` whose item still fits a push body under [`MAX_BODY`]: its
/// base64 form (4 characters per 3 bytes) plus [`PUSH_ENVELOPE_ALLOWANCE`]. A larger limit
/// would promise items no request could carry.
pub const MAX_ITEM_BYTES_IN_BODY: u64 = ((MAX_BODY - PUSH_ENVELOPE_ALLOWANCE) / 4 * 3) as u64;
// The store's backup reader refuses items above this same bound (one number, two crates).
const _: () = assert!(MAX_ITEM_BYTES_IN_BODY == relay_core::MAX_ITEM_BYTES_ACCEPTED);

/// Total request-body memory held at once (bytes); requests beyond it wait for room.
pub(crate) const BODY_BUDGET: u64 = 256 * 1024 * 1024;
/// Default for `--max-body-bytes-per-address`: four full-size bodies.
pub const DEFAULT_BODY_BYTES_PER_ADDRESS: u64 = 4 * MAX_BODY as u64;
/// Default for `--max-body-bytes-per-key`: four full-size bodies, as per address.
pub const DEFAULT_BODY_BYTES_PER_KEY: u64 = 4 * MAX_BODY as u64;

/// A body reading this many bytes lets other tasks run before it reads on: a worker reading
/// a full 8 MiB body in one go kept every other connection on it waiting (for tens of ms).
const YIELD_EVERY: usize = 64 * 1024;

/// A body holds what it has received rounded up to a multiple of this many bytes: never more
/// than this ahead of its bytes, so a client that stalls holds what it sent, not what it
/// declared. (A declared body's buffer takes its length of address space at once, so its copies
/// do not grow with the steps.)
const RESERVE_STEP: u64 = 64 * 1024;

/// Most bytes read and discarded after an early answer (docs/protocol.md §3: 64 MiB or 10 s).
pub(crate) const DRAIN_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Longest a drain lasts.
pub const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);
/// What is drained after `503 server busy`: reading the rest of a body the relay has no room
/// for would spend the time it is short of (a client still writing more may see a reset).
pub const BUSY_DRAIN: Drain = Drain {
    bytes: 64 * 1024,
    time: Duration::from_secs(1),
};

/// Bounds of a drain.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    /// Most bytes read and discarded.
    pub bytes: u64,
    /// Longest the drain lasts.
    pub time: Duration,
}

/// The drain after an early answer: [`DRAIN_MAX_BYTES`] or [`DRAIN_MAX_TIME`].
pub const FULL_DRAIN: Drain = Drain {
    bytes: DRAIN_MAX_BYTES,
    time: DRAIN_MAX_TIME,
};

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum BodyError {
    /// Over the cap (answer 413).
    TooLarge,
    /// Body memory could not be held (429 for a share, 503 for the shared budget).
    Refused(Refused),
    /// The client stopped sending, sent too slowly, or the stream failed.
    Aborted,
}

impl From<Refused> for BodyError {
    fn from(r: Refused) -> Self {
        BodyError::Refused(r)
    }
}

/// What a body that has `len` bytes so far should hold, with at most `limit` bytes to come in
/// all: `len` rounded up to a step.
fn reserve_target(len: u64, limit: u64) -> u64 {
    len.next_multiple_of(RESERVE_STEP).min(limit).max(len)
}

/// Read `body` into memory, refusing more than `cap` bytes, holding in `reservation` only what
/// has arrived (see [`reserve_target`]; a declared length sizes the buffer's address space, it
/// reserves nothing), so a client that declares a large body and sends a byte holds a step,
/// not the declared length. On an error the rest of the body is still in `body` (to drain it).
///
/// # Errors
/// [`BodyError::TooLarge`] once the declared or received length passes `cap`; see
/// [`BodyError`] for the others.
pub(crate) async fn read_capped(
    body: &mut Body,
    cap: usize,
    declared: Option<u64>,
    reservation: &mut Held,
) -> Result<Vec<u8>, BodyError> {
    let cap64 = cap as u64;
    if declared.is_some_and(|n| n > cap64) || body.size_hint().lower() > cap64 {
        return Err(BodyError::TooLarge);
    }
    let limit = declared.unwrap_or(cap64);
    let mut buf = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await;
        match frame {
            None => return Ok(buf),
            Some(Err(_)) => return Err(BodyError::Aborted),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    let len = (buf.len() + data.len()) as u64;
                    if len > cap64 {
                        return Err(BodyError::TooLarge);
                    }
                    if len > reservation.held() {
                        let target = reserve_target(len, limit);
                        let partial = reservation.held() > 0;
                        let held = match reservation.grow_to(target).await {
                            // A step past a share or the room left (refused without a wait):
                            // what has arrived may still fit.
                            Err(Refused::AddressBusy | Refused::KeyBusy) if target > len => {
                                reservation.grow_to(len).await.map(|()| len)
                            }
                            Err(Refused::Busy) if partial && target > len => {
                                reservation.grow_to(len).await.map(|()| len)
                            }
                            r => r.map(|()| target),
                        }?;
                        // A declared body's buffer takes its length of address space at once
                        // (no copies as it grows; its pages become resident only as bytes are
                        // written, which is what the reservation counts); one without a length
                        // grows with what is held.
                        let room = if declared.is_some() { limit } else { held };
                        buf.reserve_exact(usize::try_from(room).unwrap_or(cap) - buf.len());
                    }
                    let before = buf.len();
                    buf.extend_from_slice(&data);
                    if before / YIELD_EVERY != buf.len() / YIELD_EVERY {
                        // Bytes keep arriving while a large body is read; let the worker
                        // serve other connections between pieces of it.
                        tokio::task::yield_now().await;
                    }
                }
            }
        }
    }
}

/// Read and discard what is left of `body` in the background (within `bounds`, usually
/// [`FULL_DRAIN`]), so that a client still writing the body it was refused for reads the
/// answer instead of a reset; the connection closes afterwards (the answer says
/// `connection: close`).
pub fn drain(mut body: Body, bounds: Drain) {
    if body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(bounds.time, async {
            let mut drained = 0u64;
            while drained < bounds.bytes {
                match std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
                    Some(Ok(frame)) => {
                        drained += frame.data_ref().map_or(0, |d| d.len() as u64);
                    }
                    None | Some(Err(_)) => break,
                }
            }
        })
        .await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn caps_are_inclusive_and_enforced() {
        let limits = std::sync::Arc::new(MemoryAccount::new(1 << 30, u64::MAX, u64::MAX, LONG));
        let mut r = limits.reservation("x");
        let ok = read_capped(&mut Body::from(vec![b'x'; 10]), 10, None, &mut r)
            .await
            .unwrap();
        assert_eq!(ok.len(), 10);
        assert_eq!(
            read_capped(&mut Body::from(vec![b'x'; 11]), 10, None, &mut r).await,
            Err(BodyError::TooLarge)
        );
        assert_eq!(
            read_capped(&mut Body::from("x"), 10, Some(11), &mut r).await,
            Err(BodyError::TooLarge)
        );
    }

    /// A body that arrives in the given pieces, declares no length, and then either ends or
    /// stalls for good.
    struct Pieces(std::collections::VecDeque<axum::body::Bytes>, bool);

    impl axum::body::HttpBody for Pieces {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            match self.0.pop_front() {
                Some(d) => std::task::Poll::Ready(Some(Ok(hyper::body::Frame::data(d)))),
                None if self.1 => std::task::Poll::Pending,
                None => std::task::Poll::Ready(None),
            }
        }
    }

    #[tokio::test]
    async fn a_declared_body_holds_what_it_has_sent_not_its_length() {
        let limits = std::sync::Arc::new(MemoryAccount::new(1 << 30, u64::MAX, u64::MAX, LONG));
        let mut body = Body::new(Pieces([axum::body::Bytes::from_static(b"{")].into(), true));
        let mut r = limits.reservation("192.0.2.1");
        let declared = Some(MAX_BODY as u64);
        let stalled = tokio::time::timeout(
            Duration::from_millis(30),
            read_capped(&mut body, MAX_BODY, declared, &mut r),
        )
        .await;
        assert!(stalled.is_err());
        assert_eq!(r.held(), RESERVE_STEP, "one step for one byte, not 8 MiB");
        // A small declared body holds its length.
        let mut r = limits.reservation("192.0.2.1");
        let got = read_capped(&mut Body::from(vec![1u8; 300]), MAX_BODY, Some(300), &mut r).await;
        assert_eq!(got.map(|b| b.len()), Ok(300));
        assert_eq!(r.held(), 300);
    }

    #[tokio::test]
    async fn a_body_reserves_as_it_arrives_and_never_past_its_share() {
        let limits = std::sync::Arc::new(MemoryAccount::new(1 << 30, 200 * 1024, u64::MAX, LONG));
        let piece = axum::body::Bytes::from(vec![1u8; 100 * 1024]);
        let mut body = Body::new(Pieces([piece.clone(), piece.clone()].into(), false));
        let mut r = limits.reservation("192.0.2.1");
        let got = read_capped(&mut body, MAX_BODY, None, &mut r).await;
        assert_eq!(got.map(|b| b.len()), Ok(200 * 1024));
        assert_eq!(r.held(), 200 * 1024, "in steps, never past the share");
        drop(r);
        let mut body = Body::new(Pieces([piece.clone(), piece.clone(), piece].into(), false));
        let mut r = limits.reservation("192.0.2.1");
        let got = read_capped(&mut body, MAX_BODY, None, &mut r).await;
        // The whole 200 KiB share held after the second piece; the third needs more.
        assert_eq!(got, Err(BodyError::Refused(Refused::AddressBusy)));
        assert_eq!(r.held(), 200 * 1024);
    }

    #[test]
    fn a_body_holds_at_most_one_step_ahead_of_its_bytes() {
        assert_eq!(reserve_target(1, 8 << 20), RESERVE_STEP);
        assert_eq!(reserve_target(70_000, 8 << 20), 2 * RESERVE_STEP);
        // 5,952 KiB and more sent: still what was sent plus under a step, never the declared 8 MiB.
        let sent = 5_952 * 1024 + 1;
        let t = reserve_target(sent, 8 << 20);
        assert!(t >= sent && t - sent < RESERVE_STEP, "{t}");
        assert_eq!(reserve_target(7 << 20, 8 << 20), 7 << 20);
        assert_eq!(reserve_target(10, 10), 10);
    }
}
