//! The audit trail: who made a change (from the credential the request carried), every audited
//! rules change made through one function, and `GET /v1/audit`.

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::Json;
use sluice_core::limits::AUDIT_KEEP;
use sluice_core::wire::{ApiError, AuditBody, ErrorCode};

use super::error::ApiFailure;
use super::history::query_param;
use crate::app::App;
use crate::auth;
use crate::clock::now_ms;
use crate::store::{AuditStamp, ChangeOutcome, RuleChange};

/// Entries `GET /v1/audit` answers without `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;
/// Hex digits of a session's nonce that name it in the audit trail.
const SESSION_ID_DIGITS: usize = 12;

/// Who is calling, for the audit trail: `"token"` when the request carries the admin token as a
/// Bearer header (checked first, as `require_admin` does), else `"session:<id>"` for a valid
/// session cookie, the id being the start of the session's random nonce (the cookie's first
/// part: the same for every request of one login, and no credential without the rest).
/// Handlers behind `require_admin` always find one of the two; `"unknown"` otherwise.
pub fn who(app: &App, headers: &HeaderMap) -> String {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| app.auth.bearer_matches(v));
    if bearer {
        return "token".to_owned();
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(auth::session_from_cookie_header)
        .find(|s| app.auth.session_valid(s))
        .and_then(|s| s.split('.').next())
        .map(|nonce| {
            let id: String = nonce.chars().take(SESSION_ID_DIGITS).collect();
            format!("session:{id}")
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// The stamp of a change made now by the caller of `headers`.
pub fn stamp(app: &App, headers: &HeaderMap) -> AuditStamp {
    AuditStamp {
        at_ms: now_ms(),
        who: who(app, headers),
    }
}

/// Applies an admin's change with its audit entry (one atomic store step), then brings this
/// replica's rule cache up to date, so the change is in force here when the answer leaves and on
/// every replica within a poll.
pub async fn apply(
    app: &App,
    headers: &HeaderMap,
    change: RuleChange,
) -> Result<ChangeOutcome, ApiFailure> {
    let stamp = stamp(app, headers);
    let outcome = app
        .store_call(app.store.change_rules(&change, Some(&stamp)))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    if let ChangeOutcome::Done { version, .. } = &outcome {
        tracing::info!(
            action = %change.action(),
            key = change.key().unwrap_or(""),
            kind = ?change.kind(),
            who = %stamp.who,
            version,
            "rules changed"
        );
        app.rules.after_write(app.store.as_ref(), &change).await;
        app.metrics.set_rules(app.rules.current().rules.len());
    }
    Ok(outcome)
}

/// A refusal the change cannot produce (a put never misses): a defect, not bad input.
pub fn unexpected(outcome: &ChangeOutcome) -> ApiFailure {
    ApiFailure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        ErrorCode::Internal,
        format!("the store answered {outcome:?} to a change that cannot produce it"),
    )
}

/// The newest changes, newest first.
#[utoipa::path(get, path = "/v1/audit", tag = "admin",
    params(("limit" = Option<u32>, Query, description = "Entries, newest first (default 100, 1–1000)")),
    responses(
        (status = 200, description = "Every rule, override and reset change kept (the newest 1000), newest first", body = AuditBody),
        (status = 400, description = "`invalid_request` naming `limit`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_audit(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Json<AuditBody>, ApiFailure> {
    let limit = match query_param(query.as_deref(), "limit")? {
        None => DEFAULT_AUDIT_LIMIT,
        Some(text) => match text.parse::<usize>() {
            Ok(n) if (1..=AUDIT_KEEP).contains(&n) => n,
            _ => {
                return Err(ApiFailure::invalid(
                    "limit",
                    format!("must be a whole number from 1 to {AUDIT_KEEP}; got {text:?}"),
                ))
            }
        },
    };
    let entries = app
        .store_call(app.store.read_audit(limit))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    Ok(Json(AuditBody { entries }))
}
