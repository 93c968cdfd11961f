//! One log line for the cause of each kind of 5xx the backend answers, at most once per 10 s per
//! error code ([`LOG_EVERY`]), with the count since the previous line.
//!
//! Every 5xx body is built by [`crate::http::error::ApiFailure::new`], which calls [`answered`]:
//! the HTTP listeners, the decision exchange (it answers through the decision router) and the
//! rate limit service (its `UNAVAILABLE` / `INTERNAL` come from `ApiFailure::store`) all pass
//! through it, so no path can answer a 5xx without its cause reaching the log. ERROR for 500s
//! (a script, data sluice cannot read, a bug: someone must act), WARN for the rest (503s: an
//! outage or overload that may pass on its own).

use std::sync::LazyLock;

use axum::http::StatusCode;
use sluice_core::wire::ErrorCode;

use crate::log_limit::{LogLimit, LOG_EVERY};

/// Per process: the limit is about what one log receives.
static ANSWERED: LazyLock<LogLimit> = LazyLock::new(|| LogLimit::new(LOG_EVERY));

/// Records a `status` answer with `code` and `message`; logs it unless the same code was logged
/// within the last [`LOG_EVERY`]. Statuses below 500 are ignored.
pub fn answered(status: StatusCode, code: ErrorCode, message: &str) {
    if !status.is_server_error() {
        return;
    }
    let code = code.as_str();
    let Some(count) = ANSWERED.admit(code) else {
        return;
    };
    let status = status.as_u16();
    let every = LOG_EVERY.as_secs();
    if status == 500 {
        tracing::error!(status, code, count, "answered {status} {code}: {message} ({count} such answers since the last line; at most one line per {every} s)");
    } else {
        tracing::warn!(status, code, count, "answered {status} {code}: {message} ({count} such answers since the last line; at most one line per {every} s)");
    }
}
