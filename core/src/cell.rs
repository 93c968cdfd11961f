//! redis-cell `CL.THROTTLE key max_burst count period [quantity]` compatibility: argument
//! validation and the 5-tuple reply, over [`crate::algorithms::gcra`].
//!
//! Deliberate differences from redis-cell, each answered with a clear validation error instead:
//! a negative quantity (redis-cell treats it as a refund), a burst that takes longer than 90 days
//! to drain (redis-cell overflows beyond ~292 years; our Lua twin needs values below 2^53 ns), and
//! zero count or period (redis-cell errors too). Keys of any bytes are accepted (redis-cell aborts
//! the whole redis-server on non-UTF-8 keys or keys of the wrong type).

use crate::decision::Decision;
use crate::limits::{MAX_HORIZON_NS, MAX_QUANTITY};
use crate::params::MeterParams;
use crate::rule::RuleError;
use crate::time::{cell_secs, NANOS_PER_SEC};

/// Validated `CL.THROTTLE` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellArgs {
    /// GCRA parameters: T = period / count, capacity = max_burst + 1.
    pub params: MeterParams,
    /// Units asked for.
    pub quantity: u64,
}

impl CellArgs {
    /// Validates the arguments, naming the field at fault.
    pub fn new(
        max_burst: u64,
        count: u64,
        period_s: u64,
        quantity: u64,
    ) -> Result<CellArgs, RuleError> {
        if count == 0 {
            return Err(RuleError::new("count", "must be at least 1"));
        }
        if period_s == 0 {
            return Err(RuleError::new("period", "must be at least 1 second"));
        }
        if quantity > MAX_QUANTITY {
            return Err(RuleError::new(
                "quantity",
                format!("must be at most {MAX_QUANTITY}"),
            ));
        }
        let period_ns = u128::from(period_s) * u128::from(NANOS_PER_SEC);
        let interval = period_ns / u128::from(count);
        if interval == 0 {
            return Err(RuleError::new(
                "count",
                "more than one per nanosecond; use a longer period",
            ));
        }
        let capacity = u128::from(max_burst) + 1;
        if interval * capacity > u128::from(MAX_HORIZON_NS) {
            return Err(RuleError::new(
                "max_burst",
                "a full burst would take over 90 days to drain (sluice's limit; redis-cell overflows at ~292 years)",
            ));
        }
        Ok(CellArgs {
            params: MeterParams {
                interval: interval as u64,
                capacity: capacity as u64,
            },
            quantity,
        })
    }
}

/// The redis-cell reply `[limited, limit, remaining, retry_after_s, reset_after_s]`, with its
/// rounding: whole seconds plus one when at least a millisecond is left over; -1 retry when
/// allowed or never satisfiable.
pub fn reply(decision: &Decision) -> [i64; 5] {
    let secs = |ns: u64| i64::try_from(cell_secs(ns)).unwrap_or(i64::MAX);
    [
        i64::from(!decision.allowed),
        i64::try_from(decision.capacity).unwrap_or(i64::MAX),
        i64::try_from(decision.remaining).unwrap_or(i64::MAX),
        decision.retry_after.map_or(-1, secs),
        secs(decision.reset_after),
    ]
}
