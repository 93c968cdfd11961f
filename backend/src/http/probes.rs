//! Routes on both listeners: liveness, readiness and metrics (the OpenAPI document's route is
//! [`super::openapi::openapi`]).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sluice_core::wire::{HealthBody, ReadyBody};

use super::error::ApiFailure;
use crate::state::App;

/// Bound on the readiness ping (`/readyz`, and the peer's `/healthcheck`).
pub const PING_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "probes",
    responses((status = 200, description = "The process answers", body = HealthBody)))]
pub async fn healthz() -> Json<HealthBody> {
    Json(HealthBody {
        status: "ok".to_owned(),
    })
}

/// Readiness: the store answers a ping. On a Redis Cluster that means every slot range has a
/// master and each master answers a PING of its own (a plain PING through the cluster client
/// skips a master it lost, so a killed master's slots looked served until its replica was
/// promoted); the 503's message names the unserved ranges and their master. With the gRPC
/// listener on, `rlqs` says what Envoy's quota streams hold (counted as they change, so this
/// never waits on the RLQS ledger); it never makes the answer a 503.
#[utoipa::path(get, path = "/readyz", tag = "probes",
    responses(
        (status = 200, description = "Ready; `warnings` lists settings that let a key spray switch limiting off", body = ReadyBody),
        (status = 503, description = "The store does not answer (Cluster: some slot range has no master, or its master does not answer; the message names them)", body = sluice_core::wire::ApiError),
    ))]
pub async fn readyz(State(app): State<Arc<App>>) -> Result<Json<ReadyBody>, ApiFailure> {
    app.store_call_within(PING_DEADLINE, app.store.ping())
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    Ok(Json(ReadyBody {
        status: "ready".to_owned(),
        store: app.store.kind().to_owned(),
        warnings: app.store.health().warnings,
        master: app.store.master(),
        rlqs: app.rlqs.get().map(|reader| reader.sizes()),
    }))
}

/// Prometheus metrics (OpenMetrics text).
#[utoipa::path(get, path = "/metrics", tag = "probes",
    responses((status = 200, description = "OpenMetrics text", content_type = "application/openmetrics-text", body = String)))]
pub async fn metrics(State(app): State<Arc<App>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        app.metrics.encode(),
    )
        .into_response()
}
