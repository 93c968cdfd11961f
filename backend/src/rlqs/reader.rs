//! How the rest of the backend reads the RLQS ledger without holding it: [`LedgerReader`] asks
//! the ledger task for a view between its steps (`GET /v1/rlqs/shares`) and reads the stream
//! counts without waiting for it (`/readyz`). The App holds one ([`crate::state::App::rlqs`]),
//! so this file imports neither the ledger nor the App (no import circle), and it holds the
//! shapes both sides share: what a view asks for ([`SharesFilter`]) and what the ledger keeps of
//! a stream's Envoy only to show it ([`StreamInfo`]).

use std::net::SocketAddr;

use sluice_core::wire::{RlqsReady, RlqsSharesBody};
use tokio::sync::{mpsc, oneshot};

use super::metrics::RlqsMetrics;

/// What the ledger knows of a stream's Envoy, kept only to be shown.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamInfo {
    /// The peer's address as the gRPC listener saw it.
    pub peer: Option<SocketAddr>,
    /// The quota filter's domain, once its first report bound it.
    pub domain: Option<String>,
}

/// Which keys a view lists: all, or those of one action and/or one key (exact match).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharesFilter {
    /// Only this action.
    pub action: Option<String>,
    /// Only this key.
    pub key: Option<String>,
}

impl SharesFilter {
    /// Whether (`action`, `key`) is listed.
    pub fn admits(&self, action: &str, key: &str) -> bool {
        self.action.as_deref().is_none_or(|a| a == action)
            && self.key.as_deref().is_none_or(|k| k == key)
    }
}

/// One read of the ledger, answered by its task: the keys `filter` admits, stamped `at_ms`.
pub struct ViewAsk {
    /// Which keys.
    pub filter: SharesFilter,
    /// The wall clock to stamp the body with, in ms since the epoch.
    pub at_ms: u64,
    /// Where the task sends the body.
    pub reply: oneshot::Sender<RlqsSharesBody>,
}

/// Most reads waiting for the ledger task; a read that finds it full waits its turn.
pub const ASK_BOUND: usize = 16;

/// Reads the ledger from outside its task. Cheap to clone.
#[derive(Clone)]
pub struct LedgerReader {
    asks: mpsc::Sender<ViewAsk>,
    metrics: RlqsMetrics,
}

impl LedgerReader {
    /// A reader asking the task on `asks`, reading the counts from `metrics`.
    pub fn new(asks: mpsc::Sender<ViewAsk>, metrics: RlqsMetrics) -> LedgerReader {
        LedgerReader { asks, metrics }
    }

    /// The keys `filter` admits, their rule's bucket and every holder's share. Answered by the
    /// task between its steps (it is serial, so a slow store step delays it); `None` if the task
    /// has stopped.
    pub async fn view(&self, filter: SharesFilter, at_ms: u64) -> Option<RlqsSharesBody> {
        let (reply, answer) = oneshot::channel();
        let ask = ViewAsk {
            filter,
            at_ms,
            reply,
        };
        self.asks.send(ask).await.ok()?;
        answer.await.ok()
    }

    /// Open streams and held buckets as last counted: read without waiting for the task, so
    /// `/readyz` never queues behind a slow store step.
    pub fn sizes(&self) -> RlqsReady {
        self.metrics.sizes()
    }
}
