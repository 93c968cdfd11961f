//! `POST /v1/throttle/all`: all-or-nothing checks (several limits on one request). A denial is a 200
//! with `allowed: false` and `denied` naming the check; nothing was consumed from any limit.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::{Extension, Json};
use sluice_core::wire::{ApiError, ThrottleAllRequest, ThrottleAllResponse};

use super::error::ApiFailure;
use super::input;
use crate::deadline::{stall, Arrival, Deadline};
use crate::decide::{decide_all, Check};
use crate::state::App;

/// Decides 1 to 8 checks together: allowed only if every check allows; a denied request
/// consumes nothing from any of its limits.
#[utoipa::path(
    post,
    path = "/v1/throttle/all",
    tag = "decision",
    request_body = ThrottleAllRequest,
    responses(
        (status = 200, description = "The decision (a denial is `allowed: false` with `denied` naming the check, still 200)", body = ThrottleAllResponse),
        (status = 400, description = "Bad input; `field` names the field at fault (`checks`, `checks[1].action`, ...)", body = ApiError),
        (status = 404, description = "`unknown_action`: no rule for a check's action (`field` is `checks[i].action`)", body = ApiError),
        (status = 413, description = "Body larger than 64 KiB", body = ApiError),
        (status = 415, description = "`unsupported_media_type`: the body is not declared `Content-Type: application/json`", body = ApiError),
        (status = 503, description = "`store_unavailable`, `store_timeout`, `overloaded`, or `deadline_exceeded` (the request's `timeout_ms` left no time for the store: nothing was debited, or the store answered too late)", body = ApiError),
    )
)]
pub async fn throttle_all(
    State(app): State<Arc<App>>,
    arrival: Option<Extension<Arrival>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ThrottleAllResponse>, ApiFailure> {
    let started = Instant::now();
    let arrived = arrival.map_or(started, |Extension(Arrival(at))| at);
    let body = body.map_err(input::body_failure)?;
    let request: ThrottleAllRequest = input::json(&body)?;
    let actions = request.validate().map_err(ApiFailure::from_request_error)?;
    let rules = app.rules.current();
    let mut checks = Vec::with_capacity(request.checks.len());
    for (index, (check, action)) in request.checks.iter().zip(&actions).enumerate() {
        let Some(rule) = rules.rule_for(action.as_str(), &check.key) else {
            app.metrics.unknown_action();
            let mut failure = ApiFailure::unknown_action(action.as_str());
            failure.body.field = Some(format!("checks[{index}].action"));
            return Err(failure);
        };
        checks.push(Check {
            rule,
            key: &check.key,
            quantity: check.quantity,
            part: sluice_core::all::Part::AllOrNothing,
        });
    }
    let arrived = stall::arrival(arrived, request.sent_at_ms);
    let deadline = Deadline::from_ms(arrived, request.timeout_ms);
    let response = decide_all(&app, &checks, deadline, started, request.decision_id)
        .await
        .map_err(|e| ApiFailure::decide(&e))?;
    Ok(Json(response))
}
