//! What went wrong talking to a store, and its one classification: whether the failure is
//! transient (the store is down, slow, shedding or full: retry later or elsewhere, a 503 and
//! `UNAVAILABLE`, and the rule cache keeps serving) or an answer sluice cannot use (foreign or
//! corrupt data, a failing script: retrying will not help, a 500 and `INTERNAL`), the error code
//! the APIs answer, and the metric label. Every caller that sorts store errors asks here, as
//! limitador's storage error says whether it is transient.

use sluice_core::wire::ErrorCode;

/// What went wrong talking to the store. A denial is never an error: it is a
/// [`sluice_core::Decision`].
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or refused the command (connection refused, reset, ...).
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The store did not answer within the configured timeout.
    #[error("store timed out after {0} ms")]
    Timeout(u64),
    /// The store refused a write for lack of memory (Redis `OOM` under `maxmemory` with a policy
    /// that cannot evict). Not an outage: the fix is sizing or the eviction policy.
    #[error("store full: {0}")]
    Full(String),
    /// Too many requests are already waiting on the store; shed rather than queue.
    #[error("store overloaded: {0} requests already in flight")]
    Overloaded(usize),
    /// A key holds data sluice did not write (another Redis type, or garbage).
    #[error(
        "key {key} holds data sluice cannot read ({detail}); delete it or pick another key prefix"
    )]
    WrongType {
        /// The Redis key at fault.
        key: String,
        /// What the store said.
        detail: String,
    },
    /// Stored data (a rule, a counter) could not be parsed.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The store answered, and its answer is an error of sluice's own step: a Lua script that
    /// raised an error, was given an argument it cannot use, called a command this Redis lacks,
    /// or returned a reply of the wrong shape. Not an outage: retrying or failing open would only
    /// hide it, so it is a 500 naming the script, not a 503.
    #[error("the Redis script {script} failed: {message}")]
    Script {
        /// The script, as in `backend/lua/<script>.lua` (`gcra`, `rules_write`, ...).
        script: &'static str,
        /// What Redis said.
        message: String,
    },
}

impl StoreError {
    /// Whether the failure is the store's state of the moment (unreachable, timed out,
    /// overloaded, full), so a retry later or elsewhere may succeed and a filter may apply its
    /// failure mode; `false` when the store answered with something sluice cannot use (wrong
    /// type, corrupt data, a failing script), which no retry fixes.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Unavailable(_)
            | StoreError::Timeout(_)
            | StoreError::Overloaded(_)
            | StoreError::Full(_) => true,
            StoreError::WrongType { .. } | StoreError::Corrupt(_) | StoreError::Script { .. } => {
                false
            }
        }
    }

    /// The error code the HTTP and gRPC APIs answer with.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::Unavailable(_) => ErrorCode::StoreUnavailable,
            StoreError::Timeout(_) => ErrorCode::StoreTimeout,
            StoreError::Overloaded(_) => ErrorCode::Overloaded,
            StoreError::Full(_) => ErrorCode::StoreFull,
            StoreError::WrongType { .. } => ErrorCode::StoreWrongType,
            StoreError::Corrupt(_) => ErrorCode::StoreCorrupt,
            StoreError::Script { .. } => ErrorCode::StoreScriptError,
        }
    }

    /// The `kind` label of `sluice_store_errors_total`.
    pub fn metric_kind(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Timeout(_) => "timeout",
            StoreError::Overloaded(_) => "overloaded",
            StoreError::Full(_) => "full",
            StoreError::WrongType { .. } => "wrong_type",
            StoreError::Corrupt(_) => "corrupt",
            StoreError::Script { .. } => "script",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn every() -> Vec<StoreError> {
        vec![
            StoreError::Unavailable("refused".into()),
            StoreError::Timeout(500),
            StoreError::Overloaded(9),
            StoreError::Full("OOM".into()),
            StoreError::WrongType {
                key: "k".into(),
                detail: "WRONGTYPE".into(),
            },
            StoreError::Corrupt("x".into()),
            StoreError::Script {
                script: "gcra",
                message: "ERR".into(),
            },
        ]
    }

    #[test]
    fn outages_are_transient_and_unusable_answers_are_not() {
        let transient: Vec<&str> = every()
            .iter()
            .filter(|e| e.is_transient())
            .map(StoreError::metric_kind)
            .collect();
        assert_eq!(transient, ["unavailable", "timeout", "overloaded", "full"]);
    }

    #[test]
    fn each_error_has_its_own_code_and_metric_kind() {
        let errors = every();
        let codes: std::collections::BTreeSet<&str> =
            errors.iter().map(|e| e.code().as_str()).collect();
        let kinds: std::collections::BTreeSet<&str> =
            errors.iter().map(StoreError::metric_kind).collect();
        assert_eq!((codes.len(), kinds.len()), (errors.len(), errors.len()));
        assert_eq!(StoreError::Full("OOM".into()).code().as_str(), "store_full");
    }
}
