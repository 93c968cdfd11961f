//! The gRPC listener (`--grpc-listen`, default `127.0.0.1:8082`): sluice's front door for Envoy.
//! One HTTP/2 cleartext listener, as Envoy's gRPC clusters speak, served by the same [`App`] as
//! the HTTP listeners, carries both ways Envoy asks for decisions:
//!
//! - [`exchange`]: `sluice.v1.DecisionExchange`, the sluice filter's default transport
//!   (`grpc_stream`): the decision API's requests as messages on one long-lived stream per Envoy
//!   worker, each answered by the decision router, so it answers exactly as `POST /v1/throttle`.
//!   Most decisions take this path.
//! - [`rls`]: Envoy's rate limit service (RLS v3, `envoy.service.ratelimit.v3.RateLimitService`),
//!   for Envoy's native `envoy.filters.http.ratelimit` filter and anything else speaking RLS.
//! - [`rlqs`]: Envoy's rate limit quota service (RLQS v3), for Envoy's built-in
//!   `envoy.filters.http.rate_limit_quota` filter: token-bucket shares Envoy enforces itself.
//!
//! docs/exchange.md, docs/rls.md and docs/rlqs.md are the user's pages.

pub mod exchange;
pub mod rlqs;
pub mod rls;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use futures::Stream;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tonic::service::Routes;

use crate::state::App;
use crate::tls::conn::MaybeTls;
use crate::tls::Transport;
use crate::wrong_listener::WrongListener;

pub use rls::Rls;

/// Largest request message sluice decodes (tonic answers `OUT_OF_RANGE` beyond).
pub use sluice_core::limits::MAX_RLS_MESSAGE_BYTES as MAX_MESSAGE_BYTES;

/// Longest the server waits, once stopping, for open gRPC connections to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// How long a client has to finish its TLS handshake on the gRPC listener (or, on a plaintext
/// one, to send its first byte).
pub const TLS_HANDSHAKE_BOUND: Duration = Duration::from_secs(10);

/// Accepts the next connection; accept errors (a client gone, out of file descriptors) are
/// logged and retried, never the end of the listener.
async fn accept(listener: &TcpListener) -> (TcpStream, std::net::SocketAddr) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return (stream, peer);
            }
            Err(e) => {
                tracing::debug!(error = %e, "grpc listener: accept failed; retrying");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            }
        }
    }
}

/// Accepted connections, each looked at in its own task (so a slow client never holds up
/// accepting) before the server gets it: on a plaintext listener, a TLS client (its first byte)
/// is refused, logged and counted; on a TLS listener, the handshake must succeed within
/// [`TLS_HANDSHAKE_BOUND`] (a refused one is logged and counted by the listener's
/// [`crate::tls::TlsListener`]) and with a client CA only accepted clients get past it.
fn incoming(
    listener: TcpListener,
    transport: Transport,
    mut stop: watch::Receiver<bool>,
) -> impl Stream<Item = Result<MaybeTls<TcpStream>, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                _ = stop.wait_for(|s| *s) => return,
                _ = tx.closed() => return,
                accepted = accept(&listener) => accepted,
            };
            let (transport, tx) = (transport.clone(), tx.clone());
            tokio::spawn(async move {
                let conn = match transport {
                    Transport::Plain(plain) => {
                        let mut first = [0u8; 1];
                        let peeked =
                            tokio::time::timeout(TLS_HANDSHAKE_BOUND, stream.peek(&mut first));
                        match peeked.await {
                            Ok(Ok(1)) if crate::tls::plain::is_tls(first[0]) => {
                                return plain.refuse(peer)
                            }
                            Ok(Ok(1)) => MaybeTls::Plain(stream),
                            _ => return,
                        }
                    }
                    Transport::Tls(tls) => {
                        match tls.accept(stream, peer, TLS_HANDSHAKE_BOUND).await {
                            Some(stream) => MaybeTls::Tls(Box::new(stream)),
                            None => return,
                        }
                    }
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

impl tonic::transport::server::Connected for MaybeTls<TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.socket().connect_info()
    }
}

/// Serves the gRPC listener (the decision exchange, the rate limit service and the rate limit
/// quota service) on `listener` until `stop` turns true, then shuts down
/// gracefully: no new connections, in-flight calls finish (bounded by [`SHUTDOWN_GRACE`]).
///
/// HTTP/1.1 is accepted too, only so that a request that is not gRPC (the filter's
/// `protocol: http` pointed here) is answered `421 wrong_listener` naming the decision listener
/// ([`crate::wrong_listener::refuse_http`]) rather than dropped as a protocol error.
///
/// With `tls` (`--grpc-tls-*`), every connection is TLS, and with a client CA only clients with
/// an accepted certificate get past the handshake: nothing of another client is read as a call.
pub async fn serve(
    listener: TcpListener,
    app: Arc<App>,
    wrong: Arc<WrongListener>,
    transport: Transport,
    rlqs_metrics: crate::rlqs::metrics::RlqsMetrics,
    rlqs_settings: crate::rlqs::Settings,
    mut stop: watch::Receiver<bool>,
) -> Result<(), tonic::transport::Error> {
    let exchange = exchange::DecisionExchange::new(app.clone());
    let ledger = crate::rlqs::spawn(
        app.clone(),
        rlqs_metrics.clone(),
        rlqs_settings,
        stop.clone(),
    );
    let _ = app.rlqs.set(ledger.reader());
    let quota = rlqs::Rlqs::new(ledger, rlqs_metrics.clone(), stop.clone());
    let service =
        RateLimitServiceServer::new(Rls::new(app)).max_decoding_message_size(MAX_MESSAGE_BYTES);
    let routes = Routes::new(service)
        .add_service(exchange)
        .add_service(quota);
    let routes = Routes::from(routes.into_axum_router().layer(
        axum::middleware::from_fn_with_state(wrong, crate::wrong_listener::refuse_http),
    ));
    let mut stop_grace = stop.clone();
    let connections = incoming(listener, transport, stop.clone());
    // No server-wide `timeout`: tonic's bounds a call only until its response head, so it would
    // bound a unary call but nothing inside an exchange stream, and a long-lived stream is not a
    // call to put one deadline on. Each unit of work bounds itself instead: a RateLimitService
    // call by [`Rls::call_deadline`], every exchange (in a stream or a `Call`) by the store
    // deadline its handler's store step runs under (see [`exchange`]).
    let server = tonic::transport::Server::builder()
        // A peer that vanished without closing (a crashed Envoy, a dropped route) is noticed
        // and its connection closed, rather than held forever.
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .accept_http1(true)
        .add_routes(routes)
        .serve_with_incoming_shutdown(connections, async move {
            let _ = stop.wait_for(|s| *s).await;
        });
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => r,
        _ = async {
            let _ = stop_grace.wait_for(|s| *s).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        } => {
            tracing::warn!("grpc listener: connections still open {SHUTDOWN_GRACE:?} after shutdown; closing them");
            Ok(())
        }
    }
}
