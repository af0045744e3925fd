//! Request bodies read while streaming under a cap, with their memory reserved as they arrive: a
//! body over the cap is refused as soon as the declared length or the bytes received so far
//! exceed it, before the rest is buffered; and the bytes held are counted against a shared
//! budget (requests beyond it wait) and against the client address's share (requests beyond it
//! are refused), so one address cannot hold more than its share of the relay's body memory.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::{Body, HttpBody as _};
use tokio::sync::Semaphore;

use relay_core::rate::{address_key, AddrKey};

/// The general request body cap (docs/protocol.md §3): 8 MiB.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// The cap for challenge, enrol and rotate bodies (and the bodies of info, health and metrics).
pub(crate) const MAX_SMALL_BODY: usize = 8_192;

/// Room in a push body for everything but one target's `wire_b64`: the JSON around it, a
/// 300-unit item id escaped as `\uXXXX` (1,800 bytes), kind and host key, with margin.
pub(crate) const PUSH_ENVELOPE_ALLOWANCE: usize = 4_096;

/// The largest `--max-item-bytes` whose item still fits a push body under [`MAX_BODY`]: its
/// base64 form (4 characters per 3 bytes) plus [`PUSH_ENVELOPE_ALLOWANCE`]. A larger limit
/// would promise items no request could carry.
pub const MAX_ITEM_BYTES_IN_BODY: u64 = ((MAX_BODY - PUSH_ENVELOPE_ALLOWANCE) / 4 * 3) as u64;

/// Total request-body memory held at once (bytes); requests beyond it wait for room.
pub(crate) const BODY_BUDGET: u64 = 256 * 1024 * 1024;
/// Default for `--max-body-bytes-per-address`: four full-size bodies.
pub(crate) const DEFAULT_BODY_BYTES_PER_ADDRESS: u64 = 4 * MAX_BODY as u64;

/// A body reading this many bytes lets other tasks run before it reads on: a worker reading
/// a full 8 MiB body in one go kept every other connection on it waiting (for tens of ms).
const YIELD_EVERY: usize = 64 * 1024;

/// A body reserves its memory in steps of this many bytes as it arrives.
const RESERVE_STEP: u64 = 64 * 1024;

/// Most bytes read and discarded after an early answer (docs/protocol.md §3: 64 MiB or 10 s).
pub(crate) const DRAIN_MAX_BYTES: u64 = 64 * 1024 * 1024;
/// Longest a drain lasts.
pub(crate) const DRAIN_MAX_TIME: Duration = Duration::from_secs(10);

/// The memory limits on request bodies: a budget shared by all requests (in KiB permits) and a
/// cap per client address (IPv4 address, IPv6 /64) on bytes held at once.
pub(crate) struct BodyLimits {
    global: Semaphore,
    per_address: Mutex<HashMap<AddrKey, u64>>,
    address_cap: u64,
}

/// Why a body could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BodyError {
    /// Over the cap (answer 413).
    TooLarge,
    /// The client's address already holds its share of body memory (answer 429).
    AddressBusy,
    /// The shared budget had no room for more of a body that is already partly held (answer
    /// 503).
    Busy,
    /// The client stopped sending or the stream failed.
    Aborted,
    /// The budget is closed: the relay is shutting down.
    Closed,
}

impl BodyLimits {
    /// A shared budget of `budget` bytes, and at most `address_cap` bytes held per address.
    pub fn new(budget: u64, address_cap: u64) -> Self {
        BodyLimits {
            global: Semaphore::new(usize::try_from(budget / 1024).unwrap_or(usize::MAX).max(1)),
            per_address: Mutex::new(HashMap::new()),
            address_cap,
        }
    }

    /// An empty reservation for a request from `addr`; it grows as the body arrives and gives
    /// everything back when dropped.
    pub(crate) fn reservation(&self, addr: &str) -> Reservation<'_> {
        Reservation {
            limits: self,
            addr: address_key(addr),
            bytes: 0,
            kib: 0,
        }
    }

    /// Addresses holding body memory now (for tests: the table empties when requests end).
    #[cfg(test)]
    pub(crate) fn addresses_holding(&self) -> usize {
        self.table().len()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<AddrKey, u64>> {
        // Every update is one insert or remove: the map stays consistent after a panic.
        self.per_address.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Body memory held for one request: `bytes` of its address's share, `kib` permits of the
/// shared budget.
pub(crate) struct Reservation<'a> {
    limits: &'a BodyLimits,
    addr: AddrKey,
    bytes: u64,
    kib: u32,
}

impl Reservation<'_> {
    /// Hold at least `total` bytes: the address's share first (refused when it is used up, so a
    /// flood from one address gets answers rather than a queue), then the shared budget (waits
    /// for room).
    ///
    /// # Errors
    /// [`BodyError::AddressBusy`] past the address's share; [`BodyError::Closed`] once the budget
    /// is closed.
    #[cfg(test)]
    pub(crate) async fn grow_to(&mut self, total: u64) -> Result<(), BodyError> {
        self.grow(total, total).await
    }

    /// Hold `want` bytes, or at least `need` when the address's share has no room for `want`;
    /// waits for room in the shared budget.
    async fn grow(&mut self, need: u64, want: u64) -> Result<(), BodyError> {
        let Some(kib) = self.take_share(need, want)? else {
            return Ok(());
        };
        let permit = self
            .limits
            .global
            .acquire_many(kib)
            .await
            .map_err(|_| BodyError::Closed)?;
        permit.forget();
        self.kib += kib;
        Ok(())
    }

    /// [`Reservation::grow`] without waiting: a request that already holds part of the budget
    /// must not wait for more, or requests holding parts could all wait for each other.
    ///
    /// # Errors
    /// [`BodyError::Busy`] when the shared budget has no room now.
    fn try_grow(&mut self, need: u64, want: u64) -> Result<(), BodyError> {
        let before = self.bytes;
        let Some(kib) = self.take_share(need, want)? else {
            return Ok(());
        };
        match self.limits.global.try_acquire_many(kib) {
            Ok(permit) => {
                permit.forget();
                self.kib += kib;
                Ok(())
            }
            Err(_) => {
                self.give_back_share(before);
                Err(BodyError::Busy)
            }
        }
    }

    /// Count `want` (else `need`) bytes in the address's share; the shared-budget KiB still to
    /// take, `None` when nothing more is needed.
    fn take_share(&mut self, need: u64, want: u64) -> Result<Option<u32>, BodyError> {
        if need <= self.bytes {
            return Ok(None);
        }
        let mut table = self.limits.table();
        let held = table.entry(self.addr.clone()).or_insert(0);
        let room = self.limits.address_cap.saturating_sub(*held);
        let total = if want - self.bytes <= room {
            want
        } else if need - self.bytes <= room {
            need
        } else {
            if *held == 0 {
                table.remove(&self.addr);
            }
            return Err(BodyError::AddressBusy);
        };
        *held += total - self.bytes;
        self.bytes = total;
        let kib = u32::try_from(total.div_ceil(1024).max(1)).unwrap_or(u32::MAX);
        Ok((kib > self.kib).then(|| kib - self.kib))
    }

    /// Return share bytes down to `to`.
    fn give_back_share(&mut self, to: u64) {
        let mut table = self.limits.table();
        if let Some(held) = table.get_mut(&self.addr) {
            *held = held.saturating_sub(self.bytes - to);
            if *held == 0 {
                table.remove(&self.addr);
            }
        }
        self.bytes = to;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.limits.global.add_permits(self.kib as usize);
        if self.bytes > 0 {
            self.give_back_share(0);
        }
    }
}

/// Read `body` into memory, refusing more than `cap` bytes, reserving its memory in
/// `reservation` only once bytes arrive, so a client that declares a large body and sends
/// nothing holds nothing: a declared length whole at the first byte (waiting for room in the
/// shared budget while holding none of it), a body without a length in [`RESERVE_STEP`]s as it
/// arrives (only the first step waits; see [`Reservation::try_grow`]). On an error the rest of
/// the body is still in `body` (to drain it).
///
/// # Errors
/// [`BodyError::TooLarge`] once the declared or received length passes `cap`; see
/// [`BodyError`] for the others.
pub(crate) async fn read_capped(
    body: &mut Body,
    cap: usize,
    declared: Option<u64>,
    reservation: &mut Reservation<'_>,
) -> Result<Vec<u8>, BodyError> {
    let cap64 = cap as u64;
    if declared.is_some_and(|n| n > cap64) || body.size_hint().lower() > cap64 {
        return Err(BodyError::TooLarge);
    }
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
                    match declared {
                        // A declared body is reserved whole at its first byte.
                        Some(n) => reservation.grow(n, n).await?,
                        None if reservation.bytes == 0 => {
                            reservation
                                .grow(len, len.next_multiple_of(RESERVE_STEP).min(cap64))
                                .await?;
                        }
                        None => reservation
                            .try_grow(len, len.next_multiple_of(RESERVE_STEP).min(cap64))?,
                    }
                    if buf.capacity() == 0 {
                        buf.reserve_exact(declared.map_or(data.len(), |n| n as usize));
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

/// Read and discard what is left of `body` in the background (at most [`DRAIN_MAX_BYTES`] or
/// [`DRAIN_MAX_TIME`]), so that a client still writing the body it was refused for reads the
/// answer instead of a reset; the connection closes afterwards (the answer says
/// `connection: close`).
pub fn drain(mut body: Body) {
    if body.is_end_stream() {
        return;
    }
    tokio::spawn(async move {
        let _ = tokio::time::timeout(DRAIN_MAX_TIME, async {
            let mut drained = 0u64;
            while drained < DRAIN_MAX_BYTES {
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

    #[tokio::test]
    async fn budget_waits_for_room() {
        let limits = BodyLimits::new(4 * 1024, u64::MAX);
        let mut first = limits.reservation("192.0.2.1");
        first.grow_to(3 * 1024).await.unwrap();
        let mut second = limits.reservation("192.0.2.2");
        let blocked =
            tokio::time::timeout(Duration::from_millis(50), second.grow_to(2 * 1024)).await;
        assert!(blocked.is_err(), "over budget waits");
        drop(first);
        let mut third = limits.reservation("192.0.2.3");
        assert!(third.grow_to(2 * 1024).await.is_ok());
    }

    #[tokio::test]
    async fn one_address_holds_at_most_its_share_and_gives_it_back() {
        let limits = BodyLimits::new(1 << 30, 10_000);
        let mut a = limits.reservation("192.0.2.1");
        a.grow_to(6_000).await.unwrap();
        let mut b = limits.reservation("192.0.2.1:4000");
        assert_eq!(b.grow_to(5_000).await, Err(BodyError::AddressBusy));
        b.grow_to(4_000).await.unwrap();
        let mut other = limits.reservation("192.0.2.9");
        other.grow_to(10_000).await.unwrap();
        // IPv6 by /64: another address of the same /64 shares the share.
        let mut v6 = limits.reservation("2001:db8::1");
        v6.grow_to(10_000).await.unwrap();
        let mut v6b = limits.reservation("2001:db8::2");
        assert_eq!(v6b.grow_to(1).await, Err(BodyError::AddressBusy));
        drop((a, b, other, v6, v6b));
        assert_eq!(limits.addresses_holding(), 0, "the table empties");
        assert_eq!(limits.global.available_permits(), 1 << 20);
    }

    #[tokio::test]
    async fn caps_are_inclusive_and_enforced() {
        let limits = BodyLimits::new(1 << 30, u64::MAX);
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

    /// A body that arrives in the given pieces and declares no length.
    struct Pieces(std::collections::VecDeque<axum::body::Bytes>);

    impl axum::body::HttpBody for Pieces {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
            std::task::Poll::Ready(self.0.pop_front().map(|d| Ok(hyper::body::Frame::data(d))))
        }
    }

    #[tokio::test]
    async fn a_body_without_a_length_reserves_as_it_arrives() {
        let limits = BodyLimits::new(1 << 30, 200 * 1024);
        let piece = axum::body::Bytes::from(vec![1u8; 100 * 1024]);
        let mut body = Body::new(Pieces([piece.clone(), piece.clone()].into()));
        let mut r = limits.reservation("192.0.2.1");
        let got = read_capped(&mut body, MAX_BODY, None, &mut r).await;
        assert_eq!(got.map(|b| b.len()), Ok(200 * 1024));
        assert_eq!(r.bytes, 200 * 1024, "reserved in steps, never past the cap");
        drop(r);
        let mut body = Body::new(Pieces([piece.clone(), piece.clone(), piece].into()));
        let mut r = limits.reservation("192.0.2.1");
        let got = read_capped(&mut body, MAX_BODY, None, &mut r).await;
        // The whole 200 KiB share held after the second piece; the third needs more.
        assert_eq!(got, Err(BodyError::AddressBusy));
        assert_eq!(r.bytes, 200 * 1024);
    }
}
