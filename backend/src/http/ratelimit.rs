//! `GET /v1/ratelimit-config`: the envoyproxy/ratelimit configuration in force
//! ([`crate::ratelimit`]), its limits and the sluice rule counting each, and why the newest change
//! of its files was refused, if it was (the previous files then stay in force).

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use sluice_core::wire::RatelimitConfigBody;

use crate::state::App;

/// The configuration in force (`path: null` without `--ratelimit-config`).
#[utoipa::path(get, path = "/v1/ratelimit-config", tag = "admin",
    responses(
        (status = 200, body = RatelimitConfigBody),
        (status = 401, body = sluice_core::wire::ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_ratelimit_config(State(app): State<Arc<App>>) -> Json<RatelimitConfigBody> {
    Json(
        app.ratelimit
            .as_ref()
            .map(|live| live.body())
            .unwrap_or_default(),
    )
}
