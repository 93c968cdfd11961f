//! The surface's plain-text answers, as Go's `net/http` writes them: the content type its
//! sniffing sets, and `http.Error`'s shape for failures.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

/// The content type of the surface's text answers.
pub const TEXT_PLAIN: &str = "text/plain; charset=utf-8";

/// A plain-text error as Go's `http.Error` writes it (`Bad Request` and a newline), with what
/// went wrong after the reason: `Bad Request: descriptors[0].entries[0].key: expected a string`.
pub fn text_error(status: StatusCode, detail: &str) -> Response {
    let reason = status.canonical_reason().unwrap_or("Error");
    (
        status,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static(TEXT_PLAIN)),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        format!("{reason}: {detail}\n"),
    )
        .into_response()
}
