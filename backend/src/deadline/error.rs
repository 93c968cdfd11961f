//! Why a decision was not made: its store step failed, or its caller's deadline left no time.
//! How each way in answers it is its own (`crate::http::error::ApiFailure::decide`, a gRPC
//! status in `crate::grpc::rls`).

use crate::store::StoreError;

/// A decision that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    /// The store step failed (or outlived the store deadline).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The caller's deadline passed, or would have before the store could answer.
    #[error(transparent)]
    Deadline(#[from] Miss),
}

/// How a decision missed its caller's deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Miss {
    /// No store step was started: nothing was debited.
    #[error(
        "the caller's deadline leaves {remaining_us} us, and the store has recently taken \
         {estimate_us} us: no store step was started, nothing was debited"
    )]
    NotStarted {
        /// Time left, in microseconds.
        remaining_us: u64,
        /// The store's recent latency, in microseconds.
        estimate_us: u64,
    },
    /// The store step was started and had not answered by the deadline; it is left to finish,
    /// and a debit it makes is counted as late (`sluice_late_debits_total`).
    #[error(
        "the store did not answer within the caller's deadline ({waited_us} us); the step \
         finishes on its own and a debit it makes is counted in sluice_late_debits_total"
    )]
    Late {
        /// How long this request waited for it, in microseconds.
        waited_us: u64,
    },
}

/// Microseconds of `d`, saturating.
pub(crate) fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
