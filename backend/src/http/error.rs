//! Every non-2xx answer: a status and an [`ApiError`] body (`{"error", "field"?, "message"}`),
//! with the code from core's closed [`ErrorCode`] set.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sluice_core::wire::{ApiError, ErrorCode};
use sluice_core::FieldError;

use crate::deadline::DecideError;
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
    /// A failure with a code and message, no field. Every 5xx is built here, so its cause is
    /// logged here (rate-limited: [`crate::failure_log`]); a 5xx is only built to be answered.
    pub fn new(status: StatusCode, error: ErrorCode, message: impl Into<String>) -> ApiFailure {
        let message = message.into();
        crate::failure_log::answered(status, error, &message);
        ApiFailure {
            status,
            body: ApiError {
                error,
                field: None,
                message,
            },
        }
    }

    fn about_field(status: StatusCode, error: ErrorCode, e: FieldError) -> ApiFailure {
        ApiFailure {
            status,
            body: ApiError {
                error,
                message: format!("{}: {}", e.field, e.reason),
                field: Some(e.field),
            },
        }
    }

    /// The HTTP answer to a decision that could not be made: [`ApiFailure::store`] for a store
    /// failure, 503 `deadline_exceeded` for a missed deadline (the caller applies its failure
    /// mode either way).
    pub fn decide(e: &DecideError) -> ApiFailure {
        match e {
            DecideError::Store(e) => ApiFailure::store(e),
            DecideError::Deadline(miss) => ApiFailure::new(
                StatusCode::SERVICE_UNAVAILABLE,
                ErrorCode::DeadlineExceeded,
                miss.to_string(),
            ),
        }
    }

    /// 400 `invalid_request` naming the field at fault.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> ApiFailure {
        ApiFailure::from_request_error(FieldError::new(field, message))
    }

    /// 400 `invalid_request` from a core validation or parse error.
    pub fn from_request_error(e: FieldError) -> ApiFailure {
        ApiFailure::about_field(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, e)
    }

    /// 400 `invalid_rule` from a rule validation error.
    pub fn invalid_rule(e: FieldError) -> ApiFailure {
        ApiFailure::about_field(StatusCode::BAD_REQUEST, ErrorCode::InvalidRule, e)
    }

    /// 404 `unknown_action`: no rule for the action.
    pub fn unknown_action(action: &str) -> ApiFailure {
        ApiFailure {
            status: StatusCode::NOT_FOUND,
            body: ApiError {
                error: ErrorCode::UnknownAction,
                field: Some("action".into()),
                message: format!("no rule for action {action:?}; add one with PUT /v1/rules/{action} on the admin API"),
            },
        }
    }

    /// 401 `unauthorized`.
    pub fn unauthorized(message: &str) -> ApiFailure {
        ApiFailure::new(StatusCode::UNAUTHORIZED, ErrorCode::Unauthorized, message)
    }

    /// 404 `not_found` for a route that does not exist on this listener.
    pub fn no_route(path: &str) -> ApiFailure {
        ApiFailure::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("no route {path} on this listener"),
        )
    }

    /// The answer for a failed store call: 503 for outages (retry elsewhere or later), 500 for
    /// data or scripts sluice cannot use (retrying will not help, and the filter must not mistake
    /// it for an outage).
    pub fn store(e: &StoreError) -> ApiFailure {
        let status = if e.is_transient() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        let code = e.code();
        ApiFailure::new(status, code, e.to_string())
    }
}

impl IntoResponse for ApiFailure {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}
