//! How a failed admin API call is described to the operator (the model of `app/api.rs`).
//!
//! The bodies themselves are sluice-core's ([`sluice_core::wire`]): the page reads the very types
//! the backend writes. What is the dashboard's own is [`ServerError`], which also covers the
//! failures that never produce an [`ApiError`]: no answer at all, a proxy's HTML page, an answer
//! that cannot be read.

use sluice_core::wire::{ApiError, ErrorCode};

/// A call that did not succeed, described so that nothing is swallowed: the HTTP status (0 when
/// the request never got an answer), the backend's error code if it sent one, the field if any,
/// and a message to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// HTTP status, or 0 for a network failure.
    pub status: u16,
    /// The backend's error code; `None` when the answer was not the backend's error body (no
    /// answer, a proxy's page, an unreadable body), so the page never branches on a guess.
    pub code: Option<ErrorCode>,
    /// The rule field the server named, if any.
    pub field: Option<String>,
    /// A message a person can act on.
    pub message: String,
}

impl ServerError {
    /// Describes the backend's error body. An empty message still says what happened.
    pub fn from_api(status: u16, error: ApiError) -> ServerError {
        let message = if error.message.is_empty() {
            format!("{} (HTTP {status})", error.error)
        } else {
            error.message
        };
        ServerError {
            status,
            code: Some(error.error),
            field: error.field,
            message,
        }
    }

    /// Describes a non-2xx answer from its status and body text. A body that is not the
    /// backend's error JSON (a proxy's HTML page, an empty body) is still shown, shortened.
    pub fn from_response(status: u16, body: &str) -> ServerError {
        if let Ok(error) = serde_json::from_str::<ApiError>(body) {
            return ServerError::from_api(status, error);
        }
        let text = body.trim();
        let shown: String = text.chars().take(200).collect();
        let message = if shown.is_empty() {
            format!("the server answered HTTP {status} with no explanation")
        } else if shown.len() < text.len() {
            format!("the server answered HTTP {status}: {shown}…")
        } else {
            format!("the server answered HTTP {status}: {shown}")
        };
        ServerError {
            status,
            code: None,
            field: None,
            message,
        }
    }

    /// A request that got no answer at all (backend down, network gone).
    pub fn network(detail: &str) -> ServerError {
        ServerError {
            status: 0,
            code: None,
            field: None,
            message: format!("could not reach the sluice backend ({detail})"),
        }
    }

    /// A 2xx answer whose body is not what the contract says (a proxy in the way, a backend of
    /// another version): shown, not silently treated as empty.
    pub fn unreadable(status: u16, detail: &str) -> ServerError {
        ServerError {
            status,
            code: None,
            field: None,
            message: format!("the server's answer could not be read ({detail})"),
        }
    }

    /// Whether the session is missing or expired, so the page should ask for the token again.
    /// A bare 401 (a proxy's, without the backend's body) counts too.
    pub fn is_unauthorized(&self) -> bool {
        self.code == Some(ErrorCode::Unauthorized) || self.status == 401
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_rule_errors_keep_the_code_and_the_field() {
        let e = ServerError::from_response(
            400,
            r#"{"error":"invalid_rule","field":"capacity","message":"capacity: must be at least 1"}"#,
        );
        assert_eq!(e.field.as_deref(), Some("capacity"));
        assert_eq!(e.code, Some(ErrorCode::InvalidRule));
        assert_eq!(e.message, "capacity: must be at least 1");
    }

    #[test]
    fn an_error_without_a_message_still_says_what_happened() {
        let e = ServerError::from_response(503, r#"{"error":"store_timeout"}"#);
        assert_eq!(e.code, Some(ErrorCode::StoreTimeout));
        assert_eq!(e.message, "store_timeout (HTTP 503)");
    }

    #[test]
    fn a_code_from_a_newer_backend_is_kept_with_its_message() {
        let e =
            ServerError::from_response(429, r#"{"error":"quota_on_fire","message":"slow down"}"#);
        assert_eq!(e.code, Some(ErrorCode::Unrecognized));
        assert_eq!(e.message, "slow down");
    }

    #[test]
    fn a_non_json_error_is_shown_not_swallowed() {
        let e = ServerError::from_response(502, "<html>Bad gateway</html>");
        assert_eq!(e.code, None);
        assert!(
            e.message.contains("502") && e.message.contains("Bad gateway"),
            "{}",
            e.message
        );
        let empty = ServerError::from_response(500, "");
        assert!(empty.message.contains("500"));
        let long = ServerError::from_response(500, &"x".repeat(1000));
        assert!(long.message.len() < 300 && long.message.ends_with('…'));
        assert!(ServerError::unreadable(200, "expected value")
            .message
            .contains("expected value"));
    }

    #[test]
    fn unauthorized_is_known_by_its_code_or_a_bare_401() {
        let by_code =
            ServerError::from_response(401, r#"{"error":"unauthorized","message":"bad token"}"#);
        assert!(by_code.is_unauthorized());
        assert!(ServerError::from_response(401, "").is_unauthorized());
        let refused = ServerError::from_response(
            400,
            r#"{"error":"invalid_rule","field":"capacity","message":"no"}"#,
        );
        assert!(!refused.is_unauthorized());
        assert!(!ServerError::network("connection refused").is_unauthorized());
    }
}
