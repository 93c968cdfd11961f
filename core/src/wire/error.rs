//! The error body of every non-2xx answer, and the closed set of codes it carries.

use serde::{Deserialize, Serialize};

/// A stable, machine-readable reason for a refusal or a failure. Clients branch on this (the
/// filter on `unknown_action`, the dashboard on `unauthorized` and `invalid_rule`), never on the
/// message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// 400 (413 for a body over the limit): the request itself is malformed; `field` names it.
    InvalidRequest,
    /// 400: a rule was refused; `field` names the rule field at fault.
    InvalidRule,
    /// 404: no rule exists for the action.
    UnknownAction,
    /// 401: no admin token or session, or a wrong one.
    Unauthorized,
    /// 429: too many failed admin sign-ins from the caller's address; `Retry-After` says when
    /// it may try a token again (a session cookie it already holds still works).
    TooManySignIns,
    /// 404: no such route on this listener.
    NotFound,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 415: a state-changing request whose body is not declared JSON (`Content-Type:
    /// application/json`); the message names the type expected and the one sent.
    UnsupportedMediaType,
    /// 421: the request reached a listener that does not speak its protocol (a gRPC call on the
    /// HTTP decision listener, an HTTP/1.1 request on the gRPC listener); the message names the
    /// listener that does. A misconfigured cluster, never a reason to pass requests quietly.
    WrongListener,
    /// 503: the store cannot be reached.
    StoreUnavailable,
    /// 503: the store did not answer in time.
    StoreTimeout,
    /// 503: too many store calls in flight on this replica.
    Overloaded,
    /// 503: the caller's `timeout_ms` left no time for the store step, so none was started and
    /// nothing was debited; the caller has given up (or is about to) and applies its failure mode.
    DeadlineExceeded,
    /// 503: the store refused to write because it is out of memory (Redis `OOM` under
    /// `maxmemory` with `noeviction`). Distinct from an outage: the fix is sizing, not restarts.
    StoreFull,
    /// 500: a store key holds a value of the wrong type (written by something else).
    StoreWrongType,
    /// 500: stored data sluice cannot read.
    StoreCorrupt,
    /// 500: a store script failed; the message names the script. Not an outage: retrying
    /// elsewhere will not help, so it must not look like one.
    StoreScriptError,
    /// 500: anything else that went wrong inside the backend.
    Internal,
    /// A code this build does not know (sent by a newer backend). Never sent by the backend.
    #[serde(other)]
    Unrecognized,
}

impl ErrorCode {
    /// The code as it appears on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidRule => "invalid_rule",
            ErrorCode::UnknownAction => "unknown_action",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::TooManySignIns => "too_many_sign_ins",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::WrongListener => "wrong_listener",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::StoreTimeout => "store_timeout",
            ErrorCode::Overloaded => "overloaded",
            ErrorCode::DeadlineExceeded => "deadline_exceeded",
            ErrorCode::StoreFull => "store_full",
            ErrorCode::StoreWrongType => "store_wrong_type",
            ErrorCode::StoreCorrupt => "store_corrupt",
            ErrorCode::StoreScriptError => "store_script_error",
            ErrorCode::Internal => "internal",
            ErrorCode::Unrecognized => "unrecognized",
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

fn unrecognized() -> ErrorCode {
    ErrorCode::Unrecognized
}

/// Body of a 4xx/5xx from the backend: a stable code, the field at fault if any, and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApiError {
    /// What kind of refusal or failure this is.
    #[serde(default = "unrecognized")]
    pub error: ErrorCode,
    /// The field at fault, when one is (`body` for unreadable JSON, dotted for nested fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// What went wrong and how to fix it.
    #[serde(default)]
    pub message: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case_on_the_wire_and_as_str_agrees() {
        for code in [
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidRule,
            ErrorCode::UnknownAction,
            ErrorCode::Unauthorized,
            ErrorCode::NotFound,
            ErrorCode::MethodNotAllowed,
            ErrorCode::UnsupportedMediaType,
            ErrorCode::WrongListener,
            ErrorCode::StoreUnavailable,
            ErrorCode::StoreTimeout,
            ErrorCode::Overloaded,
            ErrorCode::DeadlineExceeded,
            ErrorCode::StoreFull,
            ErrorCode::StoreWrongType,
            ErrorCode::StoreCorrupt,
            ErrorCode::StoreScriptError,
            ErrorCode::Internal,
        ] {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::from(code.as_str()));
            assert_eq!(serde_json::from_value::<ErrorCode>(json).unwrap(), code);
        }
    }

    #[test]
    fn a_code_from_a_newer_backend_still_parses() {
        let e: ApiError =
            serde_json::from_str(r#"{"error": "quota_on_fire", "message": "x"}"#).unwrap();
        assert_eq!(e.error, ErrorCode::Unrecognized);
    }
}
