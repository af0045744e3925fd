//! The connection layer: the accept loop of `mbx-relay serve`, which protects every listener
//! against slow and hostile clients before any request reaches the [`Service`] it serves (the
//! public pipeline, [`super::pipeline`], or the private listener). It knows nothing of routes.
//!
//! - **Connection cap**: at most `max_connections` connections are served at once; one more is
//!   answered `503 {"error":"too many connections, retry later"}` with `connection: close` (by a
//!   bounded number of short-lived refusal tasks; beyond those it is closed unanswered).
//! - **Per-address connection cap**: one client address (IPv4 address, IPv6 /64) holds at most
//!   `max_connections_per_address` of those connections; one more is answered
//!   `429 {"error":"too many connections from this address, retry later"}` the same way, so
//!   other addresses keep being served while one is at its cap. This counts the socket address
//!   (the accept loop sees no proxy header): behind a reverse proxy it counts the proxy
//!   (see [`super::conn_limit`]).
//! - **Header timeout**: the request head must be complete within `header_timeout` from the
//!   moment the connection waits for it (hyper's `header_read_timeout`), so a client trickling
//!   header bytes is cut off.
//! - **Keep-alive idle timeout**: a connection that sends nothing for `idle_timeout` while the
//!   relay waits for its next request (after accept, or after a response) is closed.
//! - **Body timeout**: the request body must arrive within `body_timeout` of the head; past that
//!   the body read fails and the handler answers 400 (then the connection is closed). A response
//!   the client does not read for `body_timeout` is abandoned too.
//! - **First body byte**: once the handler starts reading a body, its first byte must arrive
//!   within `body_first_byte_timeout`, else the read fails (400), so a client that declares a
//!   body and sends nothing holds its connection only briefly; after it, the body must average
//!   `body_min_rate` bytes a second (the first-byte timeout as slack), so a body that stalls
//!   holds what it sent only briefly too.
//! - **Streamed responses**: while a response is being streamed (the events stream of live
//!   delivery holds a [`Streaming`] handle), the idle timeout does not apply to its connection;
//!   a long-poll pull is a request in progress, which the idle timeout never cuts. Header and
//!   body timeouts apply to both before they start waiting; the write stall timeout always.
//! - **TLS** (when `--tls-cert` is given, [`super::tls`]): the handshake runs inside the
//!   connection's slots and must finish within `header_timeout`, so a client that opens a
//!   connection and never completes it is cut off like a slow request head; refusals at the caps
//!   are answered over TLS too.
//!
//! Every timeout is a plain deadline on a timer: nothing here buffers client bytes, so memory per
//! connection stays what hyper and the handler's body cap allow; hyper's read buffer is bounded
//! to the header cap plus a little ([`READ_BUFFER_MAX`]), so an unterminated head costs at most
//! that.

mod config;
mod conn_limit;
mod guarded_io;
mod streaming;
mod timed_body;

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

pub use config::{BodyGuardArgs, BodyGuardConfig, GuardArgs, GuardConfig};
pub(crate) use streaming::{Streaming, StreamingHeld};

use self::conn_limit::{AddressSlot, OpenPerAddress};
use self::guarded_io::GuardedIo;
use self::timed_body::{Pace, TimedBody};
use super::metrics::conn::ConnRefusal;
use super::metrics::HttpMetrics;
use super::tls::{HandshakeFailed, Tls};

/// Largest total size of request header names and values; hosts send a handful of short ones.
pub(crate) const MAX_HEADER_BYTES: usize = 16 * 1024;
/// Most refusals being written at once (each lives at most [`REFUSAL_TIME`]).
const REFUSAL_TASKS: usize = 64;
/// How long a refusal may take to write and drain.
const REFUSAL_TIME: Duration = Duration::from_secs(1);
/// Most request bytes drained from a refused connection (so the close is not a reset).
const REFUSAL_DRAIN: usize = 16 * 1024;
/// The refusal sent when the connection cap is reached.
const REFUSAL_BODY: &str = r#"{"error":"too many connections, retry later"}"#;
/// The refusal sent when the client's address is at its connection cap.
const PER_ADDRESS_REFUSAL_BODY: &str =
    r#"{"error":"too many connections from this address, retry later"}"#;
/// hyper's read buffer per connection (hyper's default is about 408 KiB): the request-header
/// cap plus room for the request line and header framing, so an unterminated head costs at most
/// this before hyper answers `431` and closes. Bodies stream through it in pieces of this size.
const READ_BUFFER_MAX: usize = MAX_HEADER_BYTES + 4 * 1024;
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// An answer being worked out.
pub(crate) type Answer = Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// What answers the requests a listener lets through, called straight from hyper's service (no
/// router in between). The request's body carries its deadlines and pace, and its extensions a
/// [`Streaming`] handle of the connection. An answer that is a placeholder from
/// [`super::parked`] is awaited further here, after the service's own futures are dropped.
pub(crate) trait Service: Send + Sync + 'static {
    /// Answer `req` from `peer`.
    fn call(self: Arc<Self>, peer: SocketAddr, req: Request<Body>) -> Answer;
}

/// State shared by every connection.
struct Shared {
    service: Arc<dyn Service>,
    config: GuardConfig,
    /// Set when the listener speaks TLS.
    tls: Option<Arc<Tls>>,
    /// Where connections, refusals and cut-offs are counted (the public listener's).
    metrics: Option<Arc<HttpMetrics>>,
}

impl Shared {
    fn refused(&self, why: ConnRefusal) {
        if let Some(m) = &self.metrics {
            m.conn.refused(why);
        }
    }
}

/// Serve `service` on `listener` under the guard (over TLS when `tls` is set) until `shutdown`
/// resolves, then stop accepting, let in-flight requests finish (idle connections close at once)
/// and return. Connections and refusals are counted in `metrics` when given.
///
/// # Errors
/// An invalid [`GuardConfig`].
pub(crate) async fn serve(
    listener: TcpListener,
    service: Arc<dyn Service>,
    config: GuardConfig,
    tls: Option<Arc<Tls>>,
    metrics: Option<Arc<HttpMetrics>>,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let max = config.max_connections;
    let shared = Arc::new(Shared {
        service,
        config,
        tls,
        metrics,
    });
    let slots = Arc::new(Semaphore::new(max));
    let per_address = OpenPerAddress::new(shared.config.max_connections_per_address);
    let refusals = Arc::new(Semaphore::new(REFUSAL_TASKS));
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        // Small answers (a woken pull, an event) go out at once, not after the last one's ACK.
        let _ = stream.set_nodelay(true);
        // The global slot first: address entries then never outnumber open connections.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            shared.refused(ConnRefusal::MaxConnections);
            refuse(stream, peer, &refusals, Refusal::Full, shared.tls.clone());
            continue;
        };
        let Some(address_slot) = per_address.try_open(peer.ip()) else {
            drop(slot);
            shared.refused(ConnRefusal::MaxConnectionsPerAddress);
            refuse(
                stream,
                peer,
                &refusals,
                Refusal::AddressFull,
                shared.tls.clone(),
            );
            continue;
        };
        tokio::spawn(serve_connection(
            shared.clone(),
            stream,
            peer,
            (slot, address_slot),
            stop_rx.clone(),
        ));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection task holds a slot until it ends: wait for all of them.
    let _ = slots.acquire_many(max as u32).await;
    Ok(())
}

/// Why a connection is refused at accept.
#[derive(Clone, Copy)]
enum Refusal {
    /// Every connection slot is taken: 503.
    Full,
    /// The client's address holds its share of the slots: 429.
    AddressFull,
}

/// Answer a connection over a cap (503, or 429 for its address; over TLS when the listener
/// speaks it), drain a little of its request, close it.
fn refuse(
    stream: TcpStream,
    peer: SocketAddr,
    refusals: &Arc<Semaphore>,
    why: Refusal,
    tls: Option<Arc<Tls>>,
) {
    let Ok(permit) = refusals.clone().try_acquire_owned() else {
        return; // Dropped: closed without an answer.
    };
    let (status, body) = match why {
        Refusal::Full => ("503 Service Unavailable", REFUSAL_BODY),
        Refusal::AddressFull => ("429 Too Many Requests", PER_ADDRESS_REFUSAL_BODY),
    };
    tokio::spawn(async move {
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n\
             cache-control: no-store\r\nretry-after: {}\r\nconnection: close\r\n\
             content-length: {}\r\n\r\n{body}",
            super::retry_after::seconds(super::retry_after::OVERLOAD),
            body.len()
        );
        let _ = tokio::time::timeout(REFUSAL_TIME, async {
            match tls {
                None => write_refusal(stream, answer.as_bytes()).await,
                Some(tls) => match tls.handshake(stream, peer.ip(), REFUSAL_TIME).await {
                    Ok(stream) => write_refusal(stream, answer.as_bytes()).await,
                    Err(_) => Ok(()),
                },
            }
        })
        .await;
        drop(permit);
    });
}

/// Write a refusal, close the sending side and drain a little of the request.
async fn write_refusal<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    answer: &[u8],
) -> io::Result<()> {
    stream.write_all(answer).await?;
    stream.shutdown().await?;
    let mut sink = [0u8; 1024];
    let mut drained = 0;
    while drained < REFUSAL_DRAIN {
        match stream.read(&mut sink).await? {
            0 => break,
            n => drained += n,
        }
    }
    Ok(())
}

/// Serve one connection; `slots` (its connection slot and its address's) are held until it ends.
async fn serve_connection(
    shared: Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    slots: (OwnedSemaphorePermit, AddressSlot),
    stop: watch::Receiver<bool>,
) {
    let cfg = &shared.config;
    let _open = shared.metrics.as_ref().map(|m| m.conn.opened());
    let streaming = Streaming::default();
    let io = GuardedIo::new(
        stream,
        cfg.idle_timeout,
        cfg.body_timeout,
        streaming.clone(),
    );
    match &shared.tls {
        None => serve_http(&shared, io, peer, streaming, stop).await,
        // Boxed: the TLS state (handshake, session) is kilobytes, and inline it would size
        // every connection's task, plain ones included (7 KB instead of about 1 KB).
        Some(tls) => Box::pin(serve_tls(&shared, tls, io, peer, streaming, stop)).await,
    }
    drop(slots);
}

/// The TLS handshake (within the header timeout), then HTTP over it.
async fn serve_tls(
    shared: &Arc<Shared>,
    tls: &Tls,
    io: GuardedIo,
    peer: SocketAddr,
    streaming: Streaming,
    stop: watch::Receiver<bool>,
) {
    match tls
        .handshake(io, peer.ip(), shared.config.header_timeout)
        .await
    {
        Ok(io) => serve_http(shared, io, peer, streaming, stop).await,
        Err(why) => shared.refused(match why {
            HandshakeFailed::Window => ConnRefusal::TlsHandshakeWindow,
            HandshakeFailed::Failed => ConnRefusal::TlsHandshakeFailed,
            HandshakeFailed::TimedOut => ConnRefusal::TlsHandshakeTimeout,
        }),
    }
}

/// Serve HTTP/1.1 requests on one connection (plain or TLS) until it ends or the relay stops.
async fn serve_http<S>(
    shared: &Arc<Shared>,
    io: S,
    peer: SocketAddr,
    streaming: Streaming,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let cfg = &shared.config;
    let io = TokioIo::new(io);
    let service_state = shared.clone();
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let shared = service_state.clone();
        req.extensions_mut().insert(streaming.clone());
        async move {
            // Boxed: the request's futures are freed once it is answered or parked (a waiting
            // pull, [`super::parked`]), so a parked wait holds only its own small future.
            let mut resp = timed(&shared, peer, req).await;
            if let Some(later) = super::parked::take(&mut resp) {
                resp = later.await;
            }
            Ok::<_, Infallible>(resp)
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(cfg.header_timeout)
        .max_buf_size(READ_BUFFER_MAX)
        .keep_alive(true);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let stopping = *stop.borrow();
    if stopping {
        conn.as_mut().graceful_shutdown();
    }
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                if e.is_timeout() {
                    shared.refused(ConnRefusal::HeaderTimeout);
                }
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        _ = stop.changed(), if !stopping => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.as_mut().await;
        }
    }
}

/// One request handed to the service with a body that keeps its deadlines: whole by
/// `--body-timeout` after the head, first byte within `--body-first-byte-timeout` of the first
/// read, then `--body-min-rate` ([`TimedBody`]).
fn timed(shared: &Shared, peer: SocketAddr, req: Request<Incoming>) -> Answer {
    let deadline = Instant::now() + shared.config.body_timeout;
    let pace = Pace {
        first_byte: shared.config.body.first_byte_timeout,
        min_rate: shared.config.body.min_rate,
    };
    let req = req.map(|b| Body::new(TimedBody::new(b, deadline, pace)));
    shared.service.clone().call(peer, req)
}
