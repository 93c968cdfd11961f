//! The decision API: `POST /v1/throttle` (rules by action) and `POST /v1/cl.throttle`
//! (redis-cell compatibility). A denial is a 200 with `allowed: false`; non-2xx answers mean the
//! request itself was bad (4xx) or the store failed (5xx), and the filter applies its failure mode.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::{Extension, Json};
use sluice_core::cell::CellArgs;
use sluice_core::wire::{ApiError, ClThrottleRequest, ThrottleRequest, ThrottleResponse};

use super::error::ApiFailure;
use super::input;
use crate::deadline::{stall, Arrival, Deadline};
use crate::decide::{decide_leased, record_reservation, LeaseAsk};
use crate::state::App;

/// Decides one request under its action's rule.
#[utoipa::path(
    post,
    path = "/v1/throttle",
    tag = "decision",
    request_body = ThrottleRequest,
    responses(
        (status = 200, description = "The decision (a denial is `allowed: false`, still 200)", body = ThrottleResponse),
        (status = 400, description = "Bad input; `field` names the field at fault", body = ApiError),
        (status = 404, description = "`unknown_action`: no rule for the action", body = ApiError),
        (status = 413, description = "Body larger than 64 KiB", body = ApiError),
        (status = 415, description = "`unsupported_media_type`: the body is not declared `Content-Type: application/json`", body = ApiError),
        (status = 503, description = "`store_unavailable`, `store_timeout`, `overloaded`, or `deadline_exceeded` (the request's `timeout_ms` left no time for the store: nothing was debited, or the store answered too late)", body = ApiError),
    )
)]
pub async fn throttle(
    State(app): State<Arc<App>>,
    arrival: Option<Extension<Arrival>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ThrottleResponse>, ApiFailure> {
    let started = Instant::now();
    let arrived = arrival.map_or(started, |Extension(Arrival(at))| at);
    let body = body.map_err(input::body_failure)?;
    let request: ThrottleRequest = input::json(&body)?;
    let action = request.validate().map_err(ApiFailure::from_request_error)?;
    let rules = app.rules.current();
    let Some(rule) = rules.rule_for(action.as_str(), &request.key) else {
        app.metrics.unknown_action();
        return Err(ApiFailure::unknown_action(action.as_str()));
    };
    let response = decide_leased(
        &app,
        rule,
        &request.key,
        request.quantity,
        LeaseAsk::of(request.lease),
        Deadline::from_ms(
            stall::arrival(arrived, request.sent_at_ms),
            request.timeout_ms,
        ),
        started,
        request.decision_id,
    )
    .await
    .map_err(|e| ApiFailure::decide(&e))?;
    if let Some(id) = &request.reservation_id {
        record_reservation(&app, rule, &request.key, id, request.quantity, &response).await;
    }
    Ok(Json(response))
}

/// redis-cell `CL.THROTTLE` over HTTP: the 5-tuple `[limited, limit, remaining, retry_after_s,
/// reset_after_s]`.
#[utoipa::path(
    post,
    path = "/v1/cl.throttle",
    tag = "decision",
    request_body = ClThrottleRequest,
    responses(
        (status = 200, description = "`[limited, limit, remaining, retry_after_s, reset_after_s]` as redis-cell answers", body = [i64], example = json!([0, 16, 15, -1, 2])),
        (status = 400, description = "Bad input; `field` names the argument at fault", body = ApiError),
        (status = 503, description = "`store_unavailable`, `store_timeout` or `overloaded`", body = ApiError),
    )
)]
pub async fn cl_throttle(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<[i64; 5]>, ApiFailure> {
    let started = Instant::now();
    let body = body.map_err(input::body_failure)?;
    let request: ClThrottleRequest = input::json(&body)?;
    let args = CellArgs::new(
        request.max_burst,
        request.count,
        request.period,
        request.quantity,
    )
    .map_err(ApiFailure::from_request_error)?;
    let decision = app
        .store_call(app.store.cell_throttle(&request.key, args))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    app.metrics.latency(started.elapsed().as_secs_f64());
    Ok(Json(args.reply(&decision)))
}
