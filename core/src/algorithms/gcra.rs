//! GCRA, with exactly redis-cell's `CL.THROTTLE` maths in integer nanoseconds.
//!
//! T = interval, tolerance = T × capacity, increment = T × quantity, tat = stored or now;
//! new_tat = max(now, tat) + increment; limited when now < new_tat − tolerance. On a limit nothing
//! is stored and retry_after = new_tat − tolerance − now (none when increment > tolerance).
//! remaining = ⌊(tolerance − ttl) / T⌋ with ttl = new_tat − now when allowed, tat − now when limited.
//!
//! Everything is computed relative to `now` (`ahead` = max(tat, now) − now), so no intermediate
//! exceeds tolerance + increment: with redis-cell's bounds (both below 2^63, see
//! [`crate::cell::CellArgs`]) nothing saturates, however far ahead the TAT lies, for any now up
//! to 2^63 ns (2262, where redis-cell's own times end). The Redis twin (backend/lua/gcra.lua)
//! follows the same steps.

use crate::decision::Decision;
use crate::params::MeterParams;
use crate::time::Nanos;

/// GCRA's only state: the theoretical arrival time of the next request, if any was stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcraState {
    /// Theoretical arrival time; `None` for a fresh key.
    pub tat: Option<Nanos>,
}

impl GcraState {
    /// How far the TAT lies ahead of `now` in ns: the meter's level (0 for a fresh key or a TAT
    /// in the past). What a decision and a commit read.
    pub fn ahead(self, now: Nanos) -> Nanos {
        self.tat.map_or(0, |tat| tat.saturating_sub(now))
    }
}

/// Decides one request. See the module docs for the maths.
///
/// ```
/// use sluice_core::algorithms::gcra::{decide, GcraState};
/// use sluice_core::time::NANOS_PER_SEC as S;
/// use sluice_core::MeterParams;
///
/// // One request per second (T = 1 s), bursts of 2.
/// let p = MeterParams { interval: S, capacity: 2 };
/// let (d, s) = decide(p, GcraState::default(), 1_000 * S, 2);
/// assert!(d.allowed);
/// assert_eq!(s.tat, Some(1_002 * S));
/// // Half a second later the burst is spent: the next request fits half a second on.
/// let (d, _) = decide(p, s, 1_000 * S + S / 2, 1);
/// assert_eq!((d.allowed, d.retry_after), (false, Some(S / 2)));
/// ```
pub fn decide(
    p: MeterParams,
    state: GcraState,
    now: Nanos,
    quantity: u64,
) -> (Decision, GcraState) {
    let tolerance = p.tolerance();
    let increment = p.increment(quantity);
    // How far the TAT lies ahead of now; a fresh key or a TAT in the past counts as now.
    let ahead = state.ahead(now);
    // new_tat − now: the ttl if this request is admitted.
    let after = ahead.saturating_add(increment);
    let allowed = after <= tolerance;
    let (ttl, retry_after, next) = if allowed {
        let next = if quantity == 0 {
            state
        } else {
            GcraState {
                tat: Some(now.saturating_add(after)),
            }
        };
        (after, None, next)
    } else {
        let retry = (increment <= tolerance).then(|| after - tolerance);
        (ahead, retry, state)
    };
    (report(p, allowed, ttl, retry_after), next)
}

/// The decision for a ttl (new_tat − now when allowed, max(tat − now, 0) when limited): the one
/// place remaining and level are derived, shared with the Redis store, whose script returns the
/// exact ttl and leaves this 64-bit division to Rust.
pub fn report(p: MeterParams, allowed: bool, ttl: Nanos, retry_after: Option<Nanos>) -> Decision {
    let interval = p.interval.max(1);
    Decision {
        allowed,
        capacity: p.capacity,
        remaining: p.tolerance().saturating_sub(ttl) / interval,
        retry_after,
        reset_after: ttl,
        level: ttl as f64 / interval as f64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NANOS_PER_SEC;

    const S: u64 = NANOS_PER_SEC;

    fn cell(max_burst: u64, count: u64, period_s: u64) -> MeterParams {
        MeterParams {
            interval: period_s * S / count,
            capacity: max_burst + 1,
        }
    }

    #[test]
    fn fresh_key_first_request_leaves_capacity_minus_one() {
        let (d, s) = decide(cell(15, 30, 60), GcraState::default(), 1000 * S, 1);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.reset_after), (15, 2 * S));
        assert_eq!(s.tat, Some(1002 * S));
    }

    #[test]
    fn a_denial_stores_nothing() {
        let p = cell(0, 30, 60);
        let (_, s) = decide(p, GcraState::default(), 0, 1);
        let (d, s2) = decide(p, s, 1, 1);
        assert!(!d.allowed);
        assert_eq!(s, s2);
        assert_eq!(d.retry_after, Some(2 * S - 1));
    }

    #[test]
    fn quantity_above_capacity_has_no_retry_after() {
        let (d, _) = decide(cell(15, 30, 60), GcraState::default(), 0, 17);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, None);
        assert_eq!(d.remaining, 16);
    }
}
