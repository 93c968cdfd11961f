//! `DELETE /v1/keys?action=A&key=K`: resets one key under one action (unblocks a user limited by
//! mistake) by removing the throttle state it holds, whatever algorithm wrote it, and its
//! cost-budget records (a commit of a reservation from before the reset then changes nothing:
//! `ResetStore::reset_key`), and records the reset in the audit trail. `action=*` resets the key on every action with a rule at once (one
//! request, one confirmation in the dashboard), with one audit entry per action. The key travels in the query string, percent-encoded, so any key a
//! client can send (the empty one, `/`, long ones) can be reset; `GET /v1/keys?key=K` shows the
//! same key's standing.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use sluice_core::wire::{ApiError, AuditEntry, AuditKind, ResetAllBody, ResetBody, EVERY_ACTION};
use sluice_core::Action;

use super::admin::path_action;
use super::audit;
use super::error::ApiFailure;
use super::history::query_param;
use crate::state::App;
use crate::store::AuditStamp;

/// Removes one key's throttle state under one action (or every action: `action=*`); answers
/// what was removed.
#[utoipa::path(delete, path = "/v1/keys", tag = "admin",
    params(
        ("action" = String, Query, description = "The action (must have a rule), or `*` for every action with a rule"),
        ("key" = String, Query, description = "The key, percent-encoded (any string, the empty one too)"),
    ),
    responses(
        (status = 200, description = "The algorithms whose state the key held (empty: it held none), a `ResetBody`; for `action=*` a `ResetAllBody`, one entry per action. Each action's reset is recorded in the audit trail", body = ResetBody),
        (status = 400, description = "`invalid_request` naming `action` or `key`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "`unknown_action`: the action has no rule", body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn reset_key(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Result<Response, ApiFailure> {
    let action = query_param(query.as_deref(), "action")?.ok_or_else(|| {
        ApiFailure::invalid(
            "action",
            "required: DELETE /v1/keys?action=<action or *>&key=<key>",
        )
    })?;
    let key = query_param(query.as_deref(), "key")?.ok_or_else(|| {
        ApiFailure::invalid(
            "key",
            "required: DELETE /v1/keys?action=<action or *>&key=<key>",
        )
    })?;
    let stamp = audit::stamp(&app, &headers);
    if action == EVERY_ACTION {
        let mut actions: Vec<Action> = app
            .rules
            .current()
            .rules
            .keys()
            .filter_map(|a| Action::parse(a).ok())
            .collect();
        actions.sort();
        let mut done = Vec::with_capacity(actions.len());
        for action in actions {
            done.push(reset_one(&app, &stamp, action, &key).await?);
        }
        return Ok(Json(ResetAllBody { key, actions: done }).into_response());
    }
    let action = path_action(&action)?;
    if !app.rules.current().rules.contains_key(action.as_str()) {
        return Err(ApiFailure::unknown_action(action.as_str()));
    }
    Ok(Json(reset_one(&app, &stamp, action, &key).await?).into_response())
}

/// Resets `key` under `action` and records it in the audit trail.
pub(crate) async fn reset_one(
    app: &App,
    stamp: &AuditStamp,
    action: Action,
    key: &str,
) -> Result<ResetBody, ApiFailure> {
    let removed = app
        .store_call(app.store.reset_key(&action, key))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    // Recorded after the removal (the state and the audit trail may live on different Cluster
    // nodes): if this fails the answer is the store error, and repeating the reset, which then
    // removes nothing, records it.
    let entry = AuditEntry {
        at_ms: stamp.at_ms,
        who: stamp.who.clone(),
        kind: AuditKind::KeyReset,
        action: action.as_str().to_owned(),
        key: Some(key.to_owned()),
        version: None,
        before: Some(json!({ "removed": removed })),
        after: None,
    };
    app.resets.announce(action.as_str(), key);
    app.store_call(app.store.record_audit(&entry))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    tracing::info!(action = %action, key = %key, who = %stamp.who, removed = ?removed, "key reset");
    Ok(ResetBody {
        action: action.as_str().to_owned(),
        key: key.to_owned(),
        removed,
    })
}
