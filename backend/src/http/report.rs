//! `POST /v1/report` (decision listener): what the Envoy filters decided without the backend
//! (leased admissions, cached denials, failed callouts), added to the metrics and the history.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_core::wire::{ApiError, FilterReport};

use super::error::ApiFailure;
use super::input;
use crate::app::App;
use crate::clock::now_ms;
use crate::history::report::ingest;

/// Takes one filter report. Counts of actions without a rule here are counted in the metrics
/// under the action `(unknown)` and left out of the history.
#[utoipa::path(
    post,
    path = "/v1/report",
    tag = "decision",
    request_body = FilterReport,
    responses(
        (status = 204, description = "Counted (in the metrics at once, in the history within a flush, ≤ 250 ms)"),
        (status = 400, description = "Bad input; `field` names the field at fault (`actions[3].action`)", body = ApiError),
        (status = 413, description = "Body larger than 64 KiB", body = ApiError),
    )
)]
pub async fn report(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiFailure> {
    let body = body.map_err(input::body_failure)?;
    let report: FilterReport = input::json(&body)?;
    ingest(
        &report,
        &app.rules.current(),
        &app.metrics,
        &app.activity.steps,
        &app.activity.unchecked,
        now_ms(),
        Instant::now(),
    )
    .map_err(ApiFailure::from_request_error)?;
    Ok(StatusCode::NO_CONTENT)
}
