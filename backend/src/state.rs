//! The backend's shared state, at the ground of the crate: what every handler, the decision
//! path and the RLS front door read ([`App`]: the store handle, the rules in force, metrics,
//! activity, the admin token, the store's latency), and the one way a handler calls the store
//! (under the store deadline, failures counted). It imports only the parts it holds, never a
//! handler or the assembly ([`crate::app`] builds it and serves the listeners over it), so the
//! modules above it import it downward.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::activity::ActivityBook;
use crate::auth::Auth;
use crate::deadline::latency::LatencyEstimate;
use crate::levels::LevelsHub;
use crate::metrics::Metrics;
use crate::ratelimit::Live;
use crate::rules::RuleCache;
use crate::sign_ins::SignIns;
use crate::store::{Store, StoreError};

/// Everything the handlers share.
pub struct App {
    /// Where state and rules live.
    pub store: Arc<dyn Store>,
    /// The rules in force on this replica.
    pub rules: Arc<RuleCache>,
    /// The live-activity batch and rates.
    pub activity: Arc<ActivityBook>,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Admin token and sessions.
    pub auth: Auth,
    /// Failed admin sign-ins per client address (a wrong Bearer token or a wrong token posted
    /// to `POST /v1/session`), bounded.
    pub sign_ins: SignIns,
    /// Whether the session cookie is marked `Secure`: when the admin listener serves TLS, so a
    /// browser never sends the cookie over a plaintext connection to the same host.
    pub secure_cookie: bool,
    /// Level snapshots for SSE.
    pub levels: Arc<LevelsHub>,
    /// Backstop bound on one store call from a handler.
    pub store_deadline: Duration,
    /// The store's recent latency for decisions: a step whose answer cannot arrive before its
    /// caller's deadline is not started ([`crate::deadline`]).
    pub latency: Arc<LatencyEstimate>,
    /// Turns true at shutdown (ends SSE streams so graceful shutdown does not wait on them).
    pub stopping: watch::Receiver<bool>,
    /// The envoyproxy/ratelimit configuration in force (`--ratelimit-config`), if any.
    pub ratelimit: Option<Arc<Live>>,
    /// `--ratelimit-semantics`: whose answers the ratelimit configuration's domains give, where
    /// a file does not say (`sluice_semantics`).
    pub ratelimit_semantics: crate::ratelimit::semantics::Semantics,
    /// Key resets made here, for the RLQS ledger (Envoy's buckets are refilled on a reset).
    pub resets: crate::resets::Resets,
    /// Reads the RLQS ledger, once the gRPC listener has started its task (never with
    /// `--grpc-listen off`): `GET /v1/rlqs/shares` and `/readyz`.
    pub rlqs: std::sync::OnceLock<crate::rlqs::reader::LedgerReader>,
}

impl App {
    /// Runs a store call under the deadline; counts failures.
    pub async fn store_call<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.store_call_within(self.store_deadline, call).await
    }

    /// Runs a store call (or several) under `deadline`; counts failures.
    pub async fn store_call_within<T>(
        &self,
        deadline: Duration,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let ms = u64::try_from(deadline.as_millis()).unwrap_or(u64::MAX);
        let result = match tokio::time::timeout(deadline, call).await {
            Ok(r) => r,
            Err(_) => Err(StoreError::Timeout(ms)),
        };
        if let Err(e) = &result {
            self.metrics.store_error(e);
        }
        result
    }
}
