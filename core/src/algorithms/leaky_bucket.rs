//! The funnel: a level (stored as nanoseconds of drain time) that leaks continuously at the rate.
//!
//! One request adds T = period / count nanoseconds of level; the funnel holds T × capacity.
//! Leaking is continuous to the nanosecond, with none of the textbook version's "skip the leak
//! until a whole request has drained" quirk, so it admits exactly what gcra admits.
//!
//! A clock that steps back (now < last) is treated as no time passing: the level is as at `last`,
//! and `retry_after` / `reset_after` include the wait for the clock to get back to `last`.

use crate::decision::Decision;
use crate::params::MeterParams;
use crate::time::Nanos;

/// The funnel's level at a moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeakyState {
    /// Level in nanoseconds of drain time (requests × T).
    pub level: u64,
    /// When `level` was measured.
    pub last: Nanos,
}

impl LeakyState {
    /// The level at `now` in ns, leaked since `last` (as at `last` when the clock stepped back).
    /// What a decision and a commit read (the Lua twin: the prelude's `read_leaky`).
    pub fn level_at(self, now: Nanos) -> u64 {
        self.level.saturating_sub(now.saturating_sub(self.last))
    }
}

/// Decides one request.
pub fn decide(
    p: MeterParams,
    state: LeakyState,
    now: Nanos,
    quantity: u64,
) -> (Decision, LeakyState) {
    let interval = p.interval.max(1);
    let tolerance = p.tolerance();
    let need = p.increment(quantity);
    let current = state.level_at(now);
    // After a clock step back the level is as it was at `last`: every wait starts there.
    let catch_up = state.last.saturating_sub(now);
    let after = current.saturating_add(need);
    let allowed = after <= tolerance;
    let (level, retry_after, next) = if allowed {
        let next = if quantity == 0 {
            state
        } else {
            LeakyState {
                level: after,
                last: now.max(state.last),
            }
        };
        (after, None, next)
    } else {
        (
            current,
            (need <= tolerance).then(|| after - tolerance + catch_up),
            state,
        )
    };
    let decision = Decision {
        allowed,
        capacity: p.capacity,
        remaining: tolerance.saturating_sub(level) / interval,
        retry_after,
        reset_after: if level > 0 { level + catch_up } else { 0 },
        level: level as f64 / interval as f64,
    };
    (decision, next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaks_continuously_not_in_whole_requests() {
        // Capacity 2, one request per 1000 ns.
        let p = MeterParams {
            interval: 1000,
            capacity: 2,
        };
        let (_, s) = decide(p, LeakyState::default(), 10_000, 2);
        // 1 ns later the funnel is 1 ns short of full: a whole request does not fit...
        let (d, _) = decide(p, s, 10_001, 1);
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(999));
        // ...but the level already fell by a thousandth of a request.
        assert!((d.level - 1.999).abs() < 1e-9);
        let (d, s2) = decide(p, s, 11_000, 1);
        assert!(d.allowed);
        assert_eq!(s2.level, 2000);
    }
}
