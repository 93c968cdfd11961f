//! The decision exchange (`sluice.v1.DecisionExchange`, see [`sluice_core::exchange`]): the
//! filter's cheaper callout. One long-lived gRPC stream per Envoy worker carries its decision
//! requests as messages, instead of a new upstream HTTP/1.1 stream per request.
//!
//! Every [`ExchangeRequest`] is answered by the decision listener's own router
//! ([`crate::http::decision_router`]) as `POST {path}` with its JSON body, so validation, 404s,
//! the 64 KiB body limit (413), store failures (503), metrics and activity are exactly the HTTP
//! listener's; the reply carries the route's HTTP status and body.
//!
//! - `Stream`: exchanges run concurrently, at most [`MAX_IN_FLIGHT_PER_STREAM`] per stream (at
//!   the bound the inbound stream is not read until one finishes: HTTP/2 flow control pushes
//!   back on the client, memory stays bounded). Replies go out as they complete, in any order,
//!   each with its request's `id`. The stream lives until the client ends it (then it ends OK
//!   once every reply is out), the connection dies, or the server stops (it stops reading,
//!   finishes the exchanges in flight and ends with `UNAVAILABLE`, so graceful shutdown never
//!   waits on an open stream). A message that does not decode ends the stream with
//!   `INVALID_ARGUMENT` (after the replies to the exchanges already in flight); the server
//!   keeps serving other streams.
//! - `Call`: one exchange.
//!
//! No deadline is set on either method, nor on the stream as a whole (it is meant to live as
//! long as its Envoy worker): each exchange carries its caller's deadline in its JSON body
//! (`timeout_ms`, as over HTTP), and the decision handlers honour it ([`crate::deadline`]); a
//! request without one is bounded by the store's own deadline ([`App::store_call`]), exactly as
//! on the HTTP listener. A message's deadline counts from when it is read off the stream
//! ([`Arrival`], stamped here and read by the handlers), not from when its handler first runs.
//! A message is read and started in the same poll; messages past [`MAX_IN_FLIGHT_PER_STREAM`]
//! wait unread in HTTP/2 flow control, where no stamp can reach them: that wait is not counted,
//! and the caller's own timer covers it (the filter gives up at its deadline either way).

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::body::Body as AxumBody;
use axum::http::{header, HeaderValue, Method, Request as HttpRequest, StatusCode, Uri};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::Router;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use prost::Message;
use sluice_core::exchange::{ExchangeReply, ExchangeRequest, CALL_PATH, SERVICE, STREAM_PATH};
use sluice_core::wire::ErrorCode;
use tokio::sync::watch;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{http, Body, Bytes, StdError};
use tonic::server::{Grpc, NamedService, StreamingService, UnaryService};
use tonic::{Request, Response, Status, Streaming};
use tower::ServiceExt;

use crate::deadline::Arrival;
use crate::http::error::ApiFailure;
use crate::metrics::Metrics;
use crate::state::App;

/// Most exchanges in flight on one stream; past it the stream's next messages wait unread.
/// A Redis decision is one round trip, so this many in flight lets one Envoy worker's stream
/// carry this many decisions per round trip.
pub const MAX_IN_FLIGHT_PER_STREAM: usize = 1024;

/// Largest reply body collected from the router. The decision API's answers are far smaller
/// (a `/v1/throttle/all` answer for the most checks is a few KiB); a larger one is answered 500
/// `internal` rather than buffered without bound.
pub const MAX_REPLY_BODY_BYTES: usize = crate::http::input::MAX_BODY_BYTES;

/// Largest request message decoded (tonic answers `OUT_OF_RANGE` beyond, which ends a stream):
/// the gRPC listener's one limit, well above the decision API's 64 KiB body so that a larger
/// body still reaches the router and gets its 413.
pub const MAX_MESSAGE_BYTES: usize = sluice_core::limits::MAX_RLS_MESSAGE_BYTES;

/// The protobuf codec of the exchange: encodes `E`, decodes `D`. The server is
/// `ExchangeCodec<ExchangeReply, ExchangeRequest>`, a client the reverse. A message that does
/// not decode is `INVALID_ARGUMENT` (the sender's fault), not tonic-prost's `INTERNAL`.
pub struct ExchangeCodec<E, D>(PhantomData<fn(E) -> D>);

impl<E, D> Default for ExchangeCodec<E, D> {
    fn default() -> Self {
        ExchangeCodec(PhantomData)
    }
}

impl<E, D> Clone for ExchangeCodec<E, D> {
    fn clone(&self) -> Self {
        ExchangeCodec::default()
    }
}

impl<E, D> Codec for ExchangeCodec<E, D>
where
    E: Message + Send + 'static,
    D: Message + Default + Send + 'static,
{
    type Encode = E;
    type Decode = D;
    type Encoder = MessageEncoder<E>;
    type Decoder = MessageDecoder<D>;

    fn encoder(&mut self) -> Self::Encoder {
        MessageEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        MessageDecoder(PhantomData)
    }
}

/// Encodes one protobuf message ([`ExchangeCodec`]).
pub struct MessageEncoder<E>(PhantomData<fn(E)>);

impl<E: Message> Encoder for MessageEncoder<E> {
    type Item = E;
    type Error = Status;

    fn encode(&mut self, item: E, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding a message: {e}")))
    }
}

/// Decodes one protobuf message ([`ExchangeCodec`]); a malformed one is `INVALID_ARGUMENT`.
pub struct MessageDecoder<D>(PhantomData<fn() -> D>);

impl<D: Message + Default> Decoder for MessageDecoder<D> {
    type Item = D;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<D>, Status> {
        D::decode(src)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("malformed message: {e}")))
    }
}

/// The `sluice.v1.DecisionExchange` gRPC service over an [`App`], written as tonic-build's
/// generated servers are (there is no `.proto` build step).
#[derive(Clone)]
pub struct DecisionExchange {
    inner: Arc<Inner>,
}

struct Inner {
    /// The decision listener's router, built once; each exchange runs on a clone.
    router: Router,
    metrics: Arc<Metrics>,
    stopping: watch::Receiver<bool>,
}

impl DecisionExchange {
    /// The service for `app`: its decision router, metrics and shutdown signal.
    pub fn new(app: Arc<App>) -> DecisionExchange {
        DecisionExchange {
            inner: Arc::new(Inner {
                router: crate::http::decision_router(app.clone()),
                metrics: app.metrics.clone(),
                stopping: app.stopping.clone(),
            }),
        }
    }
}

impl NamedService for DecisionExchange {
    const NAME: &'static str = SERVICE;
}

fn grpc() -> Grpc<ExchangeCodec<ExchangeReply, ExchangeRequest>> {
    Grpc::new(ExchangeCodec::default()).max_decoding_message_size(MAX_MESSAGE_BYTES)
}

impl<B> tower::Service<http::Request<B>> for DecisionExchange
where
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let inner = self.inner.clone();
        match request.uri().path() {
            STREAM_PATH => {
                Box::pin(async move { Ok(grpc().streaming(StreamMethod(inner), request).await) })
            }
            CALL_PATH => {
                Box::pin(async move { Ok(grpc().unary(CallMethod(inner), request).await) })
            }
            _ => Box::pin(async move { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}

/// `rpc Call(ExchangeRequest) returns (ExchangeReply)`.
struct CallMethod(Arc<Inner>);

impl UnaryService<ExchangeRequest> for CallMethod {
    type Response = ExchangeReply;
    type Future = BoxFuture<'static, Result<Response<ExchangeReply>, Status>>;

    fn call(&mut self, request: Request<ExchangeRequest>) -> Self::Future {
        let router = self.0.router.clone();
        let arrived = Instant::now();
        Box::pin(async move {
            Ok(Response::new(
                exchange(router, request.into_inner(), arrived).await,
            ))
        })
    }
}

/// `rpc Stream(stream ExchangeRequest) returns (stream ExchangeReply)`.
struct StreamMethod(Arc<Inner>);

impl StreamingService<ExchangeRequest> for StreamMethod {
    type Response = ExchangeReply;
    type ResponseStream = Exchanges;
    type Future = BoxFuture<'static, Result<Response<Exchanges>, Status>>;

    fn call(&mut self, request: Request<Streaming<ExchangeRequest>>) -> Self::Future {
        let exchanges = Exchanges::new(self.0.clone(), request.into_inner());
        Box::pin(async move { Ok(Response::new(exchanges)) })
    }
}

/// Why a stream stopped reading its inbound messages.
enum Ending {
    /// The client ended its side: end OK once every reply is out.
    ClientDone,
    /// A message failed (did not decode, too large, the connection broke): end with it.
    Failed(Status),
    /// The server is stopping: end `UNAVAILABLE` so the client reconnects (elsewhere).
    Stopping,
}

/// One stream's replies: reads requests while fewer than [`MAX_IN_FLIGHT_PER_STREAM`] are in
/// flight, runs them concurrently on the stream's own task, and yields replies as they complete.
/// Dropped (client gone, connection closed), it cancels its exchanges in flight.
pub struct Exchanges {
    inner: Arc<Inner>,
    inbound: Streaming<ExchangeRequest>,
    in_flight: FuturesUnordered<BoxFuture<'static, ExchangeReply>>,
    /// Set once the inbound side is no longer read.
    ending: Option<Ending>,
    /// Resolves when the server starts stopping.
    stop: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// Set once the final item (or the end) has been yielded.
    ended: bool,
}

impl Exchanges {
    fn new(inner: Arc<Inner>, inbound: Streaming<ExchangeRequest>) -> Exchanges {
        let mut stopping = inner.stopping.clone();
        inner.metrics.exchange_stream_opened();
        Exchanges {
            inner,
            inbound,
            in_flight: FuturesUnordered::new(),
            ending: None,
            // A dropped sender means the app is gone: stopping too.
            stop: Box::pin(async move {
                let _ = stopping.wait_for(|s| *s).await;
            }),
            ended: false,
        }
    }
}

impl Drop for Exchanges {
    fn drop(&mut self) {
        self.inner.metrics.exchange_stream_closed();
    }
}

impl Stream for Exchanges {
    type Item = Result<ExchangeReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.ended {
            return Poll::Ready(None);
        }
        if this.ending.is_none() && this.stop.as_mut().poll(cx).is_ready() {
            this.ending = Some(Ending::Stopping);
        }
        while this.ending.is_none() && this.in_flight.len() < MAX_IN_FLIGHT_PER_STREAM {
            match this.inbound.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(request))) => {
                    let router = this.inner.router.clone();
                    let arrived = Instant::now();
                    this.in_flight
                        .push(Box::pin(exchange(router, request, arrived)));
                }
                Poll::Ready(Some(Err(status))) => this.ending = Some(Ending::Failed(status)),
                Poll::Ready(None) => this.ending = Some(Ending::ClientDone),
                Poll::Pending => break,
            }
        }
        if let Poll::Ready(Some(reply)) = this.in_flight.poll_next_unpin(cx) {
            return Poll::Ready(Some(Ok(reply)));
        }
        if !this.in_flight.is_empty() {
            return Poll::Pending;
        }
        match this.ending.take() {
            None => Poll::Pending,
            Some(ending) => {
                this.ended = true;
                match ending {
                    Ending::ClientDone => Poll::Ready(None),
                    Ending::Failed(status) => Poll::Ready(Some(Err(status))),
                    Ending::Stopping => Poll::Ready(Some(Err(Status::unavailable(
                        "sluice is stopping; open a new stream (to another replica)",
                    )))),
                }
            }
        }
    }
}

/// Answers one exchange through the decision router: its status and body, with its `id`.
/// `arrived`: when the message was read, where its caller's deadline starts.
async fn exchange(router: Router, request: ExchangeRequest, arrived: Instant) -> ExchangeReply {
    let id = request.id;
    let response = match http_request(request, arrived) {
        Ok(request) => match router.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        },
        Err(failure) => failure.into_response(),
    };
    let (status, body) = collect(response).await;
    ExchangeReply {
        id,
        status: u32::from(status.as_u16()),
        body,
    }
}

/// `POST {path}` with the JSON body, as the filter's HTTP callout sends it. A path that is not
/// an absolute URI path is a 400 naming `path`. Carries `arrived` as an [`Arrival`].
fn http_request(
    request: ExchangeRequest,
    arrived: Instant,
) -> Result<HttpRequest<AxumBody>, ApiFailure> {
    let bad_path = || ApiFailure::invalid("path", "must be an absolute path like /v1/throttle");
    if !request.path.starts_with('/') {
        return Err(bad_path());
    }
    let uri: Uri = request.path.parse().map_err(|_| bad_path())?;
    let mut http = HttpRequest::new(AxumBody::from(request.body));
    *http.method_mut() = Method::POST;
    *http.uri_mut() = uri;
    http.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    http.extensions_mut().insert(Arrival(arrived));
    Ok(http)
}

/// The response's status and body bytes, at most [`MAX_REPLY_BODY_BYTES`] of them.
async fn collect(response: HttpResponse) -> (StatusCode, Vec<u8>) {
    let status = response.status();
    match axum::body::to_bytes(response.into_body(), MAX_REPLY_BODY_BYTES).await {
        Ok(body) => (status, Vec::from(body)),
        Err(e) => {
            let failure = ApiFailure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                format!("the decision API's answer could not be relayed (at most {MAX_REPLY_BODY_BYTES} bytes): {e}"),
            );
            let body = serde_json::to_vec(&failure.body).unwrap_or_default();
            (failure.status, body)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_oversized_answer_is_a_500_in_the_api_error_shape() {
        let big = vec![b'x'; MAX_REPLY_BODY_BYTES + 1];
        let (status, body) = collect(HttpResponse::new(AxumBody::from(big))).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"], "internal", "{body}");

        let fits = vec![b'x'; MAX_REPLY_BODY_BYTES];
        let (status, body) = collect(HttpResponse::new(AxumBody::from(fits))).await;
        assert_eq!((status, body.len()), (StatusCode::OK, MAX_REPLY_BODY_BYTES));
    }

    #[test]
    fn paths_must_be_absolute() {
        for path in ["v1/throttle", "", "/v1/thr ottle", "http://x/v1/throttle"] {
            let failure = http_request(
                ExchangeRequest {
                    id: 1,
                    path: path.into(),
                    body: vec![],
                },
                Instant::now(),
            )
            .unwrap_err();
            assert_eq!(failure.status, StatusCode::BAD_REQUEST, "{path:?}");
            assert_eq!(failure.body.field.as_deref(), Some("path"));
        }
        let ok = http_request(
            ExchangeRequest {
                id: 1,
                path: "/v1/throttle".into(),
                body: b"{}".to_vec(),
            },
            Instant::now(),
        )
        .unwrap();
        assert_eq!(ok.method(), Method::POST);
        assert_eq!(ok.uri().path(), "/v1/throttle");
        assert_eq!(ok.headers()[header::CONTENT_TYPE], "application/json");

        // The caller's deadline counts from when the message was read, not when it runs.
        let read = Instant::now();
        let stamped = http_request(
            ExchangeRequest {
                id: 2,
                path: "/v1/throttle".into(),
                body: b"{}".to_vec(),
            },
            read,
        )
        .unwrap();
        assert_eq!(stamped.extensions().get::<Arrival>(), Some(&Arrival(read)));
    }
}
