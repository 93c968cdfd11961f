//! `GET /v1/rlqs/shares` on the admin listener: the RLQS ledger as it stands, per (action, key)
//! held over Envoy's quota filter, the rule's whole token bucket and each Envoy's share of it
//! (docs/rlqs.md). Read-only, answered by the ledger task ([`crate::rlqs::reader::LedgerReader::view`]); this
//! replica's streams only (the ledger lives in each backend's memory).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use sluice_core::wire::{ApiError, ErrorCode, RlqsSharesBody};
use sluice_core::Action;

use super::error::ApiFailure;
use super::history::query_param;
use crate::clock::now_ms;
use crate::rlqs::reader::SharesFilter;
use crate::state::App;

/// Bound on waiting for the ledger task, which runs store steps one at a time: a slow store
/// delays its answer, and the view is refused rather than left hanging.
pub const VIEW_DEADLINE: Duration = Duration::from_secs(5);

/// The query parameters this route reads; any other is refused, naming it (a misspelt filter
/// would otherwise list every key).
const PARAMS: [&str; 2] = ["action", "key"];

/// `GET /v1/rlqs/shares` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct SharesQuery {
    /// Only this action (exact; letters, digits and `_ . : -`).
    pub action: Option<String>,
    /// Only this key (exact; any text, percent-encoded).
    pub key: Option<String>,
}

/// The filter a query asks for, refused naming the parameter at fault.
pub fn shares_filter(query: Option<&str>) -> Result<SharesFilter, ApiFailure> {
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let name = pair.split_once('=').map_or(pair, |(k, _)| k);
        if !PARAMS.contains(&name) {
            return Err(ApiFailure::invalid(
                name,
                "unknown parameter: GET /v1/rlqs/shares takes only action and key",
            ));
        }
    }
    let action = query_param(query, "action")?;
    if let Some(a) = &action {
        Action::parse(a).map_err(|e| ApiFailure::invalid("action", e))?;
    }
    let key = query_param(query, "key")?;
    Ok(SharesFilter { action, key })
}

/// Which Envoy holds which share of each key served over RLQS, and what the rule allows them
/// together.
#[utoipa::path(get, path = "/v1/rlqs/shares", tag = "admin",
    params(SharesQuery),
    responses(
        (status = 200, description = "The keys held over RLQS on this backend (sorted by action, then key; at most 200, `truncated` past it), each with the rule's token bucket, every holder's share (at most 64 per key) and the sums. Empty when the gRPC listener is off", body = RlqsSharesBody),
        (status = 400, description = "An unknown parameter, `action` not an action name, or a parameter given twice or not UTF-8 once percent-decoded; `field` names it", body = ApiError),
        (status = 401, body = ApiError),
        (status = 503, description = "The RLQS ledger did not answer within 5 s (it waits on a slow store)", body = ApiError),
    ),
    security(("bearer" = []), ("session" = [])))]
pub async fn get_shares(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
) -> Result<Json<RlqsSharesBody>, ApiFailure> {
    let filter = shares_filter(query.as_deref())?;
    let at_ms = now_ms();
    let Some(ledger) = app.rlqs.get() else {
        return Ok(Json(RlqsSharesBody {
            at_ms,
            ..RlqsSharesBody::default()
        }));
    };
    match tokio::time::timeout(VIEW_DEADLINE, ledger.view(filter, at_ms)).await {
        Ok(Some(body)) => Ok(Json(body)),
        Ok(None) => Err(ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Overloaded,
            "the RLQS ledger has stopped (sluice is shutting down)",
        )),
        Err(_) => Err(ApiFailure::new(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::Overloaded,
            format!(
                "the RLQS ledger did not answer within {} s: it runs store steps one at a time and the store is slow",
                VIEW_DEADLINE.as_secs()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(query: &str) -> (String, String) {
        let e = shares_filter(Some(query)).unwrap_err();
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        (e.body.field.unwrap_or_default(), e.body.message)
    }

    #[test]
    fn filters_parse_and_bad_input_names_its_field() {
        assert_eq!(shares_filter(None).unwrap(), SharesFilter::default());
        let f = shares_filter(Some("action=user&key=a%26b")).unwrap();
        assert_eq!(f.action.as_deref(), Some("user"));
        assert_eq!(f.key.as_deref(), Some("a&b"));
        assert_eq!(refused("acton=user").0, "acton");
        let (field, message) = refused("action=no%20space");
        assert_eq!(field, "action");
        assert!(message.contains("found ' '"), "{message}");
        assert_eq!(refused("key=a&key=b").0, "key");
        assert_eq!(refused("key=%FF").0, "key");
    }
}
