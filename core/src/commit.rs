//! Commit a reservation: the cost of a request is known only after its response, so the caller
//! reserved `reserved` units when the request came in (an ordinary throttle call) and now commits
//! the `actual` cost. When actual < reserved the difference is given back as far as it safely can
//! be; when actual > reserved the difference is debited, never denied (the response is already
//! out): what does not fit in the limit is the *overshoot*.
//!
//! # What each algorithm gives back
//!
//! A refund must never give back more than the limit would hold had the request reserved only
//! `actual` at `reserved_at` (the time its reservation was decided, store clock). Units taken long
//! ago may already have leaked or expired, and giving them back again would admit twice.
//!
//! - gcra, leaky_bucket, token_bucket: whole units `k = min(n, ⌊level / T⌋, n − ⌈dry / T⌉)`
//!   with n = min(reserved, capacity) − actual, level the meter's level now in ns, and
//!   dry = max(0, now − reserved_at − T × actual). Why the third term: had the request taken only
//!   its actual cost, the meter's level would be lower by T × n only until that emptier meter
//!   ran dry. Right after the reservation the real level was at least T × reserved, and it falls
//!   by at most 1 ns per ns, so the emptier meter cannot run dry before T × actual has passed;
//!   after that, at most `dry` of it can have been dry, so T × n − dry is surely still owed.
//!   (Example: 10 units reserved at t = 0 on a meter of 10 per 10 ns; it empties by t = 10,
//!   another request takes 10 at t = 10, then the first commits 0: giving back 10 would let 10
//!   more pass at t = 10, 30 units in 10 ns.) A commit soon after its reservation, or of an
//!   actual cost whose drain time covers the request's duration, gives back all of n.
//! - fixed_window: `min(n, count)`, only when `reserved_at`, now and the stored count are all in
//!   the same window (a reservation of a past window has expired with it).
//! - sliding_window: `min(n, current)`, only when `reserved_at`, now and the stored current
//!   counter are in the same window (units of the previous window still weigh, but only as a
//!   fraction the counters cannot split).
//! - sliding_log: removes up to n live entries, the newest of those not newer than `reserved_at`
//!   (the reservation's own entries, or older ones): never an entry of a later request, whose
//!   removal would let it be admitted again within its window. Removing an older entry instead
//!   of the reservation's own gives back less time, never more.
//!
//! A debit of m = actual − reserved is added to the limit's level whole (as an admission of m
//! would be, with no check): the part that does not fit under the limit is the *overshoot*, and
//! it is carried as **debt**, the level standing above the capacity, so that nothing is left
//! until the limit has paid it back (a meter drains it at its rate, a window's count ends with
//! its window, a sliding log's entries expire). Why: a debit that came while other reservations
//! still filled the budget would otherwise be forgotten, and the refunds landing after it would
//! hand out units that were already spent. The level carries at most [`carry_bound`] (what keeps
//! the Lua twins exact, core/src/limits.rs); a debit beyond it is dropped (never in practice: 100
//! days of a meter's drain, 14 million units of a window).
//!
//! # The bound
//!
//! Admissions never exceed the limit by more than what the latest commits debited beyond it:
//! reservations are admitted under the limit, refunds give back only what the limit would hold
//! without those units, and a debit is carried, so every later admission waits for it. The
//! overshoot of a commit is admitted over the limit once, never again. The times are the
//! store's (Redis `TIME`): a caller's `reserved_at` later than the truth makes a meter's refund
//! too large by up to that error (it is clamped to now).

use crate::algorithms::{
    fixed_window::FixedWindowState, gcra::GcraState, leaky_bucket::LeakyState,
    sliding_log::SlidingLogState, sliding_window::SlidingWindowState, token_bucket::TokenState,
};
use crate::limits::{MAX_CARRIED_COUNT, MAX_CARRIED_LEVEL_NS};
use crate::params::{MeterParams, Params, WindowParams};
use crate::state::State;
use crate::time::{Nanos, NANOS_PER_MILLI};

/// One commit of a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Units the request reserved when it came in.
    pub reserved: u64,
    /// Units it actually cost.
    pub actual: u64,
    /// When the reservation was decided (store clock, ns since the epoch).
    pub reserved_at: Nanos,
}

/// What a commit did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Committed {
    /// Units given back (at most reserved − actual; less when they had leaked or expired).
    pub refunded: u64,
    /// Units debited beyond the reservation (actual − reserved, or 0).
    pub debited: u64,
    /// The part of `debited` that did not fit in the limit: admitted over it, and carried as
    /// debt (the level stands above the capacity by it until paid back).
    pub overshoot: u64,
    /// The key's level after the commit, in units (as [`crate::Decision::level`]); above the
    /// capacity while the budget is in debt.
    pub level: f64,
}

/// The most a commit's debt may take a limit's level to, in the state's own unit: a meter's
/// level in ns (its tolerance, or [`MAX_CARRIED_LEVEL_NS`] when larger), a fixed or sliding
/// window's count ([`MAX_CARRIED_COUNT`], or the capacity when larger), a sliding log's entries
/// (twice the capacity: its carried entries all share one time, so any more would change
/// nothing but the figure; at most 20,000 entries). The Lua twin gets it as an argument.
pub fn carry_bound(params: &Params) -> u64 {
    match *params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => {
            m.tolerance().max(MAX_CARRIED_LEVEL_NS)
        }
        Params::FixedWindow(w) | Params::SlidingWindow(w) => w.capacity.max(MAX_CARRIED_COUNT),
        Params::SlidingLog(w) => w.capacity.saturating_mul(2),
    }
}

/// A meter's level at `now` in ns of drain time, debt included (gcra's tat − now, the funnel's
/// level, the bucket's used tokens plus the time its refill is held back); `None` for a window.
/// Its time to drain is when the budget is whole again.
pub fn meter_level_ns(params: &Params, state: &State, now: Nanos) -> Option<u64> {
    match (*params, state) {
        (Params::Gcra(_), State::Gcra(s)) => Some(s.ahead(now)),
        (Params::LeakyBucket(_), State::LeakyBucket(s)) => Some(s.level_at(now)),
        (Params::TokenBucket(p), State::TokenBucket(s)) => Some(token_level(p, *s, now)),
        (Params::Gcra(_) | Params::LeakyBucket(_) | Params::TokenBucket(_), _) => Some(0),
        _ => None,
    }
}

/// A token bucket's level in ns at `now`: the tokens used, plus the time until `last` when it
/// lies ahead (a bucket in debt is empty and refills only from then on, as its decisions read it:
/// `catch_up` in [`crate::algorithms::token_bucket`]).
fn token_level(p: MeterParams, s: TokenState, now: Nanos) -> u64 {
    (p.tolerance() - s.tokens_at(p, now)).saturating_add(s.last.saturating_sub(now))
}

/// What a commit asks of a key's state, whatever its algorithm.
#[derive(Debug, Clone, Copy)]
struct Ask {
    /// Units to give back as far as the state still holds them: min(reserved, capacity) − actual.
    refund: u64,
    /// Units to debit: actual − reserved.
    debit: u64,
    /// The actual cost.
    actual: u64,
    /// When the reservation was decided, never after now.
    reserved_at: Nanos,
    /// The most the level may carry ([`carry_bound`]).
    bound: u64,
}

/// Commits at `now`. Returns what was done and the new state (`None`: unchanged). A state of
/// another algorithm counts as fresh, as for a decision.
///
/// ```
/// use sluice_core::commit::{commit, Commit};
/// use sluice_core::time::NANOS_PER_SEC as S;
/// use sluice_core::{Params, Rule, State};
///
/// // A budget of 1,000 units a day.
/// let budget: Params = Rule::from_json_str(
///     r#"{"action": "llm_tokens", "algorithm": "fixed_window", "capacity": 1000, "window": "1d"}"#,
/// )
/// .unwrap()
/// .params();
/// // A request reserves 500 at 10 s; its response says it cost 120 at 12 s.
/// let (_, reserved) = budget.decide(&State::Fresh, 10 * S, 500);
/// let c = Commit { reserved: 500, actual: 120, reserved_at: 10 * S };
/// let (done, after) = commit(&budget, &reserved, 12 * S, c);
/// assert_eq!((done.refunded, done.debited, done.overshoot), (380, 0, 0));
/// // What was not used is there again for the next request.
/// let after = after.expect("changed");
/// assert_eq!(budget.decide(&after, 12 * S, 0).0.remaining, 880);
/// ```
pub fn commit(params: &Params, state: &State, now: Nanos, c: Commit) -> (Committed, Option<State>) {
    // No reservation holds more than the capacity (it would have been denied); a claim of more
    // gives back at most what one could hold.
    let ask = Ask {
        refund: c.reserved.min(params.capacity()).saturating_sub(c.actual),
        debit: c.actual.saturating_sub(c.reserved),
        actual: c.actual,
        reserved_at: c.reserved_at.min(now),
        bound: carry_bound(params),
    };
    match *params {
        Params::Gcra(p) => {
            let s = state.gcra();
            let (done, level) = meter(p, s.ahead(now), now, ask);
            let next = GcraState {
                tat: Some(now + level),
            };
            changed(done, s, next, State::Gcra)
        }
        Params::LeakyBucket(p) => {
            let s = state.leaky_bucket();
            let (done, level) = meter(p, s.level_at(now), now, ask);
            let next = LeakyState {
                level,
                last: now.max(s.last),
            };
            changed(done, s, next, State::LeakyBucket)
        }
        Params::TokenBucket(p) => {
            let s = state.token_bucket(p);
            let tol = p.tolerance();
            let (done, level) = meter(p, token_level(p, s, now), now, ask);
            // Debt: an empty bucket whose refill starts when the debt is paid back.
            let next = TokenState {
                tokens: tol.saturating_sub(level),
                last: now + level.saturating_sub(tol),
            };
            changed(done, s, next, State::TokenBucket)
        }
        Params::FixedWindow(p) => fixed_window(p, state.fixed_window(), now, ask),
        Params::SlidingWindow(p) => sliding_window(p, state.sliding_window(), now, ask),
        Params::SlidingLog(p) => sliding_log(p, state.sliding_log(), now, ask),
    }
}

/// The new state only when the commit changed something.
fn changed<S: PartialEq>(
    done: Committed,
    before: S,
    after: S,
    wrap: fn(S) -> State,
) -> (Committed, Option<State>) {
    let moved = done.refunded > 0 || done.debited > 0;
    (done, (moved && before != after).then(|| wrap(after)))
}

/// A debit of `debit` onto `count` of `capacity`, carried up to `bound`: (new count, debited,
/// overshoot).
fn fill(capacity: u64, bound: u64, count: u64, debit: u64) -> (u64, u64, u64) {
    let fits = debit.min(capacity.saturating_sub(count));
    let carried = debit.min(bound.saturating_sub(count));
    (count + carried, debit, debit - fits)
}

/// The meters' commit on a level in ns (gcra's tat − now, the funnel's level, the bucket's used
/// tokens); returns what was done and the new level.
fn meter(p: MeterParams, level: u64, now: Nanos, ask: Ask) -> (Committed, u64) {
    let t = p.interval.max(1);
    let (refund, debit, bound) = (ask.refund, ask.debit, ask.bound);
    // The emptier meter (without the refunded units) cannot run dry while the actual cost's
    // units still drain: only the time beyond T × actual can have eaten into what is owed.
    let elapsed = now - ask.reserved_at;
    let dry = elapsed.saturating_sub(t.saturating_mul(ask.actual));
    let owed = refund.saturating_sub(dry.div_ceil(t));
    let refunded = refund.min(level / t).min(owed);
    let level = level - refunded * t;
    let fits = debit.min(p.tolerance().saturating_sub(level) / t);
    // The whole debit is carried, above the tolerance when it does not fit (debt), up to the
    // bound: a debit cut there fills the meter to the bound, its last fraction of a unit too.
    let carried = debit.min(bound.saturating_sub(level) / t);
    let level = if carried < debit {
        bound.max(level)
    } else {
        level + carried * t
    };
    let done = Committed {
        refunded,
        debited: debit,
        overshoot: debit - fits,
        level: level as f64 / t as f64,
    };
    (done, level)
}

fn fixed_window(
    p: WindowParams,
    s: FixedWindowState,
    now: Nanos,
    ask: Ask,
) -> (Committed, Option<State>) {
    let FixedWindowState { start, count } = s.current(p, now);
    let same = p.bounds(ask.reserved_at).0 == start && s.start == start;
    let refunded = if same { ask.refund.min(count) } else { 0 };
    let (count, debited, overshoot) = fill(p.capacity, ask.bound, count - refunded, ask.debit);
    let next = FixedWindowState { start, count };
    let done = Committed {
        refunded,
        debited,
        overshoot,
        level: count as f64,
    };
    changed(done, s, next, State::FixedWindow)
}

fn sliding_window(
    p: WindowParams,
    s: SlidingWindowState,
    now: Nanos,
    ask: Ask,
) -> (Committed, Option<State>) {
    let w = p.window_ms;
    let (mut next, elapsed) = s.at(w, now / NANOS_PER_MILLI);
    let same = ask.reserved_at / NANOS_PER_MILLI / w == next.index && s.index == next.index;
    let refunded = if same {
        ask.refund.min(next.current)
    } else {
        0
    };
    let current = next.current - refunded;
    // Room as the decision counts it: previous × (W − e) ≤ (capacity − current − q) × W.
    let previous = next.previous;
    let weighted = (u128::from(previous) * u128::from(w - elapsed)).div_ceil(u128::from(w)) as u64;
    let room = p.capacity.saturating_sub(current).saturating_sub(weighted);
    let debit = ask.debit;
    let fits = debit.min(room);
    next.current = current + debit.min(ask.bound.saturating_sub(current));
    let done = Committed {
        refunded,
        debited: debit,
        overshoot: debit - fits,
        level: previous as f64 * (w - elapsed) as f64 / w as f64 + next.current as f64,
    };
    changed(done, s, next, State::SlidingWindow)
}

fn sliding_log(
    p: WindowParams,
    s: &SlidingLogState,
    now: Nanos,
    ask: Ask,
) -> (Committed, Option<State>) {
    let live_from = s.live_from(p.window_ns(), now);
    let mut entries: std::collections::VecDeque<Nanos> =
        s.entries.iter().skip(live_from).copied().collect();
    // Entries are sorted: those not newer than the reservation are a prefix.
    let upto = entries.partition_point(|t| *t <= ask.reserved_at);
    let refunded = ask.refund.min(upto as u64);
    let cut = upto - refunded as usize;
    entries.drain(cut..upto);
    let live = entries.len() as u64;
    let debit = ask.debit;
    let fits = debit.min(p.capacity.saturating_sub(live));
    let carried = debit.min(ask.bound.saturating_sub(live));
    let at = entries.back().map_or(now, |newest| now.max(*newest));
    entries.extend(std::iter::repeat_n(at, carried as usize));
    let done = Committed {
        refunded,
        debited: debit,
        overshoot: debit - fits,
        level: entries.len() as f64,
    };
    let moved = refunded > 0 || carried > 0;
    (
        done,
        moved.then_some(State::SlidingLog(SlidingLogState { entries })),
    )
}

/// Longest request id of a commit: enough for a UUID, Envoy's `x-request-id` or a trace id.
pub const MAX_COMMIT_ID_LEN: usize = 128;

/// How long a store keeps a commit's receipt (its request id and numbers), in milliseconds: a
/// retry of the same commit within it answers the first commit's numbers and changes nothing. An
/// hour covers every retry of a caller that waits seconds for an answer; a retry after it would
/// be applied again.
pub const COMMIT_ID_TTL_MS: u64 = 3_600_000;

/// Checks a commit's request id: 1 to [`MAX_COMMIT_ID_LEN`] of `[A-Za-z0-9_.:-]` (no braces, so
/// the key of the store's commit receipt keeps the state's hash tag; no spaces or separators of
/// other keys).
pub fn check_id(id: &str) -> Result<(), String> {
    if id.is_empty() || id.len() > MAX_COMMIT_ID_LEN {
        return Err(format!(
            "must be 1 to {MAX_COMMIT_ID_LEN} characters; got {}",
            id.len()
        ));
    }
    match id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-')))
    {
        Some(c) => Err(format!(
            "may hold only A-Z, a-z, 0-9, '_', '.', ':' and '-'; got {c:?}"
        )),
        None => Ok(()),
    }
}
