//! The socket with two deadlines: the idle timeout while waiting for the next request, and the
//! write stall timeout for a response the client does not read.

use std::future::Future as _;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::Streaming;

/// The socket with two deadlines: while the relay waits for the next request (after accept or
/// after writing), the client must send a byte within `idle`; a write that makes no progress
/// for `stall` fails.
pub(super) struct GuardedIo {
    inner: TcpStream,
    idle: Duration,
    stall: Duration,
    /// Set while waiting for the next request: since when.
    waiting_since: Option<Instant>,
    read_timer: Pin<Box<Sleep>>,
    /// Set while a write is blocked: since when.
    blocked_since: Option<Instant>,
    write_timer: Pin<Box<Sleep>>,
    /// Responses streaming on this connection (no idle timeout meanwhile).
    streaming: Streaming,
}

impl GuardedIo {
    pub(super) fn new(
        inner: TcpStream,
        idle: Duration,
        stall: Duration,
        streaming: Streaming,
    ) -> Self {
        let now = Instant::now();
        GuardedIo {
            inner,
            idle,
            stall,
            streaming,
            waiting_since: Some(now),
            read_timer: Box::pin(tokio::time::sleep_until(now + idle)),
            blocked_since: None,
            write_timer: Box::pin(tokio::time::sleep_until(now + stall)),
        }
    }
}

/// Arm `timer` for `deadline`; true when it has passed.
pub(super) fn expired(
    timer: &mut Pin<Box<Sleep>>,
    deadline: Instant,
    cx: &mut Context<'_>,
) -> bool {
    if Instant::now() >= deadline {
        return true;
    }
    if timer.deadline() != deadline {
        timer.as_mut().reset(deadline);
    }
    timer.as_mut().poll(cx).is_ready()
}

impl AsyncRead for GuardedIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.waiting_since = None;
                }
                Poll::Ready(r)
            }
            Poll::Pending => match this.waiting_since {
                // Idle too long: report end of stream, so hyper closes the connection quietly.
                Some(since)
                    if !this.streaming.active()
                        && expired(&mut this.read_timer, since + this.idle, cx) =>
                {
                    Poll::Ready(Ok(()))
                }
                _ => Poll::Pending,
            },
        }
    }
}

impl GuardedIo {
    /// Track a write's outcome: progress restarts the wait for the next request; a write
    /// blocked for longer than `stall` fails.
    fn after_write(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match r {
            Poll::Ready(r) => {
                self.blocked_since = None;
                if matches!(r, Ok(n) if n > 0) {
                    self.waiting_since = Some(Instant::now());
                }
                Poll::Ready(r)
            }
            Poll::Pending => {
                let since = *self.blocked_since.get_or_insert_with(Instant::now);
                if expired(&mut self.write_timer, since + self.stall, cx) {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "client did not read the response in time",
                    )))
                } else {
                    Poll::Pending
                }
            }
        }
    }
}

impl AsyncWrite for GuardedIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.after_write(cx, r)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
