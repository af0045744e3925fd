//! The two round trips of a write whose rules run in Rust (`relay_store::rules`) between its
//! reads and its writes: BEGIN in one flight with the locking reads, then the writes in one
//! flight with COMMIT. tokio-postgres pipelines requests issued together on one connection, and
//! the server runs them in the order sent, each statement on a snapshot taken after the one
//! before it (READ COMMITTED), so a read sent after a locking read sees every commit made
//! before that lock was granted.
//!
//! Statements are prepared once per connection (the pool's per-connection statement cache,
//! keyed by the SQL text) and always before a flight starts: a statement prepared inside the
//! flight would send its query only once its Parse answered, behind the statements meant to
//! follow it, and a flight's order is what its locks rely on.
//!
//! A failure before the second flight rolls back and may be rerun ([`crate::db::Db::run`]);
//! once COMMIT is in flight a lost connection leaves the outcome unknown, answered as an error
//! (the client's retry is deduplicated by the write's key), never as a success.

use std::future::Future;

use deadpool_postgres::GenericClient;

use crate::db::OpResult;

/// BEGIN, then `reads`, sent in one flight; the first error in statement order.
pub(crate) async fn begin_with<T>(
    c: &impl GenericClient,
    reads: impl Future<Output = OpResult<T>>,
) -> OpResult<T> {
    let (begun, read) = tokio::join!(biased; c.batch_execute("BEGIN"), reads);
    begun?;
    read
}

/// `writes`, then COMMIT, sent in one flight; and whether COMMIT was sent (always: a lost
/// connection now means an unknown outcome). A write that failed aborted the transaction, and
/// COMMIT then rolls it back.
pub(crate) async fn commit_with<T>(
    c: &impl GenericClient,
    writes: impl Future<Output = OpResult<T>>,
) -> (OpResult<T>, bool) {
    let (written, committed) = tokio::join!(biased; writes, c.batch_execute("COMMIT"));
    let r = match (written, committed) {
        (Err(e), _) => Err(e),
        (Ok(_), Err(e)) => Err(e.into()),
        (Ok(v), Ok(())) => Ok(v),
    };
    (r, true)
}

/// End the transaction after a failure before COMMIT (the connection goes back to the pool
/// clean, or is discarded by the caller when it is lost); `e` is the answer.
pub(crate) async fn rollback<T>(
    c: &impl GenericClient,
    e: crate::db::OpError,
) -> (OpResult<T>, bool) {
    let _ = c.batch_execute("ROLLBACK").await;
    (Err(e), false)
}
