//! [`Pending`]: a write's answer, resolved once the operation is durable.

use crate::{Result, StoreError};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A write submitted to a backend. Resolves once the operation is durable (or failed).
/// Await it from async code or call [`Pending::wait`] from a thread.
pub struct Pending<T>(PendingState<T>);

enum PendingState<T> {
    /// Answered by a writer (fjall's group-commit thread, a database task) through a oneshot.
    Waiting(tokio::sync::oneshot::Receiver<Result<T>>),
    /// Already decided when it was made; `None` once taken.
    Ready(Option<Result<T>>),
}

impl<T> Pending<T> {
    /// A write answered through `rx`; a dropped sender resolves to [`StoreError::Closed`].
    pub fn from_receiver(rx: tokio::sync::oneshot::Receiver<Result<T>>) -> Self {
        Pending(PendingState::Waiting(rx))
    }

    /// A write whose result is already known (durable already, or refused before any write).
    pub fn ready(result: Result<T>) -> Self {
        Pending(PendingState::Ready(Some(result)))
    }

    /// Block the calling thread until the operation is durable.
    ///
    /// # Errors
    /// The operation's error, or [`StoreError::Closed`] if the writer stopped.
    pub fn wait(self) -> Result<T> {
        match self.0 {
            PendingState::Waiting(rx) => rx.blocking_recv().unwrap_or(Err(StoreError::Closed)),
            PendingState::Ready(r) => r.unwrap_or(Err(StoreError::Closed)),
        }
    }
}

impl<T> Unpin for Pending<T> {}

impl<T> Future for Pending<T> {
    type Output = Result<T>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.0 {
            PendingState::Waiting(rx) => Pin::new(rx)
                .poll(cx)
                .map(|r| r.unwrap_or(Err(StoreError::Closed))),
            PendingState::Ready(r) => Poll::Ready(r.take().unwrap_or(Err(StoreError::Closed))),
        }
    }
}
