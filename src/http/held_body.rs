//! A response body that keeps the memory of its bytes counted in the account
//! ([`super::account`]) until they have gone out: it hands the connection one piece at a time
//! (hyper asks for the next piece only once the last one is written), and gives back each
//! piece's share as it goes. An answer a client does not read (a pull page) thus costs its key
//! its share meanwhile, and a client that opens many connections and never reads holds at most
//! that share, not gigabytes.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::http::StatusCode;
use axum::response::Response;
use hyper::body::{Frame, SizeHint};

use super::account::Held;
use super::answer::json_text_response;

/// Bytes handed to the connection at a time.
const PIECE: usize = 64 * 1024;

/// `200` with the JSON `text`, its bytes counted in `held` until written.
pub(crate) fn json_holding(text: Vec<u8>, held: Held) -> Response {
    json_text_response(StatusCode::OK, Vec::new()).map(|_| {
        Body::new(HeldBody {
            rest: Bytes::from(text),
            held,
        })
    })
}

/// What is left to send and what it holds.
struct HeldBody {
    rest: Bytes,
    held: Held,
}

impl HttpBody for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.rest.is_empty() {
            self.held.shrink_to(0);
            return Poll::Ready(None);
        }
        let n = self.rest.len().min(PIECE);
        let piece = self.rest.split_to(n);
        let left = self.rest.len() as u64;
        // The piece is the connection's now (at most hyper's write buffer): what is held is
        // what is left.
        self.held.shrink_to(left);
        Poll::Ready(Some(Ok(Frame::data(piece))))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.rest.len() as u64)
    }
}
