//! `DELETE /v1/keys?action=A&key=K`: resets one key under one action (unblocks a user limited by
//! mistake) by removing the throttle state it holds, whatever algorithm wrote it, and records the
//! reset in the audit trail. The key travels in the query string, percent-encoded, so any key a
//! client can send (the empty one, `/`, long ones) can be reset; `GET /v1/keys?key=K` shows the
//! same key's standing.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::Json;
use serde_json::json;
use sluice_core::wire::{ApiError, AuditEntry, AuditKind, ResetBody};

use super::admin::path_action;
use super::audit;
use super::error::ApiFailure;
use super::history::query_param;
use crate::app::App;

/// Removes one key's throttle state under one action; answers what was removed.
#[utoipa::path(delete, path = "/v1/keys", tag = "admin",
    params(
        ("action" = String, Query, description = "The action (must have a rule)"),
        ("key" = String, Query, description = "The key, percent-encoded (any string, the empty one too)"),
    ),
    responses(
        (status = 200, description = "The algorithms whose state the key held (empty: it held none); recorded in the audit trail", body = ResetBody),
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
) -> Result<Json<ResetBody>, ApiFailure> {
    let action = query_param(query.as_deref(), "action")?.ok_or_else(|| {
        ApiFailure::invalid(
            "action",
            "required: DELETE /v1/keys?action=<action>&key=<key>",
        )
    })?;
    let action = path_action(&action)?;
    let key = query_param(query.as_deref(), "key")?.ok_or_else(|| {
        ApiFailure::invalid("key", "required: DELETE /v1/keys?action=<action>&key=<key>")
    })?;
    if !app.rules.current().rules.contains_key(action.as_str()) {
        return Err(ApiFailure::unknown_action(action.as_str()));
    }
    let stamp = audit::stamp(&app, &headers);
    let removed = app
        .store_call(app.store.reset_key(&action, &key))
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
        key: Some(key.clone()),
        version: None,
        before: Some(json!({ "removed": removed })),
        after: None,
    };
    app.store_call(app.store.record_audit(&entry))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    tracing::info!(action = %action, key = %key, who = %stamp.who, removed = ?removed, "key reset");
    Ok(Json(ResetBody {
        action: action.as_str().to_owned(),
        key,
        removed,
    }))
}
