//! HTTP shape: the two routers and their handlers. The decision router serves only decisions and
//! probes; the admin router serves the token-protected API, the login session and the dashboard.
//! envoyproxy/ratelimit's HTTP surface ([`peer`]: `/json`, `/healthcheck`, `/rlconfig`) is merged
//! into one of them, or served on a listener of its own, as `--ratelimit-http-listen` says.

pub mod admin;
pub mod audit;
pub mod commit;
pub mod dashboard;
pub mod decision;
pub mod decision_all;
pub mod error;
pub mod events;
pub mod history;
pub mod input;
pub mod json_only;
pub mod openapi;
pub mod overrides;
pub mod peer;
pub mod probes;
pub mod ratelimit;
pub mod report;
pub mod reset;
pub mod rlqs;
pub mod serve;
pub mod sign_in;

use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::routing::{any, delete, get, post};
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::trace::TraceLayer;

use crate::state::App;
use error::ApiFailure;

async fn no_route(uri: Uri) -> ApiFailure {
    ApiFailure::no_route(uri.path())
}

async fn wrong_method(method: Method, uri: Uri) -> ApiFailure {
    ApiFailure::new(
        StatusCode::METHOD_NOT_ALLOWED,
        sluice_core::wire::ErrorCode::MethodNotAllowed,
        format!(
            "{method} is not allowed on {}; see /v1/openapi.json",
            uri.path()
        ),
    )
}

fn probes() -> Router<Arc<App>> {
    Router::new()
        .route("/healthz", get(probes::healthz))
        .route("/readyz", get(probes::readyz))
        .route("/metrics", get(probes::metrics))
        .route("/v1/openapi.json", get(openapi::openapi))
}

/// The decision listener: `POST /v1/throttle`, `POST /v1/cl.throttle` and the probes; every
/// other path is a JSON 404 (admin routes are not served here).
pub fn decision_router(app: Arc<App>) -> Router {
    Router::new()
        .route("/v1/throttle", post(decision::throttle))
        .route("/v1/throttle/all", post(decision_all::throttle_all))
        .route("/v1/commit", post(commit::commit))
        .route("/v1/cl.throttle", post(decision::cl_throttle))
        .route("/v1/report", post(report::report))
        .route_layer(axum::middleware::from_fn(json_only::require_json))
        .merge(probes())
        .fallback(no_route)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(input::MAX_BODY_BYTES))
        .with_state(app)
}

/// The admin listener: the token-protected API, the session routes, the probes, and the
/// dashboard's files, with security headers on every response.
pub fn admin_router(app: Arc<App>, dashboard: dashboard::Dashboard) -> Router {
    let protected = Router::new()
        .route("/v1/rules", get(admin::list_rules))
        .route(
            "/v1/rules/{action}",
            get(admin::get_rule)
                .put(admin::put_rule)
                .delete(admin::delete_rule),
        )
        .route(
            "/v1/rules/{action}/overrides",
            get(overrides::list_overrides),
        )
        .route(
            "/v1/rules/{action}/overrides/{key}",
            get(overrides::get_override)
                .put(overrides::put_override)
                .delete(overrides::delete_override),
        )
        .route("/v1/keys", delete(reset::reset_key))
        .route("/v1/audit", get(audit::get_audit))
        .route("/v1/ratelimit-config", get(ratelimit::get_ratelimit_config))
        .route("/v1/levels", get(admin::get_levels))
        .route("/v1/events", get(events::events))
        .route("/v1/history", get(history::get_history))
        .route("/v1/keys", get(history::get_key))
        .route("/v1/top-denied", get(history::get_top_denied))
        .route("/v1/rlqs/shares", get(rlqs::get_shares))
        .route_layer(axum::middleware::from_fn(json_only::require_json))
        .route_layer(axum::middleware::from_fn_with_state(
            app.clone(),
            admin::require_admin,
        ));
    let csp = dashboard::Dashboard::base_csp();
    Router::new()
        .merge(protected)
        .route(
            "/v1/session",
            get(audit::whoami)
                .post(admin::login)
                .delete(admin::logout)
                .route_layer(axum::middleware::from_fn(json_only::require_json)),
        )
        .merge(probes())
        .route("/v1/{*rest}", any(no_route))
        .method_not_allowed_fallback(wrong_method)
        .with_state(app)
        .fallback_service(dashboard.router())
        .layer(DefaultBodyLimit::max(input::MAX_BODY_BYTES))
        .layer(TraceLayer::new_for_http())
        .layer(SetResponseHeaderLayer::if_not_present(
            header::CONTENT_SECURITY_POLICY,
            csp,
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            header::X_FRAME_OPTIONS,
            HeaderValue::from_static("DENY"),
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ))
}
