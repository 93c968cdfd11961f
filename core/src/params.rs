//! Algorithm parameters derived from a validated rule, in the integer units the maths uses.

use crate::algorithms::{
    fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket,
};
use crate::calendar::Calendar;
use crate::decision::Decision;
use crate::rule::{Algorithm, Limit};
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
    /// fixed_window only: windows aligned to the calendar (day, week, month at an offset from
    /// UTC, or in a named zone) instead of to the epoch; `window_ms` is then the longest such
    /// window (31 days for a month, 32 in a named zone), which bounds the state's idle TTL.
    pub calendar: Option<Calendar>,
}

impl WindowParams {
    /// Window length in nanoseconds (for a calendar, the longest window).
    pub fn window_ns(self) -> u64 {
        self.window_ms * NANOS_PER_MILLI
    }

    /// The window holding `now`: start and end in ns since the epoch. Epoch-aligned windows are
    /// [i × W, (i + 1) × W); calendar ones start at the day's, week's or month's midnight.
    pub fn bounds(self, now: Nanos) -> (Nanos, Nanos) {
        match self.calendar {
            Some(c) => c.bounds(now),
            None => {
                let w = self.window_ns();
                let start = now - now % w;
                (start, start + w)
            }
        }
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
    /// The same limit with room for one more unit: where envoyproxy/ratelimit's counter, which
    /// passes its limit, is kept one past it ([`crate::all::Part::PastTheLimit`]).
    pub fn one_past(self) -> Params {
        let window = |w: WindowParams| WindowParams {
            capacity: w.capacity.saturating_add(1),
            ..w
        };
        let meter = |m: MeterParams| MeterParams {
            capacity: m.capacity.saturating_add(1),
            ..m
        };
        match self {
            Params::FixedWindow(w) => Params::FixedWindow(window(w)),
            Params::SlidingLog(w) => Params::SlidingLog(window(w)),
            Params::SlidingWindow(w) => Params::SlidingWindow(window(w)),
            Params::LeakyBucket(m) => Params::LeakyBucket(meter(m)),
            Params::Gcra(m) => Params::Gcra(meter(m)),
            Params::TokenBucket(m) => Params::TokenBucket(meter(m)),
        }
    }

    /// Parameters for an algorithm with its capacity and limit; `None` when the limit kind does
    /// not fit the algorithm (a rate for a window algorithm, or the reverse).
    pub fn from_parts(algorithm: Algorithm, capacity: u64, limit: Limit) -> Option<Params> {
        let meter = |interval| MeterParams { interval, capacity };
        let window = |window_ms| WindowParams {
            window_ms,
            capacity,
            calendar: None,
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
            (Algorithm::FixedWindow, Limit::Calendar(c)) => Params::FixedWindow(WindowParams {
                calendar: Some(c),
                ..window(c.longest_ms())
            }),
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
    ///
    /// ```
    /// use sluice_core::time::NANOS_PER_SEC as S;
    /// use sluice_core::{Params, Rule, State};
    ///
    /// // 2 requests per minute in fixed windows aligned to the epoch.
    /// let rule = Rule::from_json_str(
    ///     r#"{"action": "login", "algorithm": "fixed_window", "capacity": 2, "window": "60s"}"#,
    /// )
    /// .unwrap();
    /// let params: Params = rule.params();
    /// // Times are ns since the epoch, passed in: 61 s is 1 s into the window [60 s, 120 s).
    /// let (d, state) = params.decide(&State::Fresh, 61 * S, 2);
    /// assert!(d.allowed);
    /// assert_eq!((d.remaining, d.reset_after), (0, 59 * S));
    /// // The third request of the window is denied until the window ends.
    /// let (d, same) = params.decide(&state, 90 * S, 1);
    /// assert_eq!((d.allowed, d.retry_after), (false, Some(30 * S)));
    /// assert_eq!(same, state, "a denial changes nothing");
    /// // The next window starts from 0.
    /// assert!(params.decide(&state, 120 * S, 2).0.allowed);
    /// ```
    pub fn decide(&self, state: &State, now: Nanos, quantity: u64) -> (Decision, State) {
        let (decision, change) = self.decide_change(state, now, quantity);
        // Nothing admitted: the input itself comes back, so a fresh key (or the state of another
        // algorithm) stays exactly what it was instead of becoming an equivalent default.
        (decision, change.unwrap_or_else(|| state.clone()))
    }

    /// Like [`Params::decide`], but `None` when nothing changes (a denial or a peek), so a store
    /// that keeps the state itself copies nothing on the denial path (which is the hot path under
    /// abuse, and a sliding log may hold 10,000 entries).
    pub fn decide_change(
        &self,
        state: &State,
        now: Nanos,
        quantity: u64,
    ) -> (Decision, Option<State>) {
        let (decision, next) = self.transition(state, now, quantity);
        let admitted = decision.allowed && quantity > 0;
        (decision, next.filter(|_| admitted))
    }

    /// Runs this algorithm's transition; a state of another algorithm (or none) counts as fresh.
    fn transition(&self, state: &State, now: Nanos, quantity: u64) -> (Decision, Option<State>) {
        match *self {
            Params::Gcra(p) => {
                let (d, next) = gcra::decide(p, state.gcra(), now, quantity);
                (d, Some(State::Gcra(next)))
            }
            Params::LeakyBucket(p) => {
                let (d, next) = leaky_bucket::decide(p, state.leaky_bucket(), now, quantity);
                (d, Some(State::LeakyBucket(next)))
            }
            Params::TokenBucket(p) => {
                let (d, next) = token_bucket::decide(p, state.token_bucket(p), now, quantity);
                (d, Some(State::TokenBucket(next)))
            }
            Params::FixedWindow(p) => {
                let (d, next) = fixed_window::decide(p, state.fixed_window(), now, quantity);
                (d, Some(State::FixedWindow(next)))
            }
            Params::SlidingLog(p) => {
                let (d, next) = sliding_log::decide(p, state.sliding_log(), now, quantity);
                (d, next.map(State::SlidingLog))
            }
            Params::SlidingWindow(p) => {
                let (d, next) = sliding_window::decide(p, state.sliding_window(), now, quantity);
                (d, Some(State::SlidingWindow(next)))
            }
        }
    }
}
