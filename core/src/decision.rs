//! The answer of one throttle call. A denial is a value, not an error.

use crate::time::Nanos;

/// What an algorithm decided for one request, and where the key stands afterwards.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    /// Whether the request may pass (before shadow mode is applied).
    pub allowed: bool,
    /// Requests that may pass back to back from idle; reported as the limit.
    pub capacity: u64,
    /// Requests of quantity 1 that could pass right now, after this decision.
    pub remaining: u64,
    /// After a denial: how long until the same request would be allowed. `None` when allowed, or
    /// when the request can never pass (its quantity exceeds the capacity).
    pub retry_after: Option<Nanos>,
    /// How long until the key is back to idle (empty funnel, full quota).
    pub reset_after: Nanos,
    /// How full the funnel is, in requests (fractional for the continuous algorithms); between 0
    /// and `capacity` except after a rule shrank.
    pub level: f64,
}
