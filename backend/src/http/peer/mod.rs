//! envoyproxy/ratelimit's HTTP surface, for scripts, probes and people written against it:
//! `POST /json` ([`json`]: a `RateLimitRequest` as JSON, answered by the RLS front door),
//! `GET /healthcheck` ([`health`]) and `GET /rlconfig` ([`rlconfig`], from the peer's debug
//! port). Served on `--ratelimit-http-listen` (the peer's `PORT`, 8080), or on the admin or
//! decision listener when given that listener's address (the default shares the decision
//! listener). No token, as on the peer: keep it on a private network; on the admin listener
//! ([`routes_behind_token`]) `/json` and `/rlconfig` take the admin token like the rest of it.
//! `POST /json` takes only `Content-Type: application/json` (415 otherwise), so no cross-site
//! page can post a decision through a browser.
//!
//! - [`text`]: the plain-text answers (Go's `http.Error` shape).
//! - [`decode`] / [`encode`]: the proto3 JSON mapping of the request and the response, by hand
//!   (envoy-types has no serde), as Go's protojson reads and writes it.

pub mod decode;
pub mod encode;
pub mod health;
pub mod json;
pub mod rlconfig;
pub mod text;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::Router;

use crate::http::input::MAX_BODY_BYTES;
use crate::state::App;
use text::text_error;

/// `POST /json` (JSON bodies only) and `GET /rlconfig`: what decides and what reports.
fn deciding() -> Router<Arc<App>> {
    Router::new()
        .route(
            "/json",
            post(json::json).route_layer(axum::middleware::from_fn(
                crate::http::json_only::require_json_text,
            )),
        )
        .route("/rlconfig", get(rlconfig::rlconfig))
}

/// The three routes, to merge into another listener's router (no fallback of their own).
pub fn routes(app: Arc<App>) -> Router {
    deciding()
        .route("/healthcheck", get(health::healthcheck))
        .route_layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// The three routes for the admin listener: `/json` and `/rlconfig` behind the admin token
/// (that listener's role: nothing on it decides or reports without it), `/healthcheck` open as
/// the listener's other probes.
pub fn routes_behind_token(app: Arc<App>) -> Router {
    deciding()
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::http::admin::require_admin,
        ))
        .route("/healthcheck", get(health::healthcheck))
        .route_layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(app)
}

/// The surface's own listener: the routes, and the peer's plain-text 404 and 405 elsewhere.
pub fn router(app: Arc<App>) -> Router {
    routes(app)
        .fallback(|| async {
            text_error(
                StatusCode::NOT_FOUND,
                "no such page; this listener serves POST /json, GET /healthcheck and GET /rlconfig",
            )
        })
        .method_not_allowed_fallback(|| async {
            text_error(
                StatusCode::METHOD_NOT_ALLOWED,
                "POST /json, GET /healthcheck, GET /rlconfig",
            )
        })
}
