//! What a throttle key's state is worth to rate limiting, so that a full memory store evicts
//! where the least is lost.
//!
//! Evicting a key never switches limiting off: its next request finds no state and starts fresh,
//! exactly as after a restart. What is lost is what the state was holding back: a key whose level
//! is L may pass up to L requests more than its rule allows, once (one extra burst), and then the
//! rule bites again. So the store evicts, among a few sampled keys, the one with the least at
//! stake: first any key already back to fresh (nothing at stake: dropping it changes no answer),
//! then the lowest level, and among equal levels the one that will be fresh soonest.
//!
//! Level first, not time until fresh alone: a fixed_window key that used its whole quota and one
//! that was seen once reset at the same window end, and a sliding_log key that burst its capacity
//! a while ago is fresh sooner than one admitted once just now; in both cases evicting the second
//! gives away one request, the first a whole burst.

use std::cmp::Ordering;

use sluice_core::{Decision, Nanos, Params};

/// What the last admission said about a key, kept with its state so a full store can rank keys
/// without their rule (which may have changed since).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Worth {
    /// Store time at which the state is back to fresh (the decision's `reset_after` from then).
    pub(crate) fresh_at: Nanos,
    /// The level right after that admission, in requests.
    level: f32,
    /// Requests per nanosecond the level drains by (meters: gcra, leaky_bucket, token_bucket);
    /// 0 for the windows, which hold their count (at most) until they reset.
    drain_per_ns: f32,
}

impl Worth {
    /// The worth of a state just written by an admission at `now` that decided `decision`.
    pub(crate) fn after(params: &Params, decision: &Decision, now: Nanos) -> Worth {
        let level = decision.level.max(0.0) as f32;
        let drains = matches!(
            params,
            Params::Gcra(_) | Params::LeakyBucket(_) | Params::TokenBucket(_)
        );
        let drain_per_ns = if drains && decision.reset_after > 0 {
            level / decision.reset_after as f32
        } else {
            0.0
        };
        Worth {
            fresh_at: now.saturating_add(decision.reset_after),
            level,
            drain_per_ns,
        }
    }

    /// Whether the state equals a fresh one at `now`: dropping it changes no answer.
    pub(crate) fn is_fresh(&self, now: Nanos) -> bool {
        self.fresh_at <= now
    }

    /// Requests an eviction at `now` could let through beyond the rule: the level as of `now`
    /// (exact for the meters, an upper bound for the windows).
    pub(crate) fn at_stake(&self, now: Nanos) -> f32 {
        if self.is_fresh(now) {
            return 0.0;
        }
        if self.drain_per_ns > 0.0 {
            let left = (self.fresh_at - now) as f32 * self.drain_per_ns;
            left.min(self.level)
        } else {
            self.level
        }
    }

    /// Eviction order at `now`: `Less` when `self` should go before `other` (less at stake, or
    /// as much and fresh sooner).
    pub(crate) fn evict_order(&self, other: &Worth, now: Nanos) -> Ordering {
        self.at_stake(now)
            .total_cmp(&other.at_stake(now))
            .then(self.fresh_at.cmp(&other.fresh_at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::testing::{params, S, T0};
    use sluice_core::State;

    /// Admits `n` requests at `at` from fresh; the worth of the resulting state.
    fn admitted(p: &Params, n: u64, at: Nanos) -> Worth {
        let mut state = State::Fresh;
        let mut worth = None;
        for _ in 0..n {
            let (d, next) = p.decide(&state, at, 1);
            assert!(d.allowed);
            state = next;
            worth = Some(Worth::after(p, &d, at));
        }
        worth.expect("at least one admission")
    }

    #[test]
    fn a_fresh_key_has_nothing_at_stake_and_goes_first() {
        let p = params(
            r#"{"action":"a","algorithm":"gcra","capacity":10,"rate":{"count":10,"period":"10s"}}"#,
        );
        let old = admitted(&p, 3, T0); // fresh again at T0 + 3 s
        let new = admitted(&p, 1, T0 + 10 * S);
        assert!(old.is_fresh(T0 + 3 * S) && !old.is_fresh(T0 + 3 * S - 1));
        assert_eq!(old.at_stake(T0 + 10 * S), 0.0);
        assert_eq!(old.evict_order(&new, T0 + 10 * S), Ordering::Less);
    }

    #[test]
    fn meters_drain_windows_hold_until_reset() {
        let meter = params(
            r#"{"action":"a","algorithm":"leaky_bucket","capacity":10,"rate":{"count":1,"period":"1s"}}"#,
        );
        let w = admitted(&meter, 10, T0);
        assert!((w.at_stake(T0) - 10.0).abs() < 1e-3);
        assert!((w.at_stake(T0 + 4 * S) - 6.0).abs() < 1e-3);
        assert_eq!(w.at_stake(T0 + 10 * S), 0.0);

        let window =
            params(r#"{"action":"a","algorithm":"fixed_window","capacity":10,"window":"60s"}"#);
        // Clock-aligned: T0 is a multiple of 60 s, so this window ends at T0 + 60 s.
        let w = admitted(&window, 4, T0);
        assert_eq!(w.at_stake(T0 + 59 * S), 4.0);
        assert_eq!(w.fresh_at, T0 + 60 * S);
        assert_eq!(w.at_stake(T0 + 60 * S), 0.0);
    }

    #[test]
    fn a_full_key_outranks_a_single_hit_even_when_it_resets_sooner() {
        // The brief's first idea, "smallest time until reset", would evict the full key here.
        let log = params(r#"{"action":"a","algorithm":"sliding_log","capacity":5,"window":"60s"}"#);
        let full = admitted(&log, 5, T0);
        let single = admitted(&log, 1, T0 + 30 * S);
        assert!(full.fresh_at < single.fresh_at);
        assert_eq!(single.evict_order(&full, T0 + 31 * S), Ordering::Less);

        let window =
            params(r#"{"action":"a","algorithm":"fixed_window","capacity":5,"window":"60s"}"#);
        let full = admitted(&window, 5, T0);
        let single = admitted(&window, 1, T0 + 30 * S);
        assert_eq!(full.fresh_at, single.fresh_at);
        assert_eq!(single.evict_order(&full, T0 + 31 * S), Ordering::Less);
    }

    #[test]
    fn equal_stakes_go_by_time_until_fresh() {
        let window =
            params(r#"{"action":"a","algorithm":"sliding_window","capacity":5,"window":"60s"}"#);
        let early = admitted(&window, 1, T0);
        let late = admitted(&window, 1, T0 + 60 * S);
        assert_eq!(early.at_stake(T0 + 61 * S), late.at_stake(T0 + 61 * S));
        assert_eq!(early.evict_order(&late, T0 + 61 * S), Ordering::Less);
        assert_eq!(late.evict_order(&early, T0 + 61 * S), Ordering::Greater);
    }
}
