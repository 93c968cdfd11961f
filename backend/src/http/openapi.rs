//! The OpenAPI document, generated from the handlers' annotations and from sluice-core's wire
//! types themselves (core's `openapi` feature derives their schemas), so the document cannot
//! drift from what the listeners send and accept; and its route (`GET /v1/openapi.json`).

use sluice_core::wire::{
    ActionLevels, ApiError, ClThrottleRequest, ErrorCode, HealthBody, KeyLevel, LevelsBody,
    RawRule, ReadyBody, RulesBody, SessionRequest, StoreHealth, ThrottleRequest, ThrottleResponse,
};
use sluice_core::{Algorithm, Mode, Rate};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::error::ApiFailure;

use super::commit;
use super::decision_all;
use super::{
    admin, audit, decision, events, history, overrides, probes, ratelimit, report, reset, rlqs,
};
use sluice_core::wire::{
    ActionCounts, ActionHistory, ActionScope, ActionTopDenied, DeniedKey, FilterReport,
    HistoryBody, HistoryRange, KeyActionState, KeyView, StepCounts, TopDeniedBody,
};
use sluice_core::wire::{
    AuditBody, AuditEntry, AuditKind, KeyOverride, OverridesBody, ResetAllBody, ResetBody,
    SessionBody,
};
use sluice_core::wire::{
    CommitRequest, CommitResponse, DeniedCheck, ThrottleAllRequest, ThrottleAllResponse,
    ThrottleCheck,
};
use sluice_core::wire::{RatelimitConfigBody, RatelimitLimit};
use sluice_core::wire::{
    RlqsBucket, RlqsHolder, RlqsKeyShares, RlqsReady, RlqsSharesBody, RlqsSum,
};

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "session",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::new("sluice_session"))),
        );
    }
}

/// The document served at `/v1/openapi.json` on both listeners.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "sluice",
        description = "Rate-limit decisions for Envoy (decision listener, default 127.0.0.1:8081: /v1/throttle, /v1/throttle/all, /v1/cl.throttle, /v1/report) and rule administration (admin listener, default 127.0.0.1:8080: everything tagged admin, token protected). Probes and this document are on both."
    ),
    paths(
        decision::throttle,
        decision_all::throttle_all,
        commit::commit,
        decision::cl_throttle,
        report::report,
        admin::list_rules,
        admin::get_rule,
        admin::put_rule,
        admin::delete_rule,
        admin::get_levels,
        overrides::list_overrides,
        overrides::get_override,
        overrides::put_override,
        overrides::delete_override,
        reset::reset_key,
        audit::get_audit,
        ratelimit::get_ratelimit_config,
        audit::whoami,
        history::get_history,
        history::get_key,
        history::get_top_denied,
        rlqs::get_shares,
        admin::login,
        admin::logout,
        events::events,
        probes::healthz,
        probes::readyz,
        probes::metrics,
        openapi,
    ),
    components(schemas(
        ThrottleRequest, ThrottleResponse, ClThrottleRequest, ApiError, ErrorCode, Algorithm, Mode,
        Rate, RawRule, RulesBody, SessionRequest, LevelsBody, ActionLevels, KeyLevel,
        StoreHealth, ReadyBody, HealthBody,
        FilterReport, ActionCounts, HistoryBody, HistoryRange, ActionScope, ActionHistory, StepCounts,
        KeyView, KeyActionState, sluice_core::wire::KeyBudget, TopDeniedBody, ActionTopDenied, DeniedKey, sluice_core::wire::DeniedMinute,
        KeyOverride, OverridesBody, AuditBody, AuditEntry, AuditKind, ResetBody, ResetAllBody, SessionBody,
        ThrottleAllRequest, ThrottleCheck, ThrottleAllResponse, DeniedCheck,
        CommitRequest, CommitResponse,
        RatelimitConfigBody, RatelimitLimit,
        RlqsSharesBody, RlqsKeyShares, RlqsHolder, RlqsBucket, RlqsSum, RlqsReady
    )),
    modifiers(&Security),
    tags(
        (name = "decision", description = "Decision listener: what the Envoy filter calls. No token; keep it off the public network."),
        (name = "admin", description = "Admin listener: `Authorization: Bearer <token>` or the `sluice_session` cookie from POST /v1/session."),
        (name = "probes", description = "On both listeners, no token."),
    )
)]
pub struct ApiDoc;

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = "probes",
    responses((status = 200, description = "The OpenAPI 3.1 document of both listeners", content_type = "application/json")))]
pub async fn openapi() -> Response {
    match ApiDoc::openapi().to_json() {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => ApiFailure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            sluice_core::wire::ErrorCode::Internal,
            e.to_string(),
        )
        .into_response(),
    }
}
