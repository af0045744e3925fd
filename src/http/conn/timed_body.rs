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
/// `min_rate` over a sliding window ([`Pacer`]).
pub(super) struct TimedBody {
    inner: Incoming,
    /// When the whole body must be in.
    deadline: Instant,
    /// Armed for the nearest of the deadlines.
    timer: Pin<Box<Sleep>>,
    pacer: Pacer,
}

/// The pace a body must keep (see [`Pacer`]).
#[derive(Clone, Copy)]
pub(super) struct Pace {
    pub(super) first_byte: Duration,
    pub(super) min_rate: u64,
}

/// The pace rule of a body, over a sliding window as long as the first-byte timeout: its first
/// byte must come within the window of its first read, and from then on every window must bring
/// `min_rate` x window bytes (nginx's `client_body_timeout` between reads, Apache's `MinRate`).
/// A window starts when the last one was filled, so bytes sent early buy no time later: a body
/// that sent 6 MB and stalls is cut one window after it stalled, not minutes later.
struct Pacer {
    pace: Pace,
    /// The current window: since when, and the bytes it has brought. `None` until read.
    window: Option<(Instant, u64)>,
}

impl Pacer {
    /// Bytes each window must bring.
    fn quota(&self) -> u64 {
        let ms = u64::try_from(self.pace.first_byte.as_millis()).unwrap_or(u64::MAX);
        self.pace.min_rate.saturating_mul(ms) / 1000
    }

    /// The body is being read (the first read starts the first window).
    fn reading(&mut self, now: Instant) {
        if self.window.is_none() {
            self.window = Some((now, 0));
        }
    }

    /// `n` bytes arrived at `now` (0 for the end of the body).
    fn arrived(&mut self, now: Instant, n: u64) {
        let quota = self.quota().max(1);
        let (since, got) = self.window.get_or_insert((now, 0));
        *got = got.saturating_add(n);
        if *got >= quota {
            *since = now;
            *got = 0;
        }
    }

    /// When the current window ends unfilled; `None` before the first read.
    fn deadline(&self) -> Option<Instant> {
        self.window.map(|(since, _)| since + self.pace.first_byte)
    }
}

impl TimedBody {
    pub(super) fn new(inner: Incoming, deadline: Instant, pace: Pace) -> Self {
        TimedBody {
            inner,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            pacer: Pacer { pace, window: None },
        }
    }

    /// The nearest deadline now.
    fn next_deadline(&self) -> Instant {
        self.pacer
            .deadline()
            .map_or(self.deadline, |paced| paced.min(self.deadline))
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
        self.pacer.reading(Instant::now());
        if let Poll::Ready(f) = Pin::new(&mut self.inner).poll_frame(cx) {
            let n = match &f {
                Some(Ok(frame)) => frame.data_ref().map_or(0, |d| d.len() as u64),
                _ => 0,
            };
            self.pacer.arrived(Instant::now(), n);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer() -> Pacer {
        Pacer {
            pace: Pace {
                first_byte: Duration::from_secs(5),
                min_rate: 4096,
            },
            window: None,
        }
    }

    #[test]
    fn bytes_sent_early_buy_no_time_later() {
        let t0 = Instant::now();
        let mut p = pacer();
        assert_eq!(p.deadline(), None, "no deadline before the first read");
        p.reading(t0);
        assert_eq!(p.deadline(), Some(t0 + Duration::from_secs(5)));
        // 6.1 MB at once, then a stall: cut one window later (a credit rule gave ~25 minutes).
        p.arrived(t0 + Duration::from_millis(100), 6_100_000);
        assert_eq!(
            p.deadline(),
            Some(t0 + Duration::from_millis(100) + Duration::from_secs(5))
        );
    }

    #[test]
    fn each_window_must_bring_its_quota() {
        let t0 = Instant::now();
        let mut p = pacer();
        p.reading(t0);
        assert_eq!(p.quota(), 20_480);
        // Under the quota: the window does not move.
        p.arrived(t0 + Duration::from_secs(1), 10_000);
        p.arrived(t0 + Duration::from_secs(2), 10_000);
        assert_eq!(p.deadline(), Some(t0 + Duration::from_secs(5)));
        // Filled at 3 s: the next window runs from there.
        p.arrived(t0 + Duration::from_secs(3), 1_000);
        assert_eq!(p.deadline(), Some(t0 + Duration::from_secs(8)));
    }
}
