//! `ShouldRateLimit`: the request's checks decided under the rules in force, through the same
//! decision path as `POST /v1/throttle` ([`crate::decide`]).

use std::sync::Arc;
use std::time::Instant;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::wire::ThrottleResponse;
use sluice_core::{Mode, Rule, RuleError};
use tonic::{Request, Response, Status};

use super::request::{checks, Check};
use super::response::{self, Answer};
use crate::app::App;
use crate::decide::decide;
use crate::http::error::ApiFailure;
use crate::store::StoreError;

/// The rate limit service over an [`App`].
#[derive(Clone)]
pub struct Rls {
    app: Arc<App>,
}

impl Rls {
    /// The service for `app` (its store, rules, metrics and activity).
    pub fn new(app: Arc<App>) -> Rls {
        Rls { app }
    }
}

/// `INVALID_ARGUMENT` whose message starts with the field at fault.
pub fn invalid(e: RuleError) -> Status {
    Status::invalid_argument(format!("{}: {}", e.field, e.reason))
}

/// A failed store call: `UNAVAILABLE` for outages (Envoy's `failure_mode_deny` decides),
/// `INTERNAL` for data or scripts sluice cannot use. The message starts with the error code the
/// HTTP API would send.
pub fn store_status(e: &StoreError) -> Status {
    let failure = ApiFailure::store(e);
    let message = format!("{}: {e}", failure.body.error.as_str());
    if failure.status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
        Status::unavailable(message)
    } else {
        Status::internal(message)
    }
}

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = Instant::now();
        let request = request.into_inner();
        let checks = checks(&request).map_err(invalid)?;
        let rules = self.app.rules.current();
        let found: Vec<Option<&Rule>> = checks
            .iter()
            .map(|c| {
                let rule = rules.rule_for(c.action.as_str(), &c.key);
                if rule.is_none() {
                    self.app.metrics.unknown_action();
                }
                rule
            })
            .collect();
        let decided = decide_all(&self.app, &checks, &found, started)
            .await
            .map_err(|e| store_status(&e))?;
        let answers: Vec<Answer<'_>> = checks
            .iter()
            .zip(decided)
            .map(|(c, d)| d.map(|r| (&c.action, r)))
            .collect();
        Ok(Response::new(response::response(&answers)))
    }
}

/// Decides every check with a rule. With one, that is one decision. With several, all or
/// nothing: each is first peeked (quantity 0, nothing changes); if an enforced one cannot take its
/// quantity, only those are decided (a denial consumes nothing) and the others answer their peek,
/// unconsumed; otherwise each is decided in order. Two requests racing between peek and decision
/// can still consume the descriptors decided before a refusal, as separate HTTP calls would.
async fn decide_all(
    app: &App,
    checks: &[Check],
    rules: &[Option<&Rule>],
    started: Instant,
) -> Result<Vec<Option<ThrottleResponse>>, StoreError> {
    let mut answers: Vec<Option<ThrottleResponse>> = vec![None; checks.len()];
    let known = rules.iter().flatten().count();
    if known > 1 {
        let mut peeks = Vec::with_capacity(checks.len());
        for (check, rule) in checks.iter().zip(rules) {
            peeks.push(match rule {
                Some(rule) => Some(peek(app, rule, &check.key).await?),
                None => None,
            });
        }
        let over: Vec<bool> = checks
            .iter()
            .zip(rules)
            .zip(&peeks)
            .map(|((c, r), p)| match (r, p) {
                (Some(r), Some(p)) => r.mode() == Mode::Enforce && p.remaining < c.quantity,
                _ => false,
            })
            .collect();
        if over.iter().any(|o| *o) {
            for (i, check) in checks.iter().enumerate() {
                if let (true, Some(rule)) = (over[i], rules[i]) {
                    answers[i] =
                        Some(decide(app, rule, &check.key, check.quantity, started).await?);
                }
            }
            if answers.iter().flatten().any(|a| !a.allowed) {
                for (answer, peek) in answers.iter_mut().zip(peeks) {
                    if answer.is_none() {
                        *answer = peek;
                    }
                }
                return Ok(answers);
            }
        }
    }
    for (i, (check, rule)) in checks.iter().zip(rules).enumerate() {
        if let (None, Some(rule)) = (&answers[i], rule) {
            answers[i] = Some(decide(app, rule, &check.key, check.quantity, started).await?);
        }
    }
    Ok(answers)
}

/// The key's standing, unchanged (no activity, no decision metric).
async fn peek(app: &App, rule: &Rule, key: &str) -> Result<ThrottleResponse, StoreError> {
    let decision = app
        .store_call(app.store.throttle(rule, key, 0, None))
        .await?;
    Ok(ThrottleResponse::new(
        rule.algorithm(),
        rule.mode(),
        rule.params().policy_window_ns(),
        &decision,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_are_unavailable_or_internal_named_by_their_code() {
        for (e, code, name) in [
            (
                StoreError::Unavailable("refused".into()),
                tonic::Code::Unavailable,
                "store_unavailable",
            ),
            (
                StoreError::Timeout(500),
                tonic::Code::Unavailable,
                "store_timeout",
            ),
            (
                StoreError::Overloaded(9),
                tonic::Code::Unavailable,
                "overloaded",
            ),
            (
                StoreError::Full("OOM".into()),
                tonic::Code::Unavailable,
                "store_full",
            ),
            (
                StoreError::Corrupt("x".into()),
                tonic::Code::Internal,
                "store_corrupt",
            ),
            (
                StoreError::WrongType {
                    key: "k".into(),
                    detail: "d".into(),
                },
                tonic::Code::Internal,
                "store_wrong_type",
            ),
            (
                StoreError::Script {
                    script: "gcra",
                    message: "m".into(),
                },
                tonic::Code::Internal,
                "store_script_error",
            ),
        ] {
            let status = store_status(&e);
            assert_eq!(status.code(), code, "{e}");
            assert!(
                status.message().starts_with(&format!("{name}: ")),
                "{status:?}"
            );
        }
        let s = invalid(RuleError::new("domain", "must not be empty"));
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(s.message(), "domain: must not be empty");
    }
}
