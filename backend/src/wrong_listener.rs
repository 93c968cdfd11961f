//! A request that reached the listener not speaking its protocol, answered so that the caller
//! can tell what is wrong, and logged so that the operator can.
//!
//! The usual cause is an Envoy cluster pointed at the wrong port: the sluice filter's default
//! protocol (`grpc_stream`, gRPC) sent to the HTTP decision listener, or its `protocol: http`
//! sent to the gRPC listener. Left alone, the first answered a plain 404 and the second a dropped
//! connection, the filter failed open, and nothing in either log said why. Now:
//!
//! - a gRPC request (`content-type: application/grpc*`, over HTTP/1.1 or HTTP/2) on the decision
//!   listener is answered as gRPC answers, trailers-only: HTTP 200, `grpc-status: 12`
//!   (UNIMPLEMENTED), a `grpc-message` naming the gRPC listener ([`refuse_grpc`]);
//! - a request that is not gRPC on the gRPC listener is answered `421 wrong_listener` with core's
//!   `ApiError` body naming the decision listener ([`refuse_http`]);
//!
//! and either way one WARN line at most every 10 s per listener (`wrong listener: ...`, with
//! the peer, the path, the listener to use and the count since the last line), and
//! `sluice_wrong_listener_total{listener}`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluice_core::wire::ErrorCode;

use crate::http::error::ApiFailure;
use crate::log_limit::{LogLimit, LOG_EVERY};
use crate::metrics::Metrics;

/// Where each listener of this process is, to name the right one in an answer; shared by both
/// listeners' checks.
pub struct WrongListener {
    decision: SocketAddr,
    grpc: Option<SocketAddr>,
    metrics: Arc<Metrics>,
    limit: LogLimit,
}

/// Whether a request is gRPC (`application/grpc`, `application/grpc+proto`, ...).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"))
}

impl WrongListener {
    /// The listeners of this process: the decision listener at `decision`, the gRPC listener at
    /// `grpc` (`None`: off).
    pub fn new(
        decision: SocketAddr,
        grpc: Option<SocketAddr>,
        metrics: Arc<Metrics>,
    ) -> Arc<WrongListener> {
        Arc::new(WrongListener {
            decision,
            grpc,
            metrics,
            limit: LogLimit::new(LOG_EVERY),
        })
    }

    /// Where gRPC is served, as a sentence's end.
    fn grpc_place(&self) -> String {
        match self.grpc {
            Some(addr) => format!("is served on the gRPC listener, {addr} (--grpc-listen)"),
            None => "is served on the gRPC listener, which is off on this backend (--grpc-listen off): start it with --grpc-listen ADDR, or use the filter's protocol: http".to_owned(),
        }
    }

    /// The `grpc-message` of a gRPC request on the decision listener.
    pub fn grpc_message(&self) -> String {
        format!(
            "sluice: this is the HTTP decision listener; gRPC (the filter's default grpc_stream protocol, and Envoy's RLS) {}",
            self.grpc_place()
        )
    }

    /// The `message` of an HTTP request on the gRPC listener.
    pub fn http_message(&self) -> String {
        format!(
            "sluice: this is the gRPC listener (the filter's grpc_stream protocol, and Envoy's RLS); for HTTP (the filter's protocol: http) use the decision listener {} (--decision-listen) or protocol grpc_stream",
            self.decision
        )
    }

    /// Counts one refused request on `listener` and logs it, rate-limited.
    fn record(&self, listener: &'static str, peer: Option<SocketAddr>, path: &str) {
        self.metrics.wrong_listener(listener);
        let Some(count) = self.limit.admit(listener) else {
            return;
        };
        let peer = peer.map_or_else(|| "an unknown peer".to_owned(), |p| p.to_string());
        let every = LOG_EVERY.as_secs();
        if listener == "decision" {
            tracing::warn!(
                peer = %peer, path, count,
                "wrong listener: a gRPC request from {peer} (POST {path}) reached the HTTP decision listener {}; gRPC {}; point the Envoy cluster there, or set the filter's protocol: http ({count} such requests since the last line; at most one line per {every} s)",
                self.decision,
                self.grpc_place(),
            );
        } else {
            let grpc = self
                .grpc
                .map_or_else(|| "(off)".to_owned(), |a| a.to_string());
            tracing::warn!(
                peer = %peer, path, count,
                "wrong listener: an HTTP request from {peer} ({path}) reached the gRPC listener {grpc}; HTTP decisions are served on the decision listener {} (--decision-listen): point the Envoy cluster there, or set the filter's protocol: grpc_stream ({count} such requests since the last line; at most one line per {every} s)",
                self.decision,
            );
        }
    }
}

/// The decision listener's first step: a gRPC request gets `UNIMPLEMENTED` naming the gRPC
/// listener, instead of a 404 a gRPC client cannot read.
pub async fn refuse_grpc(
    State(wrong): State<Arc<WrongListener>>,
    request: Request,
    next: Next,
) -> Response {
    if !is_grpc(request.headers()) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    wrong.record("decision", peer, request.uri().path());
    // Trailers-only, as gRPC answers a call it refuses: status and message in the head
    // (tonic percent-encodes the message as the gRPC spec requires), no body.
    tonic::Status::unimplemented(wrong.grpc_message()).into_http::<axum::body::Body>()
}

/// The gRPC listener's first step: a request that is not gRPC (the filter's `protocol: http`,
/// curl) gets `421 wrong_listener` naming the decision listener, instead of a dropped
/// connection or an empty gRPC answer.
pub async fn refuse_http(
    State(wrong): State<Arc<WrongListener>>,
    request: Request,
    next: Next,
) -> Response {
    if is_grpc(request.headers()) {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|c| c.remote_addr());
    let what = format!("{} {}", request.method(), request.uri().path());
    wrong.record("grpc", peer, &what);
    ApiFailure::new(
        StatusCode::MISDIRECTED_REQUEST,
        ErrorCode::WrongListener,
        wrong.http_message(),
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(grpc: Option<u16>) -> Arc<WrongListener> {
        let decision = SocketAddr::from(([127, 0, 0, 1], 8081));
        let grpc = grpc.map(|port| SocketAddr::from(([127, 0, 0, 1], port)));
        WrongListener::new(decision, grpc, Arc::new(Metrics::new()))
    }

    #[test]
    fn the_messages_name_the_listener_to_use() {
        assert_eq!(
            at(Some(8082)).grpc_message(),
            "sluice: this is the HTTP decision listener; gRPC (the filter's default grpc_stream protocol, and Envoy's RLS) is served on the gRPC listener, 127.0.0.1:8082 (--grpc-listen)"
        );
        assert!(at(None)
            .grpc_message()
            .contains("off on this backend (--grpc-listen off)"));
        assert!(at(None).http_message().contains(
            "use the decision listener 127.0.0.1:8081 (--decision-listen) or protocol grpc_stream"
        ));
    }

    #[test]
    fn grpc_is_told_by_its_content_type() {
        let mut h = HeaderMap::new();
        assert!(!is_grpc(&h));
        for (ct, grpc) in [
            ("application/grpc", true),
            ("application/grpc+proto", true),
            ("application/json", false),
        ] {
            h.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(ct));
            assert_eq!(is_grpc(&h), grpc, "{ct}");
        }
    }
}
