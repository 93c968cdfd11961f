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
use crate::clock::now_ms;
use crate::history::report::{ingest, IngestError, Sinks};
use crate::state::App;
use crate::store::StoreError;

/// Takes one filter report. Counts of actions without a rule here are counted in the metrics
/// under the action `(unknown)` and left out of the history.
#[utoipa::path(
    post,
    path = "/v1/report",
    tag = "decision",
    request_body = FilterReport,
    responses(
        (status = 204, description = "Counted, or a copy of a report already counted (same `reporter` and `seq`): counted nowhere. With an identity, in the history and the metrics at once; without, in the history within a flush (≤ 250 ms)"),
        (status = 503, description = "The store did not answer (`store_*`): send the same report again", body = ApiError),
        (status = 400, description = "Bad input; `field` names the field at fault (`actions[3].action`)", body = ApiError),
        (status = 413, description = "Body larger than 64 KiB", body = ApiError),
        (status = 415, description = "`unsupported_media_type`: the body is not declared `Content-Type: application/json`", body = ApiError),
    )
)]
pub async fn report(
    State(app): State<Arc<App>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<StatusCode, ApiFailure> {
    let body = body.map_err(input::body_failure)?;
    let report: FilterReport = input::json(&body)?;
    // Counted in a task of its own, so that a caller hanging up (the filter's report timeout)
    // cannot cut a report between the store's apply and the metrics: the next copy of it is
    // recognised as applied and counted nowhere.
    let task = tokio::spawn(async move {
        let rules = app.rules.current();
        let sinks = Sinks {
            rules: &rules,
            metrics: &app.metrics,
            pending: &app.activity.steps,
            warnings: &app.activity.unchecked,
            edge: &app.activity.edge,
            attempts: &app.activity.attempts,
            touched: &app.activity.touched,
        };
        let counted = ingest(&report, sinks, app.store.as_ref(), now_ms(), Instant::now());
        let e = match tokio::time::timeout(app.store_deadline, counted).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(IngestError::Invalid(e))) => return Err(ApiFailure::from_request_error(e)),
            Ok(Err(IngestError::Store(e))) => e,
            Err(_) => StoreError::Timeout(
                u64::try_from(app.store_deadline.as_millis()).unwrap_or(u64::MAX),
            ),
        };
        app.metrics.store_error(&e);
        Err(ApiFailure::store(&e))
    });
    match task.await {
        Ok(Ok(())) => Ok(StatusCode::NO_CONTENT),
        Ok(Err(failure)) => Err(failure),
        Err(e) => Err(ApiFailure::store(&StoreError::Unavailable(format!(
            "report task: {e}"
        )))),
    }
}
