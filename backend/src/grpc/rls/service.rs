//! `ShouldRateLimit`: the request's checks decided under the rules in force, through the same
//! decision path as `POST /v1/throttle` ([`crate::decide`]), under the caller's `grpc-timeout`
//! when it sends one (Envoy's ratelimit filter does when its `timeout` is set): the same
//! deadline as a decision request's `timeout_ms` ([`crate::deadline`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::limits::MAX_DECISION_TIMEOUT_MS;
use sluice_core::wire::ThrottleResponse;
use sluice_core::{FieldError, Rule};
use tonic::{Request, Response, Status};

use super::commit::{commit_all, settle_reservation};
use super::request::{checks, Check};
use super::response::{self, Answer};
use crate::deadline::{parse_grpc_timeout, Deadline, DecideError};
use crate::decide::{decide, decide_all as all_or_nothing};
use crate::http::error::ApiFailure;
use crate::state::App;
use crate::store::{CheckRequest, StoreError};

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

/// A decision that could not be made: [`store_status`] for a store failure; `DEADLINE_EXCEEDED`
/// (message `deadline_exceeded: ...`) for a missed deadline (Envoy's `failure_mode_deny`
/// decides, as for any error).
pub fn decide_status(e: &DecideError) -> Status {
    match e {
        DecideError::Store(e) => store_status(e),
        DecideError::Deadline(miss) => Status::deadline_exceeded(format!(
            "{}: {miss}",
            sluice_core::wire::ErrorCode::DeadlineExceeded.as_str()
        )),
    }
}

/// `INVALID_ARGUMENT` whose message starts with the field at fault.
pub fn invalid(e: FieldError) -> Status {
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

impl Rls {
    /// The store error a call past its backstop deadline answers (counted as one).
    fn backstop_timeout(&self) -> StoreError {
        let e =
            StoreError::Timeout(u64::try_from(self.call_deadline.as_millis()).unwrap_or(u64::MAX));
        self.app.metrics.store_error(&e);
        e
    }

    /// A request for a domain of `--ratelimit-config`: answered as envoyproxy/ratelimit answers
    /// ([`crate::ratelimit::decide`]), under the same deadlines as every call.
    async fn answer_configured(
        &self,
        level: &crate::ratelimit::matcher::Level,
        request: &RateLimitRequest,
        deadline: Option<Deadline>,
        started: Instant,
    ) -> Result<Response<RateLimitResponse>, Status> {
        use crate::ratelimit::decide::{answer, AnswerError};
        match tokio::time::timeout(
            self.call_deadline,
            answer(&self.app, level, request, deadline, started),
        )
        .await
        {
            Ok(Ok(response)) => Ok(Response::new(response)),
            Ok(Err(AnswerError::Invalid(e))) => Err(invalid(e)),
            Ok(Err(AnswerError::Decide(e))) => Err(decide_status(&e)),
            Err(_) => Err(store_status(&self.backstop_timeout())),
        }
    }
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
        if let Some(live) = &self.app.ratelimit {
            let loaded = live.current();
            if let Some(level) = loaded.domains.get(&request.domain) {
                return self
                    .answer_configured(level, &request, deadline, started)
                    .await;
            }
        }
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
        // Commits (stream-done descriptors with a request id) are settled, not decided: they
        // answer OK, and the request's checks are decided as if they were not there.
        let (commits, found): (Vec<Option<&Rule>>, Vec<Option<&Rule>>) = checks
            .iter()
            .zip(found)
            .map(|(c, r)| {
                if c.commit.is_some() {
                    (r, None)
                } else {
                    (None, r)
                }
            })
            .unzip();
        let work = async {
            commit_all(&self.app, &checks, &commits, deadline).await?;
            decide_all(&self.app, &checks, &found, deadline, started).await
        };
        let decided = match tokio::time::timeout(self.call_deadline, work).await {
            Ok(decided) => decided,
            Err(_) => Err(self.backstop_timeout().into()),
        }
        .map_err(|e| decide_status(&e))?;
        let answers: Vec<Answer<'_>> = checks
            .iter()
            .zip(decided)
            .map(|(c, d)| d.map(|r| (&c.action, r)))
            .collect();
        Ok(Response::new(response::response(&answers)))
    }
}

/// Decides every check with a rule. With one, that is one decision ([`decide`], exactly as
/// `POST /v1/throttle`). With several, all or nothing in one atomic store step
/// ([`crate::decide::decide_all`], as `POST /v1/throttle/all`): the request passes only if every
/// enforced rule allows it, and a denied request consumes nothing from any of its descriptors'
/// limits; the denying check answers its denial, every other one a peek of its unchanged state.
/// Checks without a rule answer nothing (`None`).
async fn decide_all(
    app: &App,
    checks: &[Check],
    rules: &[Option<&Rule>],
    deadline: Option<Deadline>,
    started: Instant,
) -> Result<Vec<Option<ThrottleResponse>>, DecideError> {
    let mut answers: Vec<Option<ThrottleResponse>> = vec![None; checks.len()];
    let known: Vec<(usize, CheckRequest<'_>)> = checks
        .iter()
        .zip(rules)
        .enumerate()
        .filter_map(|(i, (check, rule))| {
            rule.map(|rule| {
                (
                    i,
                    CheckRequest {
                        rule,
                        key: &check.key,
                        quantity: check.quantity,
                    },
                )
            })
        })
        .collect();
    match known.as_slice() {
        [] => {}
        [(i, one)] => {
            if let Some(answer) = answers.get_mut(*i) {
                *answer =
                    Some(decide(app, one.rule, one.key, one.quantity, deadline, started).await?);
            }
        }
        several => {
            let requests: Vec<CheckRequest<'_>> = several.iter().map(|(_, c)| *c).collect();
            let decided = all_or_nothing(app, &requests, deadline, started, None).await?;
            for ((i, _), result) in several.iter().zip(decided.results) {
                if let Some(answer) = answers.get_mut(*i) {
                    *answer = Some(result);
                }
            }
        }
    }
    // Reservations with an id (`sluice_reservation`) are held as in flight, once allowed (a
    // denied all-or-nothing request allowed none of its checks: their answers are peeks).
    let all_allowed = answers.iter().flatten().all(|a| a.allowed);
    for (i, one) in &known {
        let id = checks.get(*i).and_then(|c| c.reservation.as_ref());
        let (Some(id), Some(Some(answer))) = (id, answers.get(*i)) else {
            continue;
        };
        if all_allowed {
            settle_reservation(app, one.rule, one.key, id, one.quantity, answer).await;
        }
    }
    Ok(answers)
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
        let s = invalid(FieldError::new("domain", "must not be empty"));
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(s.message(), "domain: must not be empty");
    }
}
