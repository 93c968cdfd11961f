//! envoyproxy/ratelimit's HTTP surface, for scripts, probes and people written against it:
//! `POST /json` ([`json`]: a `RateLimitRequest` as JSON, answered by the RLS front door),
//! `GET /healthcheck` ([`health`]) and `GET /rlconfig` ([`rlconfig`], from the peer's debug
//! port). Served on `--ratelimit-http-listen` (the peer's `PORT`, 8080), or on the admin or
//! decision listener when given that listener's address (the default shares the admin
//! listener's 127.0.0.1:8080). No token, as on the peer: keep it on a private network.
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

/// The three routes, to merge into another listener's router (no fallback of their own).
pub fn routes(app: Arc<App>) -> Router {
    Router::new()
        .route("/json", post(json::json))
        .route("/healthcheck", get(health::healthcheck))
        .route("/rlconfig", get(rlconfig::rlconfig))
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
