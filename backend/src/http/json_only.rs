//! Refuses a state-changing request (POST, PUT, PATCH) whose body is not declared JSON with a 415
//! naming the type expected ([`sluice_core::wire::is_json_content_type`] says why: no cross-site
//! page may make a browser decide, commit, report or change a rule). Layered on the decision and
//! admin routers, and on the peer's `POST /json`, which answers in its own plain-text shape.

use axum::extract::Request;
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sluice_core::wire::{is_json_content_type, unsupported_media_type_message, ErrorCode};

use super::error::ApiFailure;
use super::peer::text::text_error;

/// The 415 message for `request`, or `None` when it may pass (not state-changing, or JSON).
fn refusal(request: &Request) -> Option<String> {
    if !matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH
    ) {
        return None;
    }
    let got = request
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    if got.as_deref().is_some_and(is_json_content_type) {
        return None;
    }
    Some(unsupported_media_type_message(
        request.method().as_str(),
        request.uri().path(),
        got.as_deref(),
    ))
}

/// The JSON API's layer: a JSON `unsupported_media_type` error.
pub async fn require_json(request: Request, next: Next) -> Response {
    match refusal(&request) {
        None => next.run(request).await,
        Some(message) => ApiFailure {
            body: sluice_core::wire::ApiError {
                field: Some("content-type".to_owned()),
                ..ApiFailure::new(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    ErrorCode::UnsupportedMediaType,
                    message,
                )
                .body
            },
            status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        }
        .into_response(),
    }
}

/// The peer surface's layer: the same refusal as Go's `http.Error` text.
pub async fn require_json_text(request: Request, next: Next) -> Response {
    match refusal(&request) {
        None => next.run(request).await,
        Some(message) => text_error(StatusCode::UNSUPPORTED_MEDIA_TYPE, &message),
    }
}
