//! Answers given later by a small future (long-poll pulls): the handler does its work, then
//! returns a placeholder response carrying the rest of the answer as a [`Later`]; the accept
//! loop drops the handler's futures (handler and dispatch: kilobytes each, sized for
//! the largest route) and awaits only the [`Later`] meanwhile. What stays parked while a pull
//! waits is then that future and the connection, not the whole request's call chain.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::Response;

/// The rest of an answer.
pub(super) type Later = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// The response extension holding a [`Later`] (extensions must be `Clone + Sync`; taken once).
#[derive(Clone)]
struct Parked(Arc<Mutex<Option<Later>>>);

/// A placeholder response whose real answer is `later`'s output (see [`take`]).
pub(super) fn response(
    later: impl Future<Output = Response<Body>> + Send + 'static,
) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    r.extensions_mut()
        .insert(Parked(Arc::new(Mutex::new(Some(Box::pin(later))))));
    r
}

/// The [`Later`] of a placeholder from [`response`]; `None` for any other response.
pub(super) fn take(r: &mut Response<Body>) -> Option<Later> {
    let Parked(slot) = r.extensions_mut().remove::<Parked>()?;
    let later = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
    later
}
