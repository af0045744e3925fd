//! A request body with deadlines: whole by `--body-timeout`, its first byte soon after the first
//! read, then a minimum pace.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Bytes, HttpBody};
use hyper::body::{Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};

use super::guarded_io::expired;

/// A request body that fails once its deadline passes before it ends, when its first byte
/// has not come `first_byte` after it was first read, or when after that it falls behind
/// `min_rate` (nginx's `client_body_timeout` between reads, Apache's `MinRate`): by `t` after
/// its first byte it must have sent `(t - first_byte) * min_rate` bytes.
pub(super) struct TimedBody {
    inner: Incoming,
    /// When the whole body must be in.
    deadline: Instant,
    /// Armed for the nearest of the deadlines.
    timer: Pin<Box<Sleep>>,
    pace: Pace,
    first_byte: FirstByte,
    /// Data bytes received so far.
    received: u64,
}

/// The pace a body must keep (see [`TimedBody`]).
#[derive(Clone, Copy)]
pub(super) struct Pace {
    pub(super) first_byte: Duration,
    pub(super) min_rate: u64,
}

/// The first-byte deadline of a [`TimedBody`].
enum FirstByte {
    /// Not read yet: the wait starts at the first read (after the handler's own checks).
    Unread,
    /// Read, no byte yet: the deadline.
    Waiting(Instant),
    /// A byte came (or the body ended) at this instant.
    Arrived(Instant),
}

impl TimedBody {
    pub(super) fn new(inner: Incoming, deadline: Instant, pace: Pace) -> Self {
        TimedBody {
            inner,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            pace,
            first_byte: FirstByte::Unread,
            received: 0,
        }
    }

    /// The nearest deadline now.
    fn next_deadline(&self) -> Instant {
        let paced = match self.first_byte {
            FirstByte::Unread => return self.deadline,
            FirstByte::Waiting(first) => first,
            FirstByte::Arrived(at) => {
                let credit_ms = self.received.saturating_mul(1000) / self.pace.min_rate.max(1);
                at + self.pace.first_byte + Duration::from_millis(credit_ms)
            }
        };
        paced.min(self.deadline)
    }
}

/// Why a timed body failed.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body not received in time")
    }
}

impl std::error::Error for BodyTimedOut {}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let FirstByte::Unread = self.first_byte {
            self.first_byte = FirstByte::Waiting(Instant::now() + self.pace.first_byte);
        }
        if let Poll::Ready(f) = Pin::new(&mut self.inner).poll_frame(cx) {
            if let FirstByte::Waiting(_) = self.first_byte {
                self.first_byte = FirstByte::Arrived(Instant::now());
            }
            if let Some(Ok(frame)) = &f {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.received = self.received.saturating_add(n);
            }
            return Poll::Ready(f.map(|r| r.map_err(Into::into)));
        }
        let end = self.next_deadline();
        let this = &mut *self;
        if expired(&mut this.timer, end, cx) {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
