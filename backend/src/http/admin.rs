//! The admin API: rules, levels, and the dashboard's login session.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use sluice_core::wire::{
    parse, ActionScope, ApiError, LevelsBody, RawRule, RulesBody, SessionRequest, SCOPE_PARAM,
};
use sluice_core::{Action, FieldError, Rule};

use super::audit;
use super::error::ApiFailure;
use super::input;
use super::sign_in;
use crate::auth;
use crate::levels;
use crate::state::App;
use crate::store::{ChangeOutcome, RuleChange};
use crate::touched_view::{self, TouchedSince};

/// Lets a request through only with the admin token (Bearer) or a valid session cookie. A
/// Bearer token is a sign-in: from an address past its failed sign-ins it is refused (429)
/// unchecked, and a wrong one is counted ([`sign_in`]). A session cookie is not (it cannot be
/// guessed), so a dashboard already signed in keeps working from that address.
pub async fn require_admin(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let peer = sign_in::peer(request.extensions());
    let bearer_ok = match request.headers().get(header::AUTHORIZATION) {
        None => false,
        Some(value) => {
            match sign_in::attempt(&app, peer, "Bearer token", || {
                sign_in::bearer_name(&app, value)
            }) {
                Ok(found) => found.is_some(),
                Err(refused) => return refused.into_response(),
            }
        }
    };
    if bearer_ok || has_session(&app, request.headers()) {
        next.run(request).await
    } else {
        ApiFailure::unauthorized(
            "send Authorization: Bearer <admin token>, or log in with POST /v1/session",
        )
        .into_response()
    }
}

fn has_session(app: &App, headers: &HeaderMap) -> bool {
    headers.get_all(header::COOKIE).iter().any(|v| {
        v.to_str()
            .ok()
            .and_then(auth::session_from_cookie_header)
            .is_some_and(|s| app.auth.session_valid(s))
    })
}

/// Bound on a whole levels snapshot (many store calls).
const LEVELS_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) fn path_action(text: &str) -> Result<Action, ApiFailure> {
    Action::parse(text).map_err(|reason| ApiFailure::invalid("action", reason))
}

/// The `{action}` path segment. One that is not UTF-8 (`%FF`) is refused as JSON naming
/// `action`, like every other bad action (axum's own rejection is plain text).
pub(crate) fn segment_action(
    segment: Result<Path<String>, PathRejection>,
) -> Result<Action, ApiFailure> {
    let Path(text) = segment.map_err(|e| ApiFailure::invalid("action", e.body_text()))?;
    path_action(&text)
}

/// Every rule and the rules version.
#[utoipa::path(get, path = "/v1/rules", tag = "admin",
    responses(
        (status = 200, body = RulesBody),
        (status = 401, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn list_rules(State(app): State<Arc<App>>) -> Json<RulesBody> {
    Json(app.rules.current().body())
}

/// One rule.
#[utoipa::path(get, path = "/v1/rules/{action}", tag = "admin",
    params(("action" = String, Path, description = "The action")),
    responses(
        (status = 200, body = RawRule),
        (status = 400, body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action`", body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_rule(
    State(app): State<Arc<App>>,
    action: Result<Path<String>, PathRejection>,
) -> Result<Json<Rule>, ApiFailure> {
    let action = segment_action(action)?;
    let rules = app.rules.current();
    rules
        .rules
        .get(action.as_str())
        .map(|r| Json(Rule::clone(r)))
        .ok_or_else(|| ApiFailure::unknown_action(action.as_str()))
}

/// Creates or replaces a rule. The body's `action`, if present, must equal the path's.
#[utoipa::path(put, path = "/v1/rules/{action}", tag = "admin",
    params(("action" = String, Path, description = "The action")),
    request_body = RawRule,
    responses(
        (status = 200, description = "The rule as stored", body = RawRule),
        (status = 400, description = "`invalid_rule` or `invalid_request`, naming the field", body = ApiError),
        (status = 401, body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn put_rule(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    action: Result<Path<String>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Rule>, ApiFailure> {
    let action = segment_action(action)?;
    crate::ratelimit::owned::writable(&app.rules.current(), &action)
        .map_err(ApiFailure::from_request_error)?;
    let rule = rule_body(&action, body)?;
    match audit::apply(&app, &headers, RuleChange::PutRule(rule.clone())).await? {
        ChangeOutcome::Done { .. } => Ok(Json(rule)),
        other => Err(audit::unexpected(&other)),
    }
}

/// A rule body for `action` (a rule's or an override's), validated: the body's `action`, if
/// present, must equal `action`.
pub(crate) fn rule_body(
    action: &Action,
    body: Result<Bytes, BytesRejection>,
) -> Result<Rule, ApiFailure> {
    let body = body.map_err(input::body_failure)?;
    let value: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiFailure::invalid("body", format!("not valid JSON: {e}")))?;
    let mut raw: RawRule = parse::from_value(&value, "rule").map_err(ApiFailure::invalid_rule)?;
    match raw.action.as_deref() {
        None => raw.action = Some(action.as_str().to_owned()),
        Some(named) if named == action.as_str() => {}
        Some(other) => {
            return Err(ApiFailure::invalid_rule(FieldError::new(
                "action",
                format!(
                    "must equal the action in the path ({:?}); got {other:?}",
                    action.as_str()
                ),
            )))
        }
    }
    Rule::try_from(raw).map_err(ApiFailure::invalid_rule)
}

/// Deletes a rule, and every per-key override of it.
#[utoipa::path(delete, path = "/v1/rules/{action}", tag = "admin",
    params(("action" = String, Path, description = "The action")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action`", body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn delete_rule(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    action: Result<Path<String>, PathRejection>,
) -> Result<StatusCode, ApiFailure> {
    let action = segment_action(action)?;
    crate::ratelimit::owned::writable(&app.rules.current(), &action)
        .map_err(ApiFailure::from_request_error)?;
    match audit::apply(&app, &headers, RuleChange::DeleteRule(action.clone())).await? {
        ChangeOutcome::Done { .. } => Ok(StatusCode::NO_CONTENT),
        ChangeOutcome::Missing => Err(ApiFailure::unknown_action(action.as_str())),
        other => Err(audit::unexpected(&other)),
    }
}

/// `GET /v1/levels` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct LevelsQuery {
    /// Only this action (default: every action with a rule).
    pub action: Option<String>,
    /// Keys per action, newest first (default 20, at most 1000).
    pub limit: Option<String>,
    /// `all` (every action with a rule, the default) or `active` (actions with a recently
    /// active key or a non-zero rate: what the SSE `levels` event carries).
    #[param(value_type = Option<sluice_core::wire::ActionScope>)]
    pub scope: Option<String>,
}

/// The most recently active keys of each action with their levels as of now.
#[utoipa::path(get, path = "/v1/levels", tag = "admin",
    params(LevelsQuery),
    responses(
        (status = 200, body = LevelsBody),
        (status = 400, body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action`", body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_levels(
    State(app): State<Arc<App>>,
    query: Result<Query<LevelsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<LevelsBody>, ApiFailure> {
    let Query(query) = query.map_err(|e| ApiFailure::invalid("query", e.body_text()))?;
    let scope = ActionScope::parse(query.scope.as_deref())
        .map_err(|e| ApiFailure::invalid(SCOPE_PARAM, e))?;
    let limit = match query.limit.as_deref() {
        None => levels::DEFAULT_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=levels::MAX_LIMIT).contains(&n) => n,
            _ => {
                return Err(ApiFailure::invalid(
                    "limit",
                    format!(
                        "must be a whole number from 1 to {}; got {text:?}",
                        levels::MAX_LIMIT
                    ),
                ))
            }
        },
    };
    let set = app.rules.current();
    let rules: Vec<Rule> = match query.action.as_deref() {
        None => set.rules.values().map(|r| Rule::clone(r)).collect(),
        Some(name) => {
            let action = path_action(name)?;
            let rule = set
                .rules
                .get(action.as_str())
                .ok_or_else(|| ApiFailure::unknown_action(action.as_str()))?;
            vec![Rule::clone(rule)]
        }
    };
    let read = async {
        // Recent keys are kept per action as long as it is touched (a day in Redis, for good
        // in memory), rates come from this replica's flushes, which touch too.
        let rules = match scope {
            ActionScope::All => rules,
            ActionScope::Active => {
                let (since, also) = (TouchedSince::Ever, BTreeSet::new());
                touched_view::narrow(app.store.as_ref(), &app.activity, rules, since, &also).await?
            }
        };
        levels::snapshot(
            app.store.as_ref(),
            &app.activity,
            &rules,
            &set.overrides,
            limit,
        )
        .await
    };
    let mut body = app
        .store_call_within(LEVELS_DEADLINE, read)
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    if scope == ActionScope::Active {
        body.actions.retain(|a| a.is_active());
    }
    Ok(Json(body))
}

/// Exchanges the admin token for an HttpOnly session cookie (for the dashboard).
#[utoipa::path(post, path = "/v1/session", tag = "admin",
    request_body = SessionRequest,
    responses(
        (status = 204, description = "Logged in; `Set-Cookie: sluice_session=...; HttpOnly; SameSite=Strict; Path=/` (and `Secure` when the admin listener serves TLS)"),
        (status = 400, body = ApiError),
        (status = 401, description = "Wrong token", body = ApiError),
        (status = 429, description = "Too many failed sign-ins from this address; `Retry-After` says when to try again", body = ApiError),
    ))]
pub async fn login(
    State(app): State<Arc<App>>,
    extensions: axum::http::Extensions,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let request: SessionRequest = match body
        .map_err(input::body_failure)
        .and_then(|body| input::json(&body))
    {
        Ok(request) => request,
        Err(failure) => return failure.into_response(),
    };
    let peer = sign_in::peer(&extensions);
    let name = match sign_in::attempt(&app, peer, "dashboard login", || {
        app.auth.identify(&request.token).map(str::to_owned)
    }) {
        Ok(Some(name)) => name,
        Ok(None) => return ApiFailure::unauthorized("wrong admin token").into_response(),
        Err(refused) => return refused.into_response(),
    };
    let cookie = auth::set_cookie(&app.auth.new_session_for(&name), app.secure_cookie);
    session_response(&cookie)
}

/// Logs out: clears the session cookie (and revokes it on this replica).
#[utoipa::path(delete, path = "/v1/session", tag = "admin",
    responses((status = 204, description = "Logged out; the cookie is cleared")))]
pub async fn logout(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    for value in headers.get_all(header::COOKIE) {
        if let Some(session) = value
            .to_str()
            .ok()
            .and_then(auth::session_from_cookie_header)
        {
            app.auth.revoke(session);
        }
    }
    session_response(&auth::clear_cookie(app.secure_cookie))
}

fn session_response(cookie: &str) -> Response {
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(value) = HeaderValue::from_str(cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
