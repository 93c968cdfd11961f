//! `POST /v1/commit`: commits a reservation once the request's actual cost is known
//! ([`sluice_core::commit`]): refunds what is surely still held of reserved − actual, debits
//! actual − reserved (never denied; the part that does not fit is overshoot), once per request
//! id. Under the request's `timeout_ms` like a throttle ([`crate::deadline`]): a commit that
//! cannot start in time answers 503 `deadline_exceeded` having changed nothing, and one that
//! finishes after its caller gave up is still counted in the metrics; the caller's retry with the
//! same id then answers the first commit's numbers (`duplicate: true`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::{Extension, Json};
use sluice_core::wire::{ApiError, CommitRequest, CommitResponse};

use super::error::ApiFailure;
use super::input;
use crate::deadline::{stall, Arrival, Deadline};
use crate::decide::reservation::commit as commit_reservation;
use crate::state::App;

/// Commits a reservation's actual cost.
#[utoipa::path(
    post,
    path = "/v1/commit",
    tag = "decision",
    request_body = CommitRequest,
    responses(
        (status = 200, description = "What the commit did (a retried id: `duplicate: true`, the first commit's numbers, nothing changed)", body = CommitResponse),
        (status = 400, description = "Bad input; `field` names the field at fault (`reserved`, `id`, ...)", body = ApiError),
        (status = 404, description = "`unknown_action`: no rule for the action", body = ApiError),
        (status = 413, description = "Body larger than 64 KiB", body = ApiError),
        (status = 415, description = "`unsupported_media_type`: the body is not declared `Content-Type: application/json`", body = ApiError),
        (status = 503, description = "`store_unavailable`, `store_timeout`, `overloaded`, or `deadline_exceeded` (the request's `timeout_ms` left no time for the store: nothing changed, or the store answered too late: retry with the same id)", body = ApiError),
    )
)]
pub async fn commit(
    State(app): State<Arc<App>>,
    arrival: Option<Extension<Arrival>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<CommitResponse>, ApiFailure> {
    let started = Instant::now();
    let arrived = arrival.map_or(started, |Extension(Arrival(at))| at);
    let body = body.map_err(input::body_failure)?;
    let request: CommitRequest = input::json(&body)?;
    let action = request.validate().map_err(ApiFailure::from_request_error)?;
    let Some(rule) = app
        .rules
        .current()
        .rule_for(action.as_str(), &request.key)
        .cloned()
    else {
        app.metrics.unknown_action();
        return Err(ApiFailure::unknown_action(action.as_str()));
    };
    let arrived = stall::arrival(arrived, request.sent_at_ms);
    let deadline = Deadline::from_ms(arrived, request.timeout_ms);
    let outcome = commit_reservation(
        &app,
        &rule,
        &request.key,
        &request.id,
        request.commit(),
        deadline,
    )
    .await
    .map_err(|e| ApiFailure::decide(&e))?;
    Ok(Json(CommitResponse::new(
        rule.capacity(),
        &outcome.committed,
        outcome.duplicate,
    )))
}
