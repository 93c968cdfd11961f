//! The ledger task: one per backend process, owning the [`Ledger`]. Streams send it their
//! reports and ends ([`Handle`]); it ticks every [`TICK_MS`] to pay refills and push changes.
//! Serial by design: every store step of the RLQS server runs here, one at a time, so no share
//! is granted twice and no lock is held across a store call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use sluice_core::rlqs::TICK_MS;
use tokio::sync::{broadcast, mpsc, watch};

use super::ledger::{Assigned, Ledger, StreamId};
use super::metrics::RlqsMetrics;
use super::reader::{LedgerReader, StreamInfo, ViewAsk, ASK_BOUND};
use super::settings::Settings;
use crate::state::App;

/// Events a stream sends the ledger task.
enum Event {
    Opened(StreamId, StreamInfo, mpsc::Sender<Vec<Assigned>>),
    Bound(StreamId, String),
    Report(StreamId, Vec<BucketQuotaUsage>),
    Closed(StreamId),
}

/// Most events waiting for the ledger task; a stream whose report finds it full waits.
const EVENT_BOUND: usize = 1024;

/// Most assignment batches waiting for one stream's writer.
pub const PUSH_BOUND: usize = 64;

/// How the streams reach the ledger task. Cheap to clone.
#[derive(Clone)]
pub struct Handle {
    tx: mpsc::Sender<Event>,
    next: Arc<AtomicU64>,
    ttl_s: u64,
    reader: LedgerReader,
}

impl Handle {
    /// The TTL every assignment carries, in whole seconds.
    pub fn ttl_s(&self) -> u64 {
        self.ttl_s
    }

    /// Registers a new stream from `peer`; its assignments arrive on the returned receiver.
    pub async fn open(
        &self,
        peer: Option<std::net::SocketAddr>,
    ) -> (StreamId, mpsc::Receiver<Vec<Assigned>>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(PUSH_BOUND);
        let info = StreamInfo { peer, domain: None };
        let _ = self.tx.send(Event::Opened(id, info, tx)).await;
        (id, rx)
    }

    /// Notes the domain a stream's first report bound it to (shown by `GET /v1/rlqs/shares`).
    pub async fn bind_domain(&self, stream: StreamId, domain: String) {
        let _ = self.tx.send(Event::Bound(stream, domain)).await;
    }

    /// What reads the ledger from outside (`GET /v1/rlqs/shares`, `/readyz`).
    pub fn reader(&self) -> LedgerReader {
        self.reader.clone()
    }

    /// Hands a stream's usage report to the ledger.
    pub async fn report(&self, stream: StreamId, usages: Vec<BucketQuotaUsage>) {
        let _ = self.tx.send(Event::Report(stream, usages)).await;
    }

    /// Says a stream ended (its shares stay paid until their TTL).
    pub async fn close(&self, stream: StreamId) {
        let _ = self.tx.send(Event::Closed(stream)).await;
    }
}

/// Starts the ledger task with `settings`; it ends when `stop` turns true.
pub fn spawn(
    app: Arc<App>,
    metrics: RlqsMetrics,
    settings: Settings,
    mut stop: watch::Receiver<bool>,
) -> Handle {
    let (tx, mut rx) = mpsc::channel(EVENT_BOUND);
    let (asks, mut asked) = mpsc::channel::<ViewAsk>(ASK_BOUND);
    let ttl_s = settings.ttl_s;
    let mut ledger = Ledger::new(&settings, metrics.clone());
    let mut resets = app.resets.subscribe();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(TICK_MS));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = async { let _ = stop.wait_for(|s| *s).await; } => return,
                _ = tick.tick() => ledger.tick(&app, Instant::now()).await,
                reset = resets.recv() => match reset {
                    Ok(reset) => ledger.reset(&app, reset, Instant::now()).await,
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "rlqs: resets missed (too many at once): those keys' Envoy buckets keep their tokens until refilled");
                    }
                    // The sender lives in `app`, which this task holds: never closed.
                    Err(broadcast::error::RecvError::Closed) => return,
                },
                event = rx.recv() => match event {
                    None => return,
                    Some(Event::Opened(id, info, tx)) => ledger.open(id, info, tx),
                    Some(Event::Bound(id, domain)) => ledger.bind_domain(id, domain),
                    Some(Event::Report(id, usages)) => {
                        ledger.report(&app, id, usages, Instant::now()).await
                    }
                    Some(Event::Closed(id)) => ledger.close(id),
                },
                // New buckets' store steps, a bounded batch per turn: ticks, reports and
                // resets take their turns between batches.
                _ = std::future::ready(()), if ledger.has_arrivals() => {
                    ledger.work_arrivals(&app, Instant::now()).await
                }
                Some(ask) = asked.recv() => {
                    let _ = ask.reply.send(ledger.view(&ask.filter, Instant::now(), ask.at_ms));
                }
            }
        }
    });
    Handle {
        tx,
        next: Arc::new(AtomicU64::new(1)),
        ttl_s,
        reader: LedgerReader::new(asks, metrics),
    }
}
