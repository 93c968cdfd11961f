//! `StreamRateLimitQuotas`: one task per stream. The domain is bound by the stream's first
//! message (Envoy sends the same one in every report); a message with another ends the stream
//! `INVALID_ARGUMENT`. Reports go to the ledger task ([`crate::rlqs::task`]), whose assignments
//! (answers to reports, and pushes on its tick) are written back on the stream. The stream ends
//! `UNAVAILABLE` when the server stops, so graceful shutdown never waits on it.

use std::pin::Pin;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::RateLimitQuotaService;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use futures::Stream;
use tokio::sync::{mpsc, watch};
use tonic::{Request, Response, Status, Streaming};

use super::response::response;
use crate::rlqs::Handle;

/// Most responses waiting to be written on one stream.
const OUT_BOUND: usize = 16;

/// The RLQS service over the ledger task.
#[derive(Clone)]
pub struct Rlqs {
    ledger: Handle,
    stopping: watch::Receiver<bool>,
}

impl Rlqs {
    /// The service; its streams end when `stopping` turns true.
    pub fn new(ledger: Handle, stopping: watch::Receiver<bool>) -> Rlqs {
        Rlqs { ledger, stopping }
    }
}

type Out = Result<RateLimitQuotaResponse, Status>;

#[tonic::async_trait]
impl RateLimitQuotaService for Rlqs {
    type StreamRateLimitQuotasStream = Pin<Box<dyn Stream<Item = Out> + Send + 'static>>;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        let inbound = request.into_inner();
        let (out_tx, out_rx) = mpsc::channel::<Out>(OUT_BOUND);
        let (ledger, stop) = (self.ledger.clone(), self.stopping.clone());
        tokio::spawn(run(inbound, out_tx, ledger, stop));
        let out =
            futures::stream::unfold(
                out_rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        Ok(Response::new(Box::pin(out)))
    }
}

/// One stream's life: reports in, assignments out, until either side ends or the server stops.
async fn run(
    mut inbound: Streaming<RateLimitQuotaUsageReports>,
    out: mpsc::Sender<Out>,
    ledger: Handle,
    mut stop: watch::Receiver<bool>,
) {
    let (id, mut pushed) = ledger.open().await;
    let mut domain: Option<String> = None;
    loop {
        tokio::select! {
            _ = async { let _ = stop.wait_for(|s| *s).await; } => {
                let _ = out.send(Err(Status::unavailable("sluice is stopping"))).await;
                break;
            }
            _ = out.closed() => break,
            message = inbound.message() => match message {
                Ok(Some(reports)) => {
                    match &domain {
                        None if reports.domain.is_empty() => {
                            let _ = out.send(Err(Status::invalid_argument("the first report must name a domain"))).await;
                            break;
                        }
                        None => domain = Some(reports.domain.clone()),
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
