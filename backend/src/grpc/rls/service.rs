//! The RLS front door: `ShouldRateLimit` answered by one of the two descriptor mappings, chosen
//! by the request's domain: a domain of `--ratelimit-config` as envoyproxy/ratelimit answers it
//! ([`super::config_path`], with the domain's semantics), any other under sluice's rules
//! ([`super::rules_path`]); with `--ratelimit-config` under the peer's semantics, a domain in no
//! file is OK as the peer answers it, unless `own_rules_for_unknown_domains`. Both
//! decide through the same decision path as `POST /v1/throttle` ([`crate::decide`]), under the
//! caller's `grpc-timeout` when it sends one (Envoy's ratelimit filter does when its `timeout` is
//! set): the same deadline as a decision request's `timeout_ms` ([`crate::deadline`]), and
//! under one backstop on the whole call ([`Rls::call_deadline`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::descriptor::FILTER_DOMAIN;
use sluice_core::limits::MAX_DECISION_TIMEOUT_MS;
use tonic::{Request, Response, Status};

use super::status::store_status;
use super::{config_path, rules_path};
use crate::deadline::{parse_grpc_timeout, Deadline};
use crate::ratelimit::semantics::Point;
use crate::state::App;
use crate::store::StoreError;

/// The rate limit service over an [`App`].
#[derive(Clone)]
pub struct Rls {
    app: Arc<App>,
    call_deadline: Duration,
}

impl Rls {
    /// The service for `app` (its store, rules, metrics and activity).
    pub fn new(app: Arc<App>) -> Rls {
        let call_deadline = Rls::call_deadline(app.store_deadline);
        Rls { app, call_deadline }
    }

    /// A backstop on one call beyond the store's own bounds: every descriptor's store steps.
    /// Set here on the unary call rather than server-wide, where it would also end the
    /// long-lived exchange streams served on the same listener. Past it the call answers as a
    /// store timeout would (`UNAVAILABLE`, `store_timeout: ...`).
    pub fn call_deadline(store_deadline: Duration) -> Duration {
        store_deadline
            .saturating_mul(2 * super::request::MAX_DESCRIPTORS as u32)
            .min(Duration::from_secs(30))
    }

    /// The store error a call past its backstop deadline answers (counted as one).
    fn backstop_timeout(&self) -> StoreError {
        let e =
            StoreError::Timeout(u64::try_from(self.call_deadline.as_millis()).unwrap_or(u64::MAX));
        self.app.metrics.store_error(&e);
        e
    }
}

/// The caller's deadline: `grpc-timeout` from `arrived`, at most [`MAX_DECISION_TIMEOUT_MS`] (as
/// a decision request's `timeout_ms`). None without the header (the store deadline applies).
pub fn deadline(metadata: &tonic::metadata::MetadataMap, arrived: Instant) -> Option<Deadline> {
    let timeout = metadata
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse_grpc_timeout)?;
    Some(Deadline::new(
        arrived,
        timeout.min(Duration::from_millis(MAX_DECISION_TIMEOUT_MS)),
    ))
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let deadline = deadline(request.metadata(), started);
        let request = request.into_inner();
        let configured = self.app.ratelimit.as_ref().map(|live| live.current());
        let app = &self.app;
        let work = async {
            let Some(loaded) = configured.as_ref() else {
                return rules_path::answer(app, &request, deadline, started).await;
            };
            let semantics = loaded.semantics_of(&request.domain, app.ratelimit_semantics);
            match loaded.domains.get(&request.domain) {
                Some(level) => {
                    config_path::answer(app, level, semantics, &request, deadline, started).await
                }
                // The sluice filter's own domain is sluice's, whatever the semantics.
                None if semantics.has(Point::OwnRulesForUnknownDomains)
                    || request.domain == FILTER_DOMAIN =>
                {
                    rules_path::answer(app, &request, deadline, started).await
                }
                None => {
                    super::unknown_domains::shared().note(
                        &request.domain,
                        &app.metrics,
                        &app.rules.current(),
                    );
                    config_path::unknown_domain(&request)
                }
            }
        };
        match tokio::time::timeout(self.call_deadline, work).await {
            Ok(Ok(response)) => Ok(Response::new(response)),
            Ok(Err(e)) => Err(e.status()),
            Err(_) => Err(store_status(&self.backstop_timeout())),
        }
    }
}
