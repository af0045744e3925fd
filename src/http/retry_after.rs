//! `Retry-After` on every 429 and 503 the relay answers, in whole seconds: a rate window
//! answers the time until it frees; overload and store trouble a short fixed backoff. Every
//! answer of the handler passes [`ensure`] last, so a 429 or 503 without a wait of its own
//! still carries [`STORE_TROUBLE`]'s.

use std::time::Duration;

use axum::http::{header, HeaderValue, Response, StatusCode};

/// A cap on things held at once (connections, request-body memory): a slot frees as soon as
/// any request ends, so the client may come back soon.
pub(crate) const OVERLOAD: Duration = Duration::from_secs(1);
/// Store trouble (a failed write, the database reopening, shutting down) and any other 429
/// or 503 without a wait of its own: the store writer retries a reopen within 2 s.
pub(crate) const STORE_TROUBLE: Duration = Duration::from_secs(2);

/// `wait` in whole seconds, rounded up, at least 1 (`Retry-After: 0` would invite a retry
/// storm).
pub(crate) fn seconds(wait: Duration) -> u64 {
    u64::try_from(wait.as_millis().div_ceil(1_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Set `r`'s `Retry-After` to `wait`.
pub(crate) fn set<B>(r: &mut Response<B>, wait: Duration) {
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds(wait)));
}

/// Give a 429 or 503 that carries no `Retry-After` the [`STORE_TROUBLE`] backoff.
pub(crate) fn ensure<B>(r: &mut Response<B>) {
    let limited = matches!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    );
    if limited && !r.headers().contains_key(header::RETRY_AFTER) {
        set(r, STORE_TROUBLE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_round_up_to_at_least_one_second() {
        assert_eq!(seconds(Duration::ZERO), 1);
        assert_eq!(seconds(Duration::from_millis(1)), 1);
        assert_eq!(seconds(Duration::from_millis(1_001)), 2);
        assert_eq!(seconds(Duration::from_secs(60)), 60);
    }

    #[test]
    fn only_429_and_503_without_a_wait_get_the_backoff() {
        let mut r = Response::builder().status(503).body(()).unwrap();
        ensure(&mut r);
        assert_eq!(r.headers()[header::RETRY_AFTER], "2");
        let mut r = Response::builder().status(429).body(()).unwrap();
        set(&mut r, Duration::from_millis(12_500));
        ensure(&mut r);
        assert_eq!(r.headers()[header::RETRY_AFTER], "13");
        let mut r = Response::builder().status(400).body(()).unwrap();
        ensure(&mut r);
        assert!(!r.headers().contains_key(header::RETRY_AFTER));
    }
}
