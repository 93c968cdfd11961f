//! Every non-2xx answer: a status and an [`ApiError`] body (`{"error", "field"?, "message"}`).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sluice_core::wire::ApiError;
use sluice_core::RuleError;

use crate::store::StoreError;

/// A failed request, ready to be sent.
#[derive(Debug, Clone)]
pub struct ApiFailure {
    /// The HTTP status.
    pub status: StatusCode,
    /// The JSON body.
    pub body: ApiError,
}

impl ApiFailure {
    /// A failure with a code and message, no field.
    pub fn new(status: StatusCode, error: &str, message: impl Into<String>) -> ApiFailure {
        ApiFailure {
            status,
            body: ApiError {
                error: error.to_owned(),
                field: None,
                message: message.into(),
            },
        }
    }

    /// 400 `invalid_request` naming the field at fault.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiFailure {
        let field = field.into();
        let message = message.into();
        ApiFailure {
            status: StatusCode::BAD_REQUEST,
            body: ApiError {
                error: "invalid_request".into(),
                message: format!("{field}: {message}"),
                field: Some(field),
            },
        }
    }

    /// 400 `invalid_request` from a core validation error.
    pub fn from_request_error(e: RuleError) -> ApiFailure {
        ApiFailure::invalid(e.field, e.reason)
    }

    /// 400 `invalid_rule` from a rule validation error.
    pub fn invalid_rule(e: RuleError) -> ApiFailure {
        ApiFailure {
            status: StatusCode::BAD_REQUEST,
            body: ApiError {
                error: "invalid_rule".into(),
                message: format!("{}: {}", e.field, e.reason),
                field: Some(e.field),
            },
        }
    }

    /// 404 `unknown_action`: no rule for the action.
    pub fn unknown_action(action: &str) -> ApiFailure {
        ApiFailure {
            status: StatusCode::NOT_FOUND,
            body: ApiError {
                error: "unknown_action".into(),
                field: Some("action".into()),
                message: format!("no rule for action {action:?}; add one with PUT /v1/rules/{action} on the admin API"),
            },
        }
    }

    /// 401 `unauthorized`.
    pub fn unauthorized() -> ApiFailure {
        ApiFailure::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send Authorization: Bearer <admin token>, or log in with POST /v1/session",
        )
    }

    /// 404 `not_found` for a route that does not exist on this listener.
    pub fn no_route(path: &str) -> ApiFailure {
        ApiFailure::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route {path} on this listener"),
        )
    }

    /// The answer for a failed store call: 503 for outages (retry elsewhere or later), 500 for
    /// data sluice cannot read.
    pub fn store(e: &StoreError) -> ApiFailure {
        let (status, code) = match e {
            StoreError::Unavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            StoreError::Timeout(_) => (StatusCode::SERVICE_UNAVAILABLE, "store_timeout"),
            StoreError::Overloaded(_) => (StatusCode::SERVICE_UNAVAILABLE, "overloaded"),
            StoreError::WrongType { .. } => (StatusCode::INTERNAL_SERVER_ERROR, "store_wrong_type"),
            StoreError::Corrupt(_) => (StatusCode::INTERNAL_SERVER_ERROR, "store_corrupt"),
        };
        ApiFailure::new(status, code, e.to_string())
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}
