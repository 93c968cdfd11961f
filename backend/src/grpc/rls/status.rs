//! How the RLS front door's failures reach Envoy: gRPC statuses whose message starts with the
//! error code the HTTP API would send (Envoy's `failure_mode_deny` decides on any of them).

use sluice_core::FieldError;
use tonic::Status;

use crate::deadline::DecideError;
use crate::http::error::ApiFailure;
use crate::store::StoreError;

/// Why a request got no answer, from either descriptor mapping.
#[derive(Debug)]
pub enum AnswerError {
    /// A field sluice refuses.
    Invalid(FieldError),
    /// The store could not decide.
    Decide(DecideError),
}

impl AnswerError {
    /// The status Envoy gets: [`invalid`] or [`decide_status`].
    pub fn status(self) -> Status {
        match self {
            AnswerError::Invalid(e) => invalid(e),
            AnswerError::Decide(e) => decide_status(&e),
        }
    }
}

/// A decision that could not be made: [`store_status`] for a store failure; `DEADLINE_EXCEEDED`
/// (message `deadline_exceeded: ...`) for a missed deadline (Envoy's `failure_mode_deny`
/// decides, as for any error).
pub fn decide_status(e: &DecideError) -> Status {
    match e {
        DecideError::Store(e) => store_status(e),
        DecideError::Deadline(miss) => Status::deadline_exceeded(format!(
            "{}: {miss}",
            sluice_core::wire::ErrorCode::DeadlineExceeded.as_str()
        )),
    }
}

/// `INVALID_ARGUMENT` whose message starts with the field at fault.
pub fn invalid(e: FieldError) -> Status {
    Status::invalid_argument(format!("{}: {}", e.field, e.reason))
}

/// A failed store call: `UNAVAILABLE` for outages (Envoy's `failure_mode_deny` decides),
/// `INTERNAL` for data or scripts sluice cannot use. The message starts with the error code the
/// HTTP API would send.
pub fn store_status(e: &StoreError) -> Status {
    let failure = ApiFailure::store(e);
    let message = format!("{}: {e}", failure.body.error.as_str());
    if failure.status == axum::http::StatusCode::SERVICE_UNAVAILABLE {
        Status::unavailable(message)
    } else {
        Status::internal(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_are_unavailable_or_internal_named_by_their_code() {
        for (e, code, name) in [
            (
                StoreError::Unavailable("refused".into()),
                tonic::Code::Unavailable,
                "store_unavailable",
            ),
            (
                StoreError::Timeout(500),
                tonic::Code::Unavailable,
                "store_timeout",
            ),
            (
                StoreError::Overloaded(9),
                tonic::Code::Unavailable,
                "overloaded",
            ),
            (
                StoreError::Full("OOM".into()),
                tonic::Code::Unavailable,
                "store_full",
            ),
            (
                StoreError::Corrupt("x".into()),
                tonic::Code::Internal,
                "store_corrupt",
            ),
            (
                StoreError::WrongType {
                    key: "k".into(),
                    detail: "d".into(),
                },
                tonic::Code::Internal,
                "store_wrong_type",
            ),
            (
                StoreError::Script {
                    script: "gcra",
                    message: "m".into(),
                },
                tonic::Code::Internal,
                "store_script_error",
            ),
        ] {
            let status = store_status(&e);
            assert_eq!(status.code(), code, "{e}");
            assert!(
                status.message().starts_with(&format!("{name}: ")),
                "{status:?}"
            );
        }
        let s = invalid(FieldError::new("domain", "must not be empty"));
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
        assert_eq!(s.message(), "domain: must not be empty");
    }
}
