//! redis-cell `CL.THROTTLE key max_burst count period [quantity]` compatibility: argument
//! validation and the 5-tuple reply, over [`crate::algorithms::gcra`].
//!
//! redis-cell (brandur/redis-cell, `redis-cell-impl/src/lib.rs` and `redis-cell/src/lib.rs`)
//! reads its four numbers as i64 and works in i64 nanoseconds: T = `(period × 10^9) as f64 /
//! count as f64`, truncated; tolerance = T × (max_burst + 1); increment = T × quantity. sluice
//! accepts every argument list for which none of those overflows, and computes T with the same
//! double division (it differs from integer division by a nanosecond or more once period × 10^9
//! passes 2^53, e.g. 11 per year). What is refused, each naming the field:
//!
//! - a number above i64::MAX (redis-cell cannot parse it);
//! - count or period 0, or T < 1 ns (redis-cell: "zero rates are not supported");
//! - period × 10^9 > i64::MAX, i.e. period > 9,223,372,036 s (redis-cell's `as i64` wraps);
//! - T × (max_burst + 1) > i64::MAX: a burst taking over ~292 years to drain (the tolerance wraps);
//! - T × quantity > i64::MAX (the increment wraps).
//!
//! A negative quantity (a refund in redis-cell) cannot be expressed: the fields are unsigned.
//! Keys of any bytes are accepted (redis-cell aborts the whole redis-server on non-UTF-8 keys or
//! keys of the wrong type).

use crate::decision::Decision;
use crate::field_error::FieldError;
use crate::limits::{CELL_MAX_NS, CELL_MAX_PERIOD_S};
use crate::params::MeterParams;
use crate::time::{cell_secs, NANOS_PER_MICRO, NANOS_PER_SEC};

/// Validated `CL.THROTTLE` arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellArgs {
    /// GCRA parameters: T = period / count (as redis-cell divides), capacity = max_burst + 1.
    pub params: MeterParams,
    /// Units asked for.
    pub quantity: u64,
}

impl CellArgs {
    /// Validates the arguments, naming the field at fault. Refuses exactly what redis-cell
    /// overflows on (see the module docs).
    pub fn new(
        max_burst: u64,
        count: u64,
        period_s: u64,
        quantity: u64,
    ) -> Result<CellArgs, FieldError> {
        for (field, value) in [
            ("max_burst", max_burst),
            ("count", count),
            ("period", period_s),
            ("quantity", quantity),
        ] {
            if value > CELL_MAX_NS {
                return Err(FieldError::new(
                    field,
                    format!("must be at most {CELL_MAX_NS} (a 64-bit signed integer)"),
                ));
            }
        }
        if count == 0 {
            return Err(FieldError::new("count", "must be at least 1"));
        }
        if period_s == 0 {
            return Err(FieldError::new("period", "must be at least 1 second"));
        }
        if period_s > CELL_MAX_PERIOD_S {
            return Err(FieldError::new(
                "period",
                format!("must be at most {CELL_MAX_PERIOD_S} seconds (2^63 − 1 nanoseconds, where redis-cell overflows)"),
            ));
        }
        let interval = emission_interval(period_s, count);
        if interval == 0 {
            return Err(FieldError::new(
                "count",
                "more than one per nanosecond; use a longer period",
            ));
        }
        // max_burst ≤ i64::MAX, so this fits; a capacity of 2^63 overflows below, as in redis-cell.
        let capacity = max_burst + 1;
        if !fits(interval, capacity) {
            return Err(FieldError::new(
                "max_burst",
                "a full burst would take over 2^63 − 1 nanoseconds (~292 years) to drain, where redis-cell overflows",
            ));
        }
        if !fits(interval, quantity) {
            return Err(FieldError::new(
                "quantity",
                "quantity × period / count is over 2^63 − 1 nanoseconds (~292 years), where redis-cell overflows",
            ));
        }
        Ok(CellArgs {
            params: MeterParams { interval, capacity },
            quantity,
        })
    }

    /// The redis-cell reply for a decision on these arguments, exactly as redis-cell computes
    /// it, `remaining` included: redis-cell divides whole microseconds in doubles,
    /// `(tolerance − ttl)µs / Tµs`, which can exceed the true count when T is not a whole number
    /// of microseconds (and is i64::MAX, a division by zero, when T < 1 µs).
    pub fn reply(&self, decision: &Decision) -> [i64; 5] {
        let mut answer = reply(decision);
        answer[2] = self.cell_remaining(decision.reset_after);
        answer
    }

    /// redis-cell's `remaining` for a ttl (new_tat − now, or tat − now when limited).
    fn cell_remaining(&self, ttl: u64) -> i64 {
        let interval = i128::from(self.params.interval);
        let next = i128::from(self.params.tolerance()) - i128::from(ttl);
        if next <= -interval {
            return 0;
        }
        // `Duration::whole_microseconds` truncates toward zero; both are then divided as doubles.
        let micros = |ns: i128| (ns / i128::from(NANOS_PER_MICRO)) as f64;
        (micros(next) / micros(interval)) as i64
    }
}

/// redis-cell's emission interval: period in nanoseconds divided by count in doubles, truncated.
/// Equal to the integer quotient while period × 10^9 < 2^53; beyond, the double rounding shows.
/// The caller has checked period ≤ [`CELL_MAX_PERIOD_S`], so the product fits in i64.
fn emission_interval(period_s: u64, count: u64) -> u64 {
    let period_ns = period_s * NANOS_PER_SEC;
    (period_ns as f64 / count as f64) as u64
}

/// Whether a × b stays within redis-cell's i64 nanoseconds.
fn fits(a: u64, b: u64) -> bool {
    a.checked_mul(b)
        .is_some_and(|product| product <= CELL_MAX_NS)
}

/// The redis-cell reply `[limited, limit, remaining, retry_after_s, reset_after_s]`, with its
/// rounding: whole seconds plus one when at least a millisecond is left over; -1 retry when
/// allowed or never satisfiable. `remaining` is the exact count of the decision, which is
/// redis-cell's whenever T is a whole number of microseconds; [`CellArgs::reply`] gives
/// redis-cell's for every T.
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
