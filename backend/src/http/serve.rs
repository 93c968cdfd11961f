//! The HTTP/1.1 serve loop of both listeners, with bounds on slow clients.
//!
//! `axum::serve` gives hyper no timer, so a client that sends half a request and then nothing
//! holds its connection, and a file descriptor, forever; enough of them exhaust `ulimit -n` and
//! then neither listener can accept (slowloris). Here every connection is bounded:
//!
//! - **Request head**: it must arrive in full within `header_read_timeout` of the server starting
//!   to wait for it (hyper's `header_read_timeout`; the deadline does not move when bytes trickle
//!   in). This also holds between requests on a keep-alive connection, so a keep-alive connection
//!   idle for that long is closed: idle connections are bounded too, at no extra cost.
//! - **Request body**: it must arrive in full within the same time after the head ([`DeadlineBody`];
//!   the timer is only armed if the body is not already there, so the common small body that
//!   arrives with its head costs one clock read).
//! - **Response writes**: a write that makes no progress for the same time (a client that stopped
//!   reading its answer, e.g. a large asset or an SSE stream) fails and the connection closes
//!   ([`StallGuard`]; the timer is only armed when the socket's send buffer is full). This also
//!   keeps a stalled reader from holding up graceful shutdown.
//! - **Accept errors** (`EMFILE` when descriptors run out): accepting pauses 100 ms and resumes,
//!   with one warning per second at most, instead of spinning or giving up on the listener.
//!
//! Keep-alive stays on (Envoy reuses its connections to the decision listener); `TCP_NODELAY`
//! is set so small responses are never held back by Nagle's algorithm. Graceful shutdown stops
//! accepting, lets in-flight requests finish and closes idle connections at once.
//!
//! **HTTP/2 with prior knowledge** (a connection opening with the HTTP/2 preface) is served too,
//! only so that a gRPC client sent to an HTTP listener (an Envoy cluster with HTTP/2 options
//! pointed at the decision listener) gets an answer it can read (see [`crate::wrong_listener`])
//! rather than a protocol error. Such a connection lives at most the read bound; HTTP/1.1 stays
//! the protocol of both listeners. Every request carries its peer (`ConnectInfo<SocketAddr>`).
//!
//! **TLS** (`--decision-tls-*`, `--admin-tls-*`, [`crate::tls`]): the handshake runs in the
//! connection's task, bounded like a request head, under the [`StallGuard`]; a refused one
//! (a plaintext client, mutual TLS without an accepted certificate) closes the connection before
//! any request is read. ALPN tells HTTP/2 from HTTP/1.1 instead of the preface.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Sleep;
use tower::ServiceExt;

use crate::log_limit::{LogLimit, LOG_EVERY};
use crate::tls::conn::MaybeTls;
use crate::tls::Transport;

/// Default bound on reading a request's head (and its body, and a keep-alive connection's idle
/// time), in milliseconds: the `--header-read-timeout-ms` default.
pub const DEFAULT_HEADER_READ_TIMEOUT_MS: u64 = 10_000;
/// [`DEFAULT_HEADER_READ_TIMEOUT_MS`] as a duration.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration =
    Duration::from_millis(DEFAULT_HEADER_READ_TIMEOUT_MS);

/// Pause after an accept error that is not about one connection (e.g. out of descriptors).
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The first bytes of every HTTP/2 connection (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long to wait before looking again at a connection that has sent part of the HTTP/2
/// preface and no more (a real client sends it in one segment; this only paces a trickler).
const PREFACE_PAUSE: Duration = Duration::from_millis(5);

/// Serves `router` on `listener` until `stop` turns true (or its sender is dropped), then shuts
/// down gracefully: no new connections, in-flight requests finish, idle connections close.
/// With `tls`, every connection is TLS (see the module's doc).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    transport: Transport,
    mut stop: watch::Receiver<bool>,
) -> io::Result<()> {
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .keep_alive(true);
    let mut h2 = http2::Builder::new(TokioExecutor::new());
    h2.timer(TokioTimer::new()).max_concurrent_streams(16);
    let service = router.map_request(move |req: Request<Incoming>| {
        req.map(|body| DeadlineBody::new(body, header_read_timeout))
    });
    let mut last_warning: Option<Instant> = None;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                if last_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(1)) {
                    last_warning = Some(Instant::now());
                    tracing::warn!(
                        error = %e,
                        addr = ?listener.local_addr().ok(),
                        "cannot accept connections (out of file descriptors? raise ulimit -n); retrying every 100 ms"
                    );
                }
                tokio::select! {
                    _ = stop.wait_for(|s| *s) => break,
                    _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                }
            }
        };
        // Best effort: a socket that refuses the option still serves.
        let _ = stream.set_nodelay(true);
        let service = service
            .clone()
            .map_request(move |mut req: Request<Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            });
        let service = TowerToHyperService::new(service);
        let (watcher, h1, h2, mut stop, tls) = (
            graceful.watcher(),
            builder.clone(),
            h2.clone(),
            stop.clone(),
            transport.clone(),
        );
        // Told apart (and the TLS handshake run) in the connection's own task, so a client that
        // sends nothing never holds up accepting; bounded like a request head, and dropped at
        // once when stopping.
        tokio::spawn(async move {
            let guarded = StallGuard::new(stream, header_read_timeout);
            let (io, is_h2) = match tls {
                Transport::Plain(plain) => {
                    let opened = tokio::select! {
                        opened = tokio::time::timeout(header_read_timeout, opening(&guarded.inner)) => opened,
                        _ = stop.wait_for(|s| *s) => return,
                    };
                    let Ok(Ok(opening)) = opened else { return };
                    match opening {
                        Opening::Tls => return plain.refuse(peer),
                        Opening::H2 => (MaybeTls::Plain(guarded), true),
                        Opening::Http1 => (MaybeTls::Plain(guarded), false),
                    }
                }
                Transport::Tls(tls) => {
                    let accepted = tokio::select! {
                        accepted = tls.accept(guarded, peer, header_read_timeout) => accepted,
                        _ = stop.wait_for(|s| *s) => return,
                    };
                    let Some(stream) = accepted else { return };
                    let is_h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                    (MaybeTls::Tls(Box::new(stream)), is_h2)
                }
            };
            let io = TokioIo::new(io);
            let served = if is_h2 {
                let connection = watcher.watch(h2.serve_connection(io, service));
                match tokio::time::timeout(header_read_timeout, connection).await {
                    Ok(served) => served,
                    Err(_) => Ok(()),
                }
            } else {
                watcher.watch(h1.serve_connection(io, service)).await
            };
            if let Err(e) = served {
                report_closed(&e, peer);
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// A client that read nothing of its response for the bound: its connection is closed, so the
/// response it was sent is cut off (a browser says `ERR_CONTENT_LENGTH_MISMATCH`, or
/// `ERR_INCOMPLETE_CHUNKED_ENCODING` for the event stream).
#[derive(Debug, thiserror::Error)]
#[error("the client read nothing of the response for {0} ms")]
pub struct StalledClient(pub u64);

/// Rate limit of the "cut off a response" warning (one line per 10 s, counting the rest).
static CUT_OFF: LazyLock<LogLimit> = LazyLock::new(|| LogLimit::new(LOG_EVERY));

/// Logs a connection that ended with an error. A response cut off because its client stopped
/// reading is a warning: the client sees a truncated body, and the log must say why (a page too
/// busy to read, e.g. one drawing a very large list, looks exactly like this). Anything else
/// (a client that went away) is routine and only a debug line.
fn report_closed(e: &hyper::Error, peer: SocketAddr) {
    if stalled(e).is_some() {
        if let Some(count) = CUT_OFF.admit("stalled client") {
            tracing::warn!(
                error = %e,
                %peer,
                count,
                "closed a connection whose client stopped reading: its response was cut off"
            );
        }
    } else {
        tracing::debug!(error = %e, "connection closed with an error");
    }
}

/// The stall bound that ended a connection, if that is what did.
fn stalled<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a StalledClient> {
    let mut cause = Some(e);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<io::Error>() {
            if let Some(stall) = io.get_ref().and_then(|r| r.downcast_ref::<StalledClient>()) {
                return Some(stall);
            }
        }
        cause = error.source();
    }
    None
}

/// How a plaintext connection opens.
enum Opening {
    /// Anything else, and a closed connection: HTTP/1.1's to answer.
    Http1,
    /// The HTTP/2 preface.
    H2,
    /// A TLS handshake: a TLS client on this plaintext listener ([`crate::tls::plain`]).
    Tls,
}

/// How the client opens (looked at, not read: the connection's server reads it again).
async fn opening(stream: &TcpStream) -> io::Result<Opening> {
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let n = stream.peek(&mut buf).await?;
        let seen = buf.get(..n).unwrap_or_default();
        if seen
            .first()
            .is_some_and(|first| crate::tls::plain::is_tls(*first))
        {
            return Ok(Opening::Tls);
        }
        if n == 0 || !H2_PREFACE.starts_with(seen) {
            return Ok(Opening::Http1);
        }
        if n == H2_PREFACE.len() {
            return Ok(Opening::H2);
        }
        tokio::time::sleep(PREFACE_PAUSE).await;
    }
}

/// Errors about one connection that went away before it was accepted: just accept the next.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A request body that must arrive in full within a bound after its head, so a client cannot
/// hold a connection by sending a `Content-Length` and then trickling (or never sending) bytes.
pub struct DeadlineBody {
    inner: Incoming,
    started: Instant,
    limit: Duration,
    /// Armed on the first poll that finds no data ready.
    timer: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    /// Wraps `inner`; the bound runs from now.
    pub fn new(inner: Incoming, limit: Duration) -> DeadlineBody {
        DeadlineBody {
            inner,
            started: Instant::now(),
            limit,
            timer: None,
        }
    }
}

/// The request body did not arrive within the bound.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0} ms")]
pub struct BodyTimeout(u64);

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(axum::BoxError::from)));
        }
        let deadline = tokio::time::Instant::from_std(this.started + this.limit);
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                let ms = u64::try_from(this.limit.as_millis()).unwrap_or(u64::MAX);
                Poll::Ready(Some(Err(Box::new(BodyTimeout(ms)))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection whose writes fail once they have made no progress for `stall`: a client that stops
/// reading cannot hold its connection (and a descriptor) forever. The timer is armed only when a
/// write finds the send buffer full, and disarmed by any progress.
pub struct StallGuard {
    inner: TcpStream,
    stall: Duration,
    timer: Option<Pin<Box<Sleep>>>,
}

impl StallGuard {
    /// Guards `inner` with the bound `stall`.
    pub fn new(inner: TcpStream, stall: Duration) -> StallGuard {
        StallGuard {
            inner,
            stall,
            timer: None,
        }
    }

    /// Maps one write-side poll: progress disarms the timer; no progress arms it, and fails the
    /// write once it fires.
    fn guard<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(result) => {
                self.timer = None;
                Poll::Ready(result)
            }
            Poll::Pending => {
                let stall = self.stall;
                let timer = self
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        self.timer = None;
                        let ms = u64::try_from(stall.as_millis()).unwrap_or(u64::MAX);
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            StalledClient(ms),
                        )))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl AsyncRead for StallGuard {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for StallGuard {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error that wraps another, as hyper's does the connection's I/O error.
    #[derive(Debug, thiserror::Error)]
    #[error("connection error")]
    struct Wrapper(#[source] io::Error);

    #[test]
    fn a_cut_off_response_is_told_apart_from_a_client_that_went_away() {
        let cut = Wrapper(io::Error::new(
            io::ErrorKind::TimedOut,
            StalledClient(10_000),
        ));
        assert_eq!(stalled(&cut).map(|s| s.0), Some(10_000));
        let gone = Wrapper(io::Error::from(io::ErrorKind::ConnectionReset));
        assert!(stalled(&gone).is_none());
        let other = Wrapper(io::Error::new(io::ErrorKind::TimedOut, "something else"));
        assert!(stalled(&other).is_none());
    }
}
