//! `StreamRateLimitQuotas`: one task per stream. The domain is bound by the stream's first
//! message (Envoy sends the same one in every report); a message with another ends the stream
//! `INVALID_ARGUMENT`. Reports go to the ledger task ([`crate::rlqs::task`]), whose assignments
//! (answers to reports, and pushes on its tick) are written back on the stream. The stream ends
//! `UNAVAILABLE` when the server stops, so graceful shutdown never waits on it.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::RateLimitQuotaResponse;
use futures::future::BoxFuture;
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tonic::codegen::{http, Body, Bytes, StdError};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::lenient::{Checked, LenientReports};
use super::response::response;
use crate::grpc::exchange::ExchangeCodec;
use crate::rlqs::metrics::RlqsMetrics;
use crate::rlqs::Handle;
use sluice_core::limits::MAX_RLS_MESSAGE_BYTES as MAX_MESSAGE_BYTES;

/// The gRPC service name Envoy's quota filter calls.
pub const SERVICE: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// Its one method.
pub const STREAM_PATH: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";

/// Most responses waiting to be written on one stream.
const OUT_BOUND: usize = 16;

/// The RLQS service over the ledger task, written as tonic-build's generated servers are, but
/// reading reports with [`LenientReports`]: envoy-types' generated server would end a stream
/// on the first bucket id that is not UTF-8 (a client's header bytes), taking every bucket of
/// that Envoy with it.
#[derive(Clone)]
pub struct Rlqs {
    ledger: Handle,
    metrics: RlqsMetrics,
    stopping: watch::Receiver<bool>,
}

impl Rlqs {
    /// The service; its streams end when `stopping` turns true.
    pub fn new(ledger: Handle, metrics: RlqsMetrics, stopping: watch::Receiver<bool>) -> Rlqs {
        Rlqs {
            ledger,
            metrics,
            stopping,
        }
    }
}

type Out = Result<RateLimitQuotaResponse, Status>;

impl NamedService for Rlqs {
    const NAME: &'static str = SERVICE;
}

impl<B> tower::Service<http::Request<B>> for Rlqs
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
        let service = self.clone();
        match request.uri().path() {
            STREAM_PATH => Box::pin(async move {
                let mut grpc =
                    Grpc::new(ExchangeCodec::<RateLimitQuotaResponse, LenientReports>::default())
                        .max_decoding_message_size(MAX_MESSAGE_BYTES);
                Ok(grpc.streaming(StreamMethod(service), request).await)
            }),
            _ => Box::pin(async move { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}

/// `rpc StreamRateLimitQuotas(stream RateLimitQuotaUsageReports) returns (stream RateLimitQuotaResponse)`.
struct StreamMethod(Rlqs);

impl StreamingService<LenientReports> for StreamMethod {
    type Response = RateLimitQuotaResponse;
    type ResponseStream = Pin<Box<dyn Stream<Item = Out> + Send + 'static>>;
    type Future = BoxFuture<'static, Result<Response<Self::ResponseStream>, Status>>;

    fn call(&mut self, request: Request<Streaming<LenientReports>>) -> Self::Future {
        let peer = request.remote_addr();
        let inbound = request.into_inner();
        let (out_tx, out_rx) = mpsc::channel::<Out>(OUT_BOUND);
        let service = self.0.clone();
        tokio::spawn(run(inbound, peer, out_tx, service));
        let out =
            futures::stream::unfold(
                out_rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let out: Self::ResponseStream = Box::pin(out);
        Box::pin(async move { Ok(Response::new(out)) })
    }
}

/// One stream's life: reports in, assignments out, until either side ends or the server stops.
async fn run(
    mut inbound: Streaming<LenientReports>,
    peer: Option<std::net::SocketAddr>,
    out: mpsc::Sender<Out>,
    service: Rlqs,
) {
    let Rlqs {
        ledger,
        metrics,
        stopping: mut stop,
    } = service;
    let (id, mut pushed) = ledger.open(peer).await;
    let mut domain: Option<String> = None;
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                let _ = out.send(Err(Status::unavailable("sluice is stopping"))).await;
                break;
            }
            _ = out.closed() => break,
            message = inbound.message() => match message {
                Ok(Some(lenient)) => {
                    let Checked { reports, not_utf8 } = lenient.checked();
                    metrics.not_utf8(not_utf8);
                    match &domain {
                        None if reports.domain.is_empty() => {
                            let _ = out.send(Err(Status::invalid_argument("the first report must name a domain"))).await;
                            break;
                        }
                        None => {
                            domain = Some(reports.domain.clone());
                            ledger.bind_domain(id, reports.domain.clone()).await;
                        }
                        Some(bound) if !reports.domain.is_empty() && *bound != reports.domain => {
                            let status = Status::invalid_argument(format!(
                                "this stream is bound to domain {bound:?}; got {:?}",
                                reports.domain
                            ));
                            let _ = out.send(Err(status)).await;
                            break;
                        }
                        Some(_) => {}
                    }
                    ledger.report(id, reports.bucket_quota_usages).await;
                }
                Ok(None) | Err(_) => break,
            },
            assigned = pushed.recv() => match assigned {
                Some(assigned) => {
                    if out.send(Ok(response(assigned, ledger.ttl_s()))).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    ledger.close(id).await;
}
