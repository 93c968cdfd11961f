//! Per-key overrides on the admin listener: `GET /v1/rules/{action}/overrides` and
//! `GET/PUT/DELETE /v1/rules/{action}/overrides/{key}`. An override is a whole rule, validated
//! like every rule, in force for one key of an action that has a rule (see
//! [`crate::rules::RuleSet::rule_for`]). Reads answer from this replica's rule cache; writes go
//! through the store with their audit entry in one step.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, RawPathParams, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use sluice_core::limits::MAX_OVERRIDES_PER_ACTION;
use sluice_core::wire::{
    check_override_key, ApiError, ErrorCode, KeyOverride, OverridesBody, RawRule,
};
use sluice_core::{Action, Rule};

use super::admin::{path_action, rule_body, segment_action};
use super::audit;
use super::error::ApiFailure;
use super::history::query_param;
use super::reset;
use crate::state::App;
use crate::store::{ChangeOutcome, RuleChange};

/// The `{action}` and `{key}` path segments, checked: a bad action is refused naming `action`,
/// a key that is empty, over the literal bound or not UTF-8 naming `key`.
fn action_and_key(
    segments: Result<Path<(String, String)>, PathRejection>,
    raw: &RawPathParams,
) -> Result<(Action, String), ApiFailure> {
    let Path((action, key)) = segments.map_err(|e| {
        // Only a segment that is not UTF-8 once decoded fails here: say which.
        let raw_action = raw
            .iter()
            .find(|(name, _)| *name == "action")
            .map(|(_, v)| v);
        let field = if raw_action.is_some_and(|a| Action::parse(a).is_ok()) {
            "key"
        } else {
            "action"
        };
        ApiFailure::invalid(field, e.body_text())
    })?;
    let action = path_action(&action)?;
    check_override_key(&key).map_err(ApiFailure::from_request_error)?;
    Ok((action, key))
}

fn no_override(action: &Action, key: &str) -> ApiFailure {
    ApiFailure {
        status: StatusCode::NOT_FOUND,
        body: ApiError {
            error: ErrorCode::NotFound,
            field: Some("key".into()),
            message: format!(
                "no override for key {key:?} of action {:?}; add one with PUT /v1/rules/{}/overrides/<key>",
                action.as_str(),
                action.as_str()
            ),
        },
    }
}

/// Every override of an action's rule.
#[utoipa::path(get, path = "/v1/rules/{action}/overrides", tag = "admin",
    params(("action" = String, Path, description = "The action")),
    responses(
        (status = 200, description = "The action's overrides, sorted by key", body = OverridesBody),
        (status = 400, body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action`", body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn list_overrides(
    State(app): State<Arc<App>>,
    action: Result<Path<String>, PathRejection>,
) -> Result<Json<OverridesBody>, ApiFailure> {
    let action = segment_action(action)?;
    let set = app.rules.current();
    if !set.rules.contains_key(action.as_str()) {
        return Err(ApiFailure::unknown_action(action.as_str()));
    }
    let overrides = set
        .overrides
        .get(action.as_str())
        .map(|by_key| {
            by_key
                .iter()
                .map(|(key, rule)| KeyOverride {
                    key: key.clone(),
                    rule: Rule::clone(rule),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Json(OverridesBody {
        version: set.version.unwrap_or(0),
        action: action.as_str().to_owned(),
        overrides,
    }))
}

/// One key's override.
#[utoipa::path(get, path = "/v1/rules/{action}/overrides/{key}", tag = "admin",
    params(
        ("action" = String, Path, description = "The action"),
        ("key" = String, Path, description = "The key, percent-encoded (1–128 bytes)"),
    ),
    responses(
        (status = 200, description = "The rule in force for this key", body = RawRule),
        (status = 400, description = "`invalid_request` naming `action` or `key`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action` (no rule), or `not_found` naming `key` (no override)", body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_override(
    State(app): State<Arc<App>>,
    raw: RawPathParams,
    segments: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Rule>, ApiFailure> {
    let (action, key) = action_and_key(segments, &raw)?;
    let set = app.rules.current();
    if !set.rules.contains_key(action.as_str()) {
        return Err(ApiFailure::unknown_action(action.as_str()));
    }
    set.overrides
        .get(action.as_str())
        .and_then(|by_key| by_key.get(&key))
        .map(|rule| Json(Rule::clone(rule)))
        .ok_or_else(|| no_override(&action, &key))
}

/// Creates or replaces one key's override: a whole rule body, validated like `PUT
/// /v1/rules/{action}` (its `action` may be omitted; if present it must equal the path's).
#[utoipa::path(put, path = "/v1/rules/{action}/overrides/{key}", tag = "admin",
    params(
        ("action" = String, Path, description = "The action (must have a rule)"),
        ("key" = String, Path, description = "The key, percent-encoded (1–128 bytes)"),
        ("fresh" = Option<bool>, Query, description = "`true`: also reset the key's state on this action, so it starts under the override with nothing held (recorded as a `key_reset` too)"),
    ),
    request_body = RawRule,
    responses(
        (status = 200, description = "The override as stored", body = RawRule),
        (status = 400, description = "`invalid_rule` naming the rule field, or `invalid_request` naming `action`, `key` or `body`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action`: the action has no rule", body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn put_override(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    raw: RawPathParams,
    RawQuery(query): RawQuery,
    segments: Result<Path<(String, String)>, PathRejection>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Rule>, ApiFailure> {
    let (action, key) = action_and_key(segments, &raw)?;
    let fresh = match query_param(query.as_deref(), "fresh")?.as_deref() {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiFailure::invalid(
                "fresh",
                format!("must be true or false; got {other:?}"),
            ))
        }
    };
    let rule = rule_body(&action, body)?;
    let change = RuleChange::PutOverride {
        key: key.clone(),
        rule: rule.clone(),
    };
    match audit::apply(&app, &headers, change).await? {
        ChangeOutcome::Done { .. } => {
            if fresh {
                // The key starts under its new rule with nothing held (a VIP given capacity 50
                // gets 50, not what the old rule's state left); recorded as its own reset.
                let stamp = audit::stamp(&app, &headers);
                reset::reset_one(&app, &stamp, action, &key).await?;
            }
            Ok(Json(rule))
        }
        ChangeOutcome::NoRule => Err(ApiFailure::unknown_action(action.as_str())),
        ChangeOutcome::TooManyOverrides => Err(ApiFailure::invalid(
            "key",
            format!(
                "action {:?} already has {MAX_OVERRIDES_PER_ACTION} overrides, the most it may have; delete one first",
                action.as_str()
            ),
        )),
        other => Err(audit::unexpected(&other)),
    }
}

/// Deletes one key's override: the key is under its action's rule again.
#[utoipa::path(delete, path = "/v1/rules/{action}/overrides/{key}", tag = "admin",
    params(
        ("action" = String, Path, description = "The action"),
        ("key" = String, Path, description = "The key, percent-encoded (1–128 bytes)"),
    ),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_request` naming `action` or `key`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action` (no rule), or `not_found` naming `key` (no override)", body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn delete_override(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    raw: RawPathParams,
    segments: Result<Path<(String, String)>, PathRejection>,
) -> Result<StatusCode, ApiFailure> {
    let (action, key) = action_and_key(segments, &raw)?;
    let change = RuleChange::DeleteOverride {
        action: action.clone(),
        key: key.clone(),
    };
    match audit::apply(&app, &headers, change).await? {
        ChangeOutcome::Done { .. } => Ok(StatusCode::NO_CONTENT),
        ChangeOutcome::NoRule => Err(ApiFailure::unknown_action(action.as_str())),
        ChangeOutcome::Missing => Err(no_override(&action, &key)),
        other => Err(audit::unexpected(&other)),
    }
}
