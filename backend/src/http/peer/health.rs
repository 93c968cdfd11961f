//! `GET /healthcheck`: `200 OK` when this replica can answer, `500` with an empty body when it
//! cannot, as the peer's health checker answers (`src/server/health.go`).
//!
//! The peer's components, as sluice has them: the configuration is loaded (always: a
//! configuration that does not load stops the start, and a bad edit keeps the last good one);
//! the store answers a ping within [`PING_DEADLINE`] (the peer's Redis component; as `/readyz`
//! asks it); and the process is not shutting down (the peer's SIGTERM component).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::text::TEXT_PLAIN;
use crate::http::probes::PING_DEADLINE;
use crate::state::App;

/// `OK`, or a bare 500.
pub async fn healthcheck(State(app): State<Arc<App>>) -> Response {
    let stopping = *app.stopping.borrow();
    let store = app.store_call_within(PING_DEADLINE, app.store.ping()).await;
    match (stopping, store) {
        (false, Ok(())) => ([(header::CONTENT_TYPE, TEXT_PLAIN)], "OK").into_response(),
        (true, _) => unhealthy("shutting down"),
        (false, Err(e)) => unhealthy(&e.to_string()),
    }
}

fn unhealthy(why: &str) -> Response {
    tracing::debug!(why, "/healthcheck: 500");
    StatusCode::INTERNAL_SERVER_ERROR.into_response()
}
