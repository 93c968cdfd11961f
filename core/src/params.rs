//! Algorithm parameters derived from a validated rule, in the integer units the maths uses.

use crate::algorithms::{
    fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
};
use crate::decision::Decision;
use crate::rule::{Algorithm, Limit, Rule};
use crate::state::State;
use crate::time::{Nanos, NANOS_PER_MILLI};

/// Parameters of the continuous meters (gcra, leaky_bucket, token_bucket).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MeterParams {
    /// Emission interval T in nanoseconds: period / count, truncated (at least 1).
    pub interval: u64,
    /// Requests that may pass back to back from idle (redis-cell's max_burst + 1).
    pub capacity: u64,
}

impl MeterParams {
    /// T × capacity: the burst tolerance, i.e. how long a full funnel takes to drain.
    pub fn tolerance(self) -> u64 {
        self.interval.saturating_mul(self.capacity)
    }

    /// T × quantity, saturating (a quantity beyond capacity can never pass anyway).
    pub fn increment(self, quantity: u64) -> u64 {
        self.interval.saturating_mul(quantity)
    }
}

/// Parameters of the window algorithms (fixed_window, sliding_log, sliding_window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WindowParams {
    /// Window length in whole milliseconds; windows are aligned to the Unix epoch.
    pub window_ms: u64,
    /// Requests allowed per window.
    pub capacity: u64,
}

impl WindowParams {
    /// Window length in nanoseconds.
    pub fn window_ns(self) -> u64 {
        self.window_ms * NANOS_PER_MILLI
    }
}

/// One algorithm with its parameters: everything needed to decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Params {
    /// See [`fixed_window`].
    FixedWindow(WindowParams),
    /// See [`sliding_log`].
    SlidingLog(WindowParams),
    /// See [`sliding_window`].
    SlidingWindow(WindowParams),
    /// See [`leaky_bucket`].
    LeakyBucket(MeterParams),
    /// See [`gcra`].
    Gcra(MeterParams),
    /// See [`token_bucket`].
    TokenBucket(MeterParams),
}

impl Params {
    /// The parameters a rule stands for.
    pub fn of(rule: &Rule) -> Params {
        rule.params()
    }

    /// Parameters for an algorithm with its capacity and limit; `None` when the limit kind does
    /// not fit the algorithm (a rate for a window algorithm, or the reverse).
    pub fn from_parts(algorithm: Algorithm, capacity: u64, limit: Limit) -> Option<Params> {
        let meter = |interval| MeterParams { interval, capacity };
        let window = |window_ms| WindowParams {
            window_ms,
            capacity,
        };
        Some(match (algorithm, limit) {
            (Algorithm::Gcra, Limit::Rate(r)) => Params::Gcra(meter(r.emission_interval_ns())),
            (Algorithm::LeakyBucket, Limit::Rate(r)) => {
                Params::LeakyBucket(meter(r.emission_interval_ns()))
            }
            (Algorithm::TokenBucket, Limit::Rate(r)) => {
                Params::TokenBucket(meter(r.emission_interval_ns()))
            }
            (Algorithm::FixedWindow, Limit::Window(w)) => Params::FixedWindow(window(w.millis())),
            (Algorithm::SlidingLog, Limit::Window(w)) => Params::SlidingLog(window(w.millis())),
            (Algorithm::SlidingWindow, Limit::Window(w)) => {
                Params::SlidingWindow(window(w.millis()))
            }
            _ => return None,
        })
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        match self {
            Params::FixedWindow(_) => Algorithm::FixedWindow,
            Params::SlidingLog(_) => Algorithm::SlidingLog,
            Params::SlidingWindow(_) => Algorithm::SlidingWindow,
            Params::LeakyBucket(_) => Algorithm::LeakyBucket,
            Params::Gcra(_) => Algorithm::Gcra,
            Params::TokenBucket(_) => Algorithm::TokenBucket,
        }
    }

    /// Requests that may pass back to back from idle.
    pub fn capacity(&self) -> u64 {
        match self {
            Params::FixedWindow(w) | Params::SlidingLog(w) | Params::SlidingWindow(w) => w.capacity,
            Params::LeakyBucket(m) | Params::Gcra(m) | Params::TokenBucket(m) => m.capacity,
        }
    }

    /// The `w` of the quota policy headers: the window, or for a meter the time a full funnel
    /// takes to drain (capacity requests per that span).
    pub fn policy_window_ns(&self) -> Nanos {
        match self {
            Params::FixedWindow(w) | Params::SlidingLog(w) | Params::SlidingWindow(w) => {
                w.window_ns()
            }
            Params::LeakyBucket(m) | Params::Gcra(m) | Params::TokenBucket(m) => m.tolerance(),
        }
    }

    /// How long an idle key's state stays meaningful: after this, a stored state equals a fresh
    /// one, so the store may expire it.
    pub fn idle_ttl_ns(&self) -> Nanos {
        match self {
            Params::FixedWindow(w) | Params::SlidingLog(w) => w.window_ns(),
            Params::SlidingWindow(w) => 2 * w.window_ns(),
            Params::LeakyBucket(m) | Params::Gcra(m) | Params::TokenBucket(m) => m.tolerance(),
        }
    }

    /// Decides one request of `quantity` at `now` from `state`. A state of another algorithm
    /// (the rule changed) counts as fresh. Quantity 0 peeks: it reports without changing state.
    /// Whenever nothing is admitted (a denial or a peek) the returned state is `state` itself.
    pub fn decide(&self, state: &State, now: Nanos, quantity: u64) -> (Decision, State) {
        let (decision, next) = self.transition(state, now, quantity);
        if !decision.allowed || quantity == 0 {
            // Nothing was admitted: hand back the input itself, so that a fresh key (or the state
            // of another algorithm) stays exactly what it was instead of becoming an equivalent
            // default of this algorithm.
            return (decision, state.clone());
        }
        (decision, next)
    }

    fn transition(&self, state: &State, now: Nanos, quantity: u64) -> (Decision, State) {
        match (self, state) {
            (Params::Gcra(p), State::Gcra(s)) => {
                wrap(gcra::decide(*p, *s, now, quantity), State::Gcra)
            }
            (Params::Gcra(p), _) => wrap(
                gcra::decide(*p, Default::default(), now, quantity),
                State::Gcra,
            ),
            (Params::LeakyBucket(p), State::LeakyBucket(s)) => wrap(
                leaky_bucket::decide(*p, *s, now, quantity),
                State::LeakyBucket,
            ),
            (Params::LeakyBucket(p), _) => wrap(
                leaky_bucket::decide(*p, Default::default(), now, quantity),
                State::LeakyBucket,
            ),
            (Params::TokenBucket(p), State::TokenBucket(s)) => wrap(
                token_bucket::decide(*p, *s, now, quantity),
                State::TokenBucket,
            ),
            (Params::TokenBucket(p), _) => wrap(
                token_bucket::decide(*p, token_bucket::TokenState::full(*p), now, quantity),
                State::TokenBucket,
            ),
            (Params::FixedWindow(p), State::FixedWindow(s)) => wrap(
                fixed_window::decide(*p, *s, now, quantity),
                State::FixedWindow,
            ),
            (Params::FixedWindow(p), _) => wrap(
                fixed_window::decide(*p, Default::default(), now, quantity),
                State::FixedWindow,
            ),
            (Params::SlidingLog(p), State::SlidingLog(s)) => {
                wrap(sliding_log::decide(*p, s, now, quantity), State::SlidingLog)
            }
            (Params::SlidingLog(p), _) => wrap(
                sliding_log::decide(*p, &Default::default(), now, quantity),
                State::SlidingLog,
            ),
            (Params::SlidingWindow(p), State::SlidingWindow(s)) => wrap(
                sliding_window::decide(*p, *s, now, quantity),
                State::SlidingWindow,
            ),
            (Params::SlidingWindow(p), _) => wrap(
                sliding_window::decide(*p, Default::default(), now, quantity),
                State::SlidingWindow,
            ),
        }
    }
}

fn wrap<S>(result: (Decision, S), into: fn(S) -> State) -> (Decision, State) {
    (result.0, into(result.1))
}
