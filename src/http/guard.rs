//! Protection against slow and hostile clients, in front of the handler: the accept loop of
//! `mbx-relay serve`.
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
//! - **Per-address limit for unauthenticated routes**: requests to routes that need no signed
//!   hop and are not already limited per address by the relay (unsigned info, health, metrics and
//!   unknown paths; challenge, enrol and rotate have the relay's own `--enrol-per-minute` window)
//!   count against the client address's one-minute window (`public_per_minute`); over it, `429`.
//!   A request whose signed hop fails (the handler marks its answer [`HopRefused`]) counts the
//!   same way; a valid signed call is not counted here.
//!   Addresses are keyed by [`relay_core::rate::address_key`] (IPv6 by /64 prefix). The table
//!   is hard-capped and evicts the oldest window when full, so new clients are still served
//!   (see [`relay_core::rate::RateTable`]).
//!
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

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderValue, Request, Response, StatusCode};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use super::answer::{answer_unread, retry_later};
use super::client_addr::{client_addr, TrustProxy};
use super::conn_limit::{AddressSlot, OpenPerAddress};
use super::metrics::conn::ConnRefusal;
use super::metrics::{HttpMetrics, RequestRefusal};
use super::route::Route;
use super::tls::{HandshakeFailed, Tls};
use relay_core::config::{default_duration, parse_duration};
use relay_core::rate::{AddrKey, RateTable};
use relay_store::{Clock as _, SystemClock};

/// Most client addresses whose public-route windows are tracked at once.
const PUBLIC_RATE_CAP: usize = 100_000;
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
/// Default of `--max-connections`.
const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of `--max-connections-per-address`: a sixteenth of the default connection cap.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = DEFAULT_MAX_CONNECTIONS / 16;
/// Default of `--public-per-minute`.
const DEFAULT_PUBLIC_PER_MINUTE: u32 = 600;
/// Default of `--header-timeout`, as the flag's text ([`secs`] gives its value).
const DEFAULT_HEADER_TIMEOUT: &str = "20s";
/// Default of `--body-timeout`.
const DEFAULT_BODY_TIMEOUT: &str = "60s";
/// Default of `--idle-timeout`.
const DEFAULT_IDLE_TIMEOUT: &str = "10s";
/// Default of `--body-first-byte-timeout`.
const DEFAULT_FIRST_BYTE_TIMEOUT: &str = "5s";
/// Default of `--auth-failures-per-minute`.
const DEFAULT_AUTH_FAILURES_PER_MINUTE: u32 = 30;
/// Default of `--body-min-rate` (bytes per second): far under what `--body-timeout` already
/// asks of a full body (8 MiB in 60 s), so it cuts stalls, not slow honest links.
const DEFAULT_BODY_MIN_RATE: u64 = 4096;
/// Default of `--body-budget-wait`.
const DEFAULT_BODY_BUDGET_WAIT: &str = "5s";

/// The value of a default duration text `<n>s`, so the flag's default and
/// [`GuardConfig::default`] come from one literal (see [`default_duration`]).
const fn secs(text: &str) -> Duration {
    default_duration(text)
}
/// hyper's read buffer per connection (hyper's default is about 408 KiB): the request-header
/// cap plus room for the request line and header framing, so an unterminated head costs at most
/// this before hyper answers `431` and closes. Bodies stream through it in pieces of this size.
const READ_BUFFER_MAX: usize = super::handler::MAX_HEADER_BYTES + 4 * 1024;

/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The guard's limits (flags of `mbx-relay serve`, see [`GuardArgs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardConfig {
    pub max_connections: usize,
    pub(crate) header_timeout: Duration,
    pub(crate) body_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) public_per_minute: u32,
    pub(crate) max_connections_per_address: usize,
    /// Request bodies (see [`BodyGuardArgs`]).
    pub body: BodyGuardConfig,
}

/// The limits on request bodies and failed authentications, per client address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BodyGuardConfig {
    pub first_byte_timeout: Duration,
    /// Bytes per second a body must average after its first byte (with the first-byte timeout
    /// as slack).
    pub min_rate: u64,
    pub bytes_per_address: u64,
    pub bytes_per_key: u64,
    /// Longest wait for room in the shared body budget.
    pub budget_wait: Duration,
    pub auth_failures_per_minute: u32,
}

impl Default for BodyGuardConfig {
    /// The flags' defaults.
    fn default() -> Self {
        BodyGuardConfig {
            first_byte_timeout: const { secs(DEFAULT_FIRST_BYTE_TIMEOUT) },
            min_rate: DEFAULT_BODY_MIN_RATE,
            bytes_per_address: super::body::DEFAULT_BODY_BYTES_PER_ADDRESS,
            bytes_per_key: super::body::DEFAULT_BODY_BYTES_PER_KEY,
            budget_wait: const { secs(DEFAULT_BODY_BUDGET_WAIT) },
            auth_failures_per_minute: DEFAULT_AUTH_FAILURES_PER_MINUTE,
        }
    }
}

impl Default for GuardConfig {
    /// The flags' defaults.
    fn default() -> Self {
        GuardConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: const { secs(DEFAULT_HEADER_TIMEOUT) },
            body_timeout: const { secs(DEFAULT_BODY_TIMEOUT) },
            idle_timeout: const { secs(DEFAULT_IDLE_TIMEOUT) },
            public_per_minute: DEFAULT_PUBLIC_PER_MINUTE,
            max_connections_per_address: DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
            body: BodyGuardConfig::default(),
        }
    }
}

/// Flags for the guard (flattened into `mbx-relay serve`'s flags).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connections")]
pub struct GuardArgs {
    /// Most connections served at once; one more is answered 503 and closed.
    #[arg(long, env = "MBX_RELAY_MAX_CONNECTIONS", default_value_t = DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Time allowed for a request head, from when the relay waits for it.
    #[arg(long, env = "MBX_RELAY_HEADER_TIMEOUT", default_value = DEFAULT_HEADER_TIMEOUT, value_parser = parse_duration)]
    pub(crate) header_timeout: Duration,
    /// Time allowed for a request body after its head, and for a client to read a response.
    #[arg(long, env = "MBX_RELAY_BODY_TIMEOUT", default_value = DEFAULT_BODY_TIMEOUT, value_parser = parse_duration)]
    pub(crate) body_timeout: Duration,
    /// A connection silent this long while the relay waits for its next request is closed.
    #[arg(long, env = "MBX_RELAY_IDLE_TIMEOUT", default_value = DEFAULT_IDLE_TIMEOUT, value_parser = parse_duration)]
    pub(crate) idle_timeout: Duration,
    /// Requests per client address (IPv6: per /64 prefix) per minute to info, health, metrics and
    /// unknown paths.
    #[arg(long, env = "MBX_RELAY_PUBLIC_PER_MINUTE", default_value_t = DEFAULT_PUBLIC_PER_MINUTE)]
    pub(crate) public_per_minute: u32,
    /// Most connections open at once from one client address (IPv6: per /64); one more is
    /// answered 429 and closed. Counts the socket address: behind a reverse proxy, the proxy.
    #[arg(long, env = "MBX_RELAY_MAX_CONNECTIONS_PER_ADDRESS", default_value_t = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS)]
    pub(crate) max_connections_per_address: usize,
    #[command(flatten)]
    pub body: BodyGuardArgs,
}

/// Flags for request bodies and failed authentications (part of [`GuardArgs`]).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Request bodies")]
pub struct BodyGuardArgs {
    /// Time allowed for the first byte of a request body, from when the relay starts reading it.
    #[arg(long, env = "MBX_RELAY_BODY_FIRST_BYTE_TIMEOUT", default_value = DEFAULT_FIRST_BYTE_TIMEOUT, value_parser = parse_duration)]
    pub body_first_byte_timeout: Duration,
    /// Bytes per second a request body must average after its first byte (a pause of up to
    /// --body-first-byte-timeout allowed); a slower body is cut off with 400.
    #[arg(long, env = "MBX_RELAY_BODY_MIN_RATE", default_value_t = DEFAULT_BODY_MIN_RATE, value_parser = relay_core::config::parse_bytes)]
    pub body_min_rate: u64,
    /// Request-body bytes held at once for one client address (IPv6: per /64); a body that needs
    /// more is answered 429. At least 8388608 (one full-size body).
    #[arg(long, env = "MBX_RELAY_MAX_BODY_BYTES_PER_ADDRESS", default_value_t = super::body::DEFAULT_BODY_BYTES_PER_ADDRESS, value_parser = relay_core::config::parse_bytes)]
    pub max_body_bytes_per_address: u64,
    /// Request-body bytes held at once for one hop key (whatever the addresses); a body that
    /// needs more is answered 429. At least 8388608 (one full-size body).
    #[arg(long, env = "MBX_RELAY_MAX_BODY_BYTES_PER_KEY", default_value_t = super::body::DEFAULT_BODY_BYTES_PER_KEY, value_parser = relay_core::config::parse_bytes)]
    pub max_body_bytes_per_key: u64,
    /// Longest a request body waits for room in the shared 256 MiB body budget; then 503.
    #[arg(long, env = "MBX_RELAY_BODY_BUDGET_WAIT", default_value = DEFAULT_BODY_BUDGET_WAIT, value_parser = parse_duration)]
    pub body_budget_wait: Duration,
    /// Failed hop authentications per client address (IPv6: per /64) per minute; past it, calls
    /// with a hop from that address are answered 429 without being checked.
    #[arg(long, env = "MBX_RELAY_AUTH_FAILURES_PER_MINUTE", default_value_t = DEFAULT_AUTH_FAILURES_PER_MINUTE)]
    pub(crate) auth_failures_per_minute: u32,
}

impl GuardArgs {
    /// The guard configuration.
    pub fn config(&self) -> GuardConfig {
        GuardConfig {
            max_connections: self.max_connections,
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
            idle_timeout: self.idle_timeout,
            public_per_minute: self.public_per_minute,
            max_connections_per_address: self.max_connections_per_address,
            body: BodyGuardConfig {
                first_byte_timeout: self.body.body_first_byte_timeout,
                min_rate: self.body.body_min_rate,
                bytes_per_address: self.body.max_body_bytes_per_address,
                bytes_per_key: self.body.max_body_bytes_per_key,
                budget_wait: self.body.body_budget_wait,
                auth_failures_per_minute: self.body.auth_failures_per_minute,
            },
        }
    }
}

impl GuardConfig {
    /// Refuse settings that would disable a protection.
    ///
    /// # Errors
    /// A message naming the flag.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_connections > u32::MAX as usize >> 3 {
            return Err("--max-connections must be between 1 and 536870911".into());
        }
        for (d, flag) in [
            (self.header_timeout, "--header-timeout"),
            (self.body_timeout, "--body-timeout"),
            (self.idle_timeout, "--idle-timeout"),
            (self.body.first_byte_timeout, "--body-first-byte-timeout"),
            (self.body.budget_wait, "--body-budget-wait"),
        ] {
            if d.is_zero() {
                return Err(format!("{flag} must be more than 0"));
            }
        }
        if self.public_per_minute == 0 {
            return Err("--public-per-minute must be at least 1".into());
        }
        if self.max_connections_per_address == 0 {
            return Err("--max-connections-per-address must be at least 1".into());
        }
        for (bytes, flag) in [
            (self.body.bytes_per_address, "--max-body-bytes-per-address"),
            (self.body.bytes_per_key, "--max-body-bytes-per-key"),
        ] {
            if bytes < super::body::MAX_BODY as u64 {
                return Err(format!(
                    "{flag} must be at least {} (one full-size body)",
                    super::body::MAX_BODY
                ));
            }
        }
        if self.body.min_rate == 0 {
            return Err("--body-min-rate must be at least 1".into());
        }
        if self.body.auth_failures_per_minute == 0 {
            return Err("--auth-failures-per-minute must be at least 1".into());
        }
        Ok(())
    }
}

/// What answers the requests a listener's guard lets through, called straight from hyper's
/// service (no router in between: the route table is [`super::route`]).
pub(crate) enum Service {
    /// The public listener: [`super::handler::handle`].
    Relay(Arc<super::App>),
    /// The private listener (`--metrics-listen`): [`super::private::answer`].
    Private(Arc<super::App>),
}

/// State shared by every connection.
struct Shared {
    service: Service,
    trust: TrustProxy,
    config: GuardConfig,
    public_rate: RateTable<AddrKey>,
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

    fn public_window_hit(&self) {
        if let Some(m) = &self.metrics {
            m.refused(RequestRefusal::PublicWindow);
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
    service: Service,
    trust: TrustProxy,
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
        trust,
        public_rate: RateTable::new(config.public_per_minute, PUBLIC_RATE_CAP),
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
            let mut resp = Box::pin(handle(&shared, peer, req)).await;
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

/// A request extension: the connection's count of responses being streamed. A handler that
/// streams a long response holds it ([`Streaming::hold`]) so the idle timeout leaves the
/// connection alone.
#[derive(Clone, Default)]
pub(crate) struct Streaming(Arc<AtomicUsize>);

/// Held while a response streams; dropping it lets the idle timeout apply again.
pub(crate) struct StreamingHeld(Arc<AtomicUsize>);

impl Streaming {
    /// Count one streamed response until the handle drops.
    pub fn hold(&self) -> StreamingHeld {
        self.0.fetch_add(1, Ordering::AcqRel);
        StreamingHeld(self.0.clone())
    }

    fn active(&self) -> bool {
        self.0.load(Ordering::Acquire) > 0
    }
}

impl Drop for StreamingHeld {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Marks an answer to a request whose signed hop failed, with the client address: the guard
/// counts it in the public window like an unsigned request (a valid signed call is not counted).
#[derive(Debug, Clone)]
pub(crate) struct HopRefused(pub String);

/// One request: the per-address window for unauthenticated routes, then the listener's
/// [`Service`] with a body with its deadlines; a request whose hop failed is counted after.
async fn handle(shared: &Shared, peer: SocketAddr, req: Request<Incoming>) -> Response<Body> {
    let route = Route::of(req.method(), req.uri().path());
    // Enrolment-class routes are counted per address by the relay itself; a signed info call
    // (hosts make one every sync pass) is counted only if its hop fails (below).
    let signed_info = route == Some(Route::Info) && req.headers().contains_key("x-mbx-sig");
    let counted = !signed_info && route.is_none_or(|r| r.public() && !r.enrolment_class());
    if counted {
        let addr = client_addr(shared.trust, peer, req.headers());
        if let Err(wait) = shared.public_rate.try_hit_addr(&addr, SystemClock.now_ms()) {
            shared.public_window_hit();
            return answer_unread(too_many_requests(wait), Body::new(req.into_body()));
        }
    }
    let deadline = Instant::now() + shared.config.body_timeout;
    let pace = Pace {
        first_byte: shared.config.body.first_byte_timeout,
        min_rate: shared.config.body.min_rate,
    };
    let req = req.map(|b| Body::new(TimedBody::new(b, deadline, pace)));
    let resp = match &shared.service {
        Service::Relay(app) => super::handler::handle(app, peer, req).await,
        Service::Private(app) => super::private::answer(app, req).await,
    };
    if let Some(HopRefused(addr)) = resp.extensions().get::<HopRefused>() {
        let hit = || shared.public_rate.try_hit_addr(addr, SystemClock.now_ms());
        if let Some(Err(wait)) = (!counted).then(hit) {
            // The refused hop's body may still be draining: its `connection: close` stays.
            shared.public_window_hit();
            let mut r = too_many_requests(wait);
            if let Some(close) = resp.headers().get(header::CONNECTION) {
                r.headers_mut().insert(header::CONNECTION, close.clone());
            }
            return r;
        }
    }
    resp
}

/// The public window's 429, `wait` being the time until the window frees (answered before the
/// handler, so it adds `cache-control` itself).
fn too_many_requests(wait: Duration) -> Response<Body> {
    let mut r = retry_later(
        StatusCode::TOO_MANY_REQUESTS,
        "too many requests from this address, retry later",
        wait,
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// A request body that fails once its deadline passes before it ends, when its first byte
/// has not come `first_byte` after it was first read, or when after that it falls behind
/// `min_rate` (nginx's `client_body_timeout` between reads, Apache's `MinRate`): by `t` after
/// its first byte it must have sent `(t - first_byte) * min_rate` bytes.
struct TimedBody {
    inner: Incoming,
    /// When the whole body must be in.
    deadline: Instant,
    /// Armed for the nearest of the deadlines.
    timer: Pin<Box<Sleep>>,
    pace: Pace,
    first_byte: FirstByte,
    /// Data bytes received so far.
    received: u64,
}

/// The pace a body must keep (see [`TimedBody`]).
#[derive(Clone, Copy)]
struct Pace {
    first_byte: Duration,
    min_rate: u64,
}

/// The first-byte deadline of a [`TimedBody`].
enum FirstByte {
    /// Not read yet: the wait starts at the first read (after the handler's own checks).
    Unread,
    /// Read, no byte yet: the deadline.
    Waiting(Instant),
    /// A byte came (or the body ended) at this instant.
    Arrived(Instant),
}

impl TimedBody {
    fn new(inner: Incoming, deadline: Instant, pace: Pace) -> Self {
        TimedBody {
            inner,
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            pace,
            first_byte: FirstByte::Unread,
            received: 0,
        }
    }

    /// The nearest deadline now.
    fn next_deadline(&self) -> Instant {
        let paced = match self.first_byte {
            FirstByte::Unread => return self.deadline,
            FirstByte::Waiting(first) => first,
            FirstByte::Arrived(at) => {
                let credit_ms = self.received.saturating_mul(1000) / self.pace.min_rate.max(1);
                at + self.pace.first_byte + Duration::from_millis(credit_ms)
            }
        };
        paced.min(self.deadline)
    }
}

/// Why a timed body failed.
#[derive(Debug)]
struct BodyTimedOut;

impl std::fmt::Display for BodyTimedOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("request body not received in time")
    }
}

impl std::error::Error for BodyTimedOut {}

impl HttpBody for TimedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let FirstByte::Unread = self.first_byte {
            self.first_byte = FirstByte::Waiting(Instant::now() + self.pace.first_byte);
        }
        if let Poll::Ready(f) = Pin::new(&mut self.inner).poll_frame(cx) {
            if let FirstByte::Waiting(_) = self.first_byte {
                self.first_byte = FirstByte::Arrived(Instant::now());
            }
            if let Some(Ok(frame)) = &f {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                self.received = self.received.saturating_add(n);
            }
            return Poll::Ready(f.map(|r| r.map_err(Into::into)));
        }
        let end = self.next_deadline();
        let this = &mut *self;
        if expired(&mut this.timer, end, cx) {
            return Poll::Ready(Some(Err(Box::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The socket with two deadlines: while the relay waits for the next request (after accept or
/// after writing), the client must send a byte within `idle`; a write that makes no progress
/// for `stall` fails.
struct GuardedIo {
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
    fn new(inner: TcpStream, idle: Duration, stall: Duration, streaming: Streaming) -> Self {
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
fn expired(timer: &mut Pin<Box<Sleep>>, deadline: Instant, cx: &mut Context<'_>) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_default_to_the_default_config() {
        use clap::{Args as _, FromArgMatches as _};
        // Without the environment, which would otherwise supply values.
        let cmd = GuardArgs::augment_args(clap::Command::new("t")).mut_args(|a| a.env(None));
        let m = cmd.try_get_matches_from(["t"]).unwrap();
        let args = GuardArgs::from_arg_matches(&m).unwrap();
        assert_eq!(args.config(), GuardConfig::default());
        assert_eq!(secs("20s"), Duration::from_secs(20));
    }

    #[test]
    fn settings_that_disable_a_protection_are_refused() {
        assert!(GuardConfig::default().validate().is_ok());
        let bad = [
            GuardConfig {
                max_connections: 0,
                ..GuardConfig::default()
            },
            GuardConfig {
                header_timeout: Duration::ZERO,
                ..GuardConfig::default()
            },
            GuardConfig {
                body_timeout: Duration::ZERO,
                ..GuardConfig::default()
            },
            GuardConfig {
                idle_timeout: Duration::ZERO,
                ..GuardConfig::default()
            },
            GuardConfig {
                public_per_minute: 0,
                ..GuardConfig::default()
            },
            GuardConfig {
                max_connections_per_address: 0,
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    first_byte_timeout: Duration::ZERO,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    bytes_per_address: 1024,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    auth_failures_per_minute: 0,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    min_rate: 0,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    bytes_per_key: 1024,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
            GuardConfig {
                body: BodyGuardConfig {
                    budget_wait: Duration::ZERO,
                    ..BodyGuardConfig::default()
                },
                ..GuardConfig::default()
            },
        ];
        for c in bad {
            let e = c.validate().unwrap_err();
            assert!(e.starts_with("--"), "names the flag: {e}");
        }
    }
}
