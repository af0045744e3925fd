//! Request bodies read while streaming under a cap: a body over the cap is refused as soon as the
//! declared length or the bytes received so far exceed it, before the rest is buffered.

use std::pin::Pin;

use axum::body::{Body, HttpBody as _};

/// The general request body cap (PROTOCOL.md §3): 8 MiB.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// The cap for challenge, enrol and rotate bodies.
pub const MAX_SMALL_BODY: usize = 8_192;

/// Total request-body memory held at once (bytes); requests beyond it wait for room.
pub const BODY_BUDGET: u64 = 256 * 1024 * 1024;

/// A shared byte budget for request bodies, in KiB units.
pub struct BodyBudget(tokio::sync::Semaphore);

impl BodyBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> Self {
        BodyBudget(tokio::sync::Semaphore::new(
            usize::try_from(bytes / 1024).unwrap_or(usize::MAX).max(1),
        ))
    }

    /// Wait until `bytes` (rounded up to KiB, at least 1 KiB) fit; `None` once closed.
    pub async fn reserve(&self, bytes: u64) -> Option<tokio::sync::SemaphorePermit<'_>> {
        let kib = u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        self.0.acquire_many(kib).await.ok()
    }
}

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub enum BodyError {
    /// Over the cap (answer 413).
    TooLarge,
    /// The client stopped sending or the stream failed.
    Aborted,
}

/// Read `body` into memory, refusing more than `cap` bytes.
///
/// # Errors
/// [`BodyError::TooLarge`] once the declared or received length passes `cap`.
pub async fn read_capped(
    mut body: Body,
    cap: usize,
    declared: Option<u64>,
) -> Result<Vec<u8>, BodyError> {
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(BodyError::TooLarge);
    }
    if body.size_hint().lower() > cap as u64 {
        return Err(BodyError::TooLarge);
    }
    let initial = declared.map_or(0, |n| n as usize).min(cap);
    let mut buf = Vec::with_capacity(initial);
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => return Ok(buf),
            Some(Err(_)) => return Err(BodyError::Aborted),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    if buf.len() + data.len() > cap {
                        return Err(BodyError::TooLarge);
                    }
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn budget_waits_for_room() {
        let b = BodyBudget::new(4 * 1024);
        let first = b.reserve(3 * 1024).await.unwrap();
        let blocked =
            tokio::time::timeout(std::time::Duration::from_millis(50), b.reserve(2 * 1024)).await;
        assert!(blocked.is_err(), "over budget waits");
        drop(first);
        assert!(b.reserve(2 * 1024).await.is_some());
    }

    #[tokio::test]
    async fn caps_are_inclusive_and_enforced() {
        let ok = read_capped(Body::from(vec![b'x'; 10]), 10, None)
            .await
            .unwrap();
        assert_eq!(ok.len(), 10);
        assert_eq!(
            read_capped(Body::from(vec![b'x'; 11]), 10, None).await,
            Err(BodyError::TooLarge)
        );
        assert_eq!(
            read_capped(Body::from("x"), 10, Some(11)).await,
            Err(BodyError::TooLarge)
        );
    }
}
