//! The audit trail: who made a change (the admin identity the request's credential names),
//! every audited rules change made through one function, `GET /v1/audit` (filtered by action,
//! key, kind or admin) and `GET /v1/session` (who the caller is).

use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use sluice_core::limits::AUDIT_KEEP;
use sluice_core::wire::{ApiError, AuditBody, AuditEntry, AuditKind, ErrorCode, SessionBody};

use super::error::ApiFailure;
use super::history::query_param;
use crate::auth;
use crate::clock::now_ms;
use crate::state::App;
use crate::store::{AuditStamp, ChangeOutcome, RuleChange};

/// Entries `GET /v1/audit` answers without `limit`.
pub const DEFAULT_AUDIT_LIMIT: usize = 100;
/// Hex digits of a session's nonce that name it in the audit trail.
const SESSION_ID_DIGITS: usize = 12;

/// The caller's admin identity: the name a Bearer token names (checked first, as
/// `require_admin` does), else the name inside a valid session cookie with the session's id (the
/// start of its random nonce: the same for every request of one login, and no credential
/// without the rest).
pub fn identity(app: &App, headers: &HeaderMap) -> Option<(String, Option<String>)> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| app.auth.bearer_name(v));
    if let Some(name) = bearer {
        return Some((name.to_owned(), None));
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(auth::session_from_cookie_header)
        .find_map(|s| {
            let name = app.auth.session_name(s)?;
            let id: String = s.chars().take(SESSION_ID_DIGITS).collect();
            Some((name, Some(id)))
        })
}

/// Who is calling, for the audit trail: `"<name>"` for a Bearer token, `"<name> (session
/// <id>)"` for a dashboard login (see [`identity`]). Handlers behind `require_admin` always find
/// one; `"unknown"` otherwise.
pub fn who(app: &App, headers: &HeaderMap) -> String {
    match identity(app, headers) {
        Some((name, None)) => name,
        Some((name, Some(id))) => format!("{name} (session {id})"),
        None => "unknown".to_owned(),
    }
}

/// `GET /v1/session`: who the caller is signed in as (the dashboard shows it in its header).
#[utoipa::path(get, path = "/v1/session", tag = "admin",
    responses(
        (status = 200, body = SessionBody),
        (status = 401, description = "No valid session or token", body = ApiError),
        (status = 429, description = "Too many failed sign-ins from this address (a Bearer token sent)", body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn whoami(
    State(app): State<Arc<App>>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    // A Bearer token here is a sign-in as on every admin route (`require_admin`).
    let peer = super::sign_in::peer(&extensions);
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        let checked = super::sign_in::attempt(&app, peer, "Bearer token", || {
            super::sign_in::bearer_name(&app, value)
        });
        if let Err(refused) = checked {
            return refused.into_response();
        }
    }
    match identity(&app, &headers) {
        Some((name, _)) => Json(SessionBody { name }).into_response(),
        None => ApiFailure::unauthorized(
            "send Authorization: Bearer <admin token>, or log in with POST /v1/session",
        )
        .into_response(),
    }
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

/// The newest changes, newest first, optionally only those of one action, key, kind or admin.
#[utoipa::path(get, path = "/v1/audit", tag = "admin",
    params(
        ("limit" = Option<u32>, Query, description = "Entries, newest first (default 100, 1–1000)"),
        ("action" = Option<String>, Query, description = "Only this action's entries"),
        ("key" = Option<String>, Query, description = "Only entries for this key (overrides and resets), percent-encoded"),
        ("kind" = Option<String>, Query, description = "Only this kind: rule_put, rule_delete, override_put, override_delete, key_reset"),
        ("who" = Option<String>, Query, description = "Only changes by this admin identity (its name)"),
    ),
    responses(
        (status = 200, description = "The rule, override and reset changes kept (the newest 1000) that match, newest first", body = AuditBody),
        (status = 400, description = "`invalid_request` naming `limit` or `kind`", body = ApiError),
        (status = 401, body = ApiError),
        (status = 503, body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_audit(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Json<AuditBody>, ApiFailure> {
    let query = query.as_deref();
    let limit = match query_param(query, "limit")? {
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
    let filter = AuditFilter {
        action: query_param(query, "action")?.filter(|a| !a.is_empty()),
        key: query_param(query, "key")?,
        kind: match query_param(query, "kind")?.filter(|k| !k.is_empty()) {
            None => None,
            Some(text) => Some(AuditKind::parse(&text).ok_or_else(|| {
                let names: Vec<&str> = AuditKind::ALL.iter().map(|k| k.name()).collect();
                ApiFailure::invalid(
                    "kind",
                    format!("must be one of {}; got {text:?}", names.join(", ")),
                )
            })?),
        },
        who: query_param(query, "who")?.filter(|w| !w.is_empty()),
    };
    // Filters read everything kept (at most AUDIT_KEEP entries), then keep `limit`.
    let read = if filter.is_empty() { limit } else { AUDIT_KEEP };
    let entries = app
        .store_call(app.store.read_audit(read))
        .await
        .map_err(|e| ApiFailure::store(&e))?;
    let entries = entries
        .into_iter()
        .filter(|e| filter.matches(e))
        .take(limit)
        .collect();
    Ok(Json(AuditBody { entries }))
}

/// Which audit entries `GET /v1/audit` answers.
#[derive(Debug, Default)]
struct AuditFilter {
    action: Option<String>,
    key: Option<String>,
    kind: Option<AuditKind>,
    /// An admin's name: matches `name` and `name (session …)`.
    who: Option<String>,
}

impl AuditFilter {
    fn is_empty(&self) -> bool {
        self.action.is_none() && self.key.is_none() && self.kind.is_none() && self.who.is_none()
    }

    fn matches(&self, e: &AuditEntry) -> bool {
        self.action.as_ref().is_none_or(|a| *a == e.action)
            && self.key.as_ref().is_none_or(|k| e.key.as_ref() == Some(k))
            && self.kind.is_none_or(|k| k == e.kind)
            && self.who.as_ref().is_none_or(|w| {
                e.who == *w
                    || e.who
                        .strip_prefix(w.as_str())
                        .is_some_and(|r| r.starts_with(" (session "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(action: &str, key: Option<&str>, kind: AuditKind, who: &str) -> AuditEntry {
        AuditEntry {
            at_ms: 1,
            who: who.into(),
            kind,
            action: action.into(),
            key: key.map(str::to_owned),
            version: None,
            before: None,
            after: None,
        }
    }

    #[test]
    fn filters_match_action_key_kind_and_who() {
        let reset = entry(
            "reply",
            Some("alice"),
            AuditKind::KeyReset,
            "bob (session 0123456789ab)",
        );
        let put = entry("reply", None, AuditKind::RulePut, "alice");
        let f = |action: Option<&str>, key: Option<&str>, kind, who: Option<&str>| AuditFilter {
            action: action.map(str::to_owned),
            key: key.map(str::to_owned),
            kind,
            who: who.map(str::to_owned),
        };
        assert!(f(None, None, None, None).matches(&reset));
        assert!(f(
            Some("reply"),
            Some("alice"),
            Some(AuditKind::KeyReset),
            Some("bob")
        )
        .matches(&reset));
        assert!(
            !f(None, Some("alice"), None, None).matches(&put),
            "a rule has no key"
        );
        assert!(!f(None, None, Some(AuditKind::KeyReset), None).matches(&put));
        assert!(f(None, None, None, Some("alice")).matches(&put));
        assert!(
            !f(None, None, None, Some("bo")).matches(&reset),
            "a name, not a prefix"
        );
        assert!(!f(Some("post"), None, None, None).matches(&reset));
    }
}
