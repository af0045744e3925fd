//! A response body that keeps the memory of its bytes counted in the account
//! ([`super::account`]) until it has been written or the connection ends: an answer a client
//! does not read (a pull page) costs its address and key their shares meanwhile, so a client
//! that opens many connections and never reads holds at most its shares, not gigabytes.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

use super::account::Held;

/// `r` whose body holds `held` until it is dropped.
pub(crate) fn holding(r: Response, held: Held) -> Response {
    r.map(|inner| Body::new(HeldBody { inner, _held: held }))
}

/// The body and what it holds.
struct HeldBody {
    inner: Body,
    _held: Held,
}

impl HttpBody for HeldBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
