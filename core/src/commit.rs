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
//! A debit of m = actual − reserved fills the limit up to full (as an admission of m would, with
//! no check) and the part that did not fit is the overshoot; it is not carried as debt, so every
//! stored value stays within the bounds the Lua twins need exact (core/src/limits.rs).
//!
//! # The bound
//!
//! Admissions never exceed the limit by more than the sum of (actual − reserved) over the
//! requests whose actual cost exceeded their reservation: reservations are admitted under the
//! limit, refunds give back only what the limit would hold without those units, and a debit
//! either fits (it reduces later admissions) or is overshoot, which is at most actual − reserved.
//! The times are the store's (Redis `TIME`): a caller's `reserved_at` later than the truth makes
//! a meter's refund too large by up to that error (it is clamped to now).

use crate::algorithms::sliding_log::SlidingLogState;
use crate::algorithms::{
    fixed_window::FixedWindowState, gcra::GcraState, leaky_bucket::LeakyState,
    sliding_window::SlidingWindowState, token_bucket::TokenState,
};
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
    /// The part of `debited` that did not fit in the limit.
    pub overshoot: u64,
    /// The key's level after the commit, in units (as [`crate::Decision::level`]).
    pub level: f64,
}

/// Commits at `now`. Returns what was done and the new state (`None`: unchanged). A state of
/// another algorithm counts as fresh, as for a decision.
pub fn commit(params: &Params, state: &State, now: Nanos, c: Commit) -> (Committed, Option<State>) {
    // No reservation holds more than the capacity (it would have been denied); a claim of more
    // gives back at most what one could hold.
    let refund = c.reserved.min(params.capacity()).saturating_sub(c.actual);
    let debit = c.actual.saturating_sub(c.reserved);
    let reserved_at = c.reserved_at.min(now);
    match *params {
        Params::Gcra(p) => {
            let s = match state {
                State::Gcra(s) => *s,
                _ => GcraState::default(),
            };
            let level = s.tat.map_or(0, |t| t.saturating_sub(now));
            let (done, level) = meter(p, level, now - reserved_at, c.actual, refund, debit);
            let next = GcraState {
                tat: Some(now + level),
            };
            changed(done, s, next, State::Gcra)
        }
        Params::LeakyBucket(p) => {
            let s = match state {
                State::LeakyBucket(s) => *s,
                _ => LeakyState::default(),
            };
            let level = s.level.saturating_sub(now.saturating_sub(s.last));
            let (done, level) = meter(p, level, now - reserved_at, c.actual, refund, debit);
            let next = LeakyState {
                level,
                last: now.max(s.last),
            };
            changed(done, s, next, State::LeakyBucket)
        }
        Params::TokenBucket(p) => {
            let s = match state {
                State::TokenBucket(s) => *s,
                _ => TokenState::full(p),
            };
            let tol = p.tolerance();
            let tokens = s.tokens.saturating_add(now.saturating_sub(s.last)).min(tol);
            let (done, level) = meter(p, tol - tokens, now - reserved_at, c.actual, refund, debit);
            let next = TokenState {
                tokens: tol - level,
                last: now.max(s.last),
            };
            changed(done, s, next, State::TokenBucket)
        }
        Params::FixedWindow(p) => {
            let s = match state {
                State::FixedWindow(s) => *s,
                _ => FixedWindowState::default(),
            };
            let start = p.bounds(now).0.max(s.start);
            let count = if s.start == start { s.count } else { 0 };
            let same = p.bounds(reserved_at).0 == start && s.start == start;
            let refunded = if same { refund.min(count) } else { 0 };
            let (count, debited, overshoot) = fill(p.capacity, count - refunded, debit);
            let next = FixedWindowState { start, count };
            let done = Committed {
                refunded,
                debited,
                overshoot,
                level: count as f64,
            };
            changed(done, s, next, State::FixedWindow)
        }
        Params::SlidingWindow(p) => {
            let s = match state {
                State::SlidingWindow(s) => *s,
                _ => SlidingWindowState::default(),
            };
            sliding_window(p, s, now, reserved_at, refund, debit)
        }
        Params::SlidingLog(p) => {
            let fresh = SlidingLogState::default();
            let s = match state {
                State::SlidingLog(s) => s,
                _ => &fresh,
            };
            sliding_log(p, s, now, reserved_at, refund, debit)
        }
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

/// A debit of `debit` onto `count` of `capacity`: (new count, debited, overshoot).
fn fill(capacity: u64, count: u64, debit: u64) -> (u64, u64, u64) {
    let room = capacity.saturating_sub(count);
    let fits = debit.min(room);
    (count + fits, debit, debit - fits)
}

/// The meters' commit on a level in ns (gcra's tat − now, the funnel's level, the bucket's used
/// tokens); returns what was done and the new level.
fn meter(
    p: MeterParams,
    level: u64,
    elapsed: Nanos,
    actual: u64,
    refund: u64,
    debit: u64,
) -> (Committed, u64) {
    let t = p.interval.max(1);
    // The emptier meter (without the refunded units) cannot run dry while the actual cost's
    // units still drain: only the time beyond T × actual can have eaten into what is owed.
    let dry = elapsed.saturating_sub(t.saturating_mul(actual));
    let owed = refund.saturating_sub(dry.div_ceil(t));
    let refunded = refund.min(level / t).min(owed);
    let level = level - refunded * t;
    let tol = p.tolerance();
    let fits = debit.min(tol.saturating_sub(level) / t);
    // A debit fills the meter up to full: the last fraction of a unit counts as full too.
    let level = if fits < debit {
        tol.max(level)
    } else {
        level + fits * t
    };
    let done = Committed {
        refunded,
        debited: debit,
        overshoot: debit - fits,
        level: level as f64 / t as f64,
    };
    (done, level)
}

fn sliding_window(
    p: WindowParams,
    s: SlidingWindowState,
    now: Nanos,
    reserved_at: Nanos,
    refund: u64,
    debit: u64,
) -> (Committed, Option<State>) {
    let w = p.window_ms;
    let now_ms = now / NANOS_PER_MILLI;
    let (index, elapsed) = if now_ms / w >= s.index {
        (now_ms / w, now_ms % w)
    } else {
        (s.index, 0)
    };
    let (current, previous) = match index - s.index {
        0 => (s.current, s.previous),
        1 => (0, s.current),
        _ => (0, 0),
    };
    let same = reserved_at / NANOS_PER_MILLI / w == index && s.index == index;
    let refunded = if same { refund.min(current) } else { 0 };
    let current = current - refunded;
    // Room as the decision counts it: previous × (W − e) ≤ (capacity − current − q) × W.
    let weighted = (u128::from(previous) * u128::from(w - elapsed)).div_ceil(u128::from(w)) as u64;
    let room = p.capacity.saturating_sub(current).saturating_sub(weighted);
    let fits = debit.min(room);
    let current = current + fits;
    let next = SlidingWindowState {
        index,
        current,
        previous,
    };
    let done = Committed {
        refunded,
        debited: debit,
        overshoot: debit - fits,
        level: previous as f64 * (w - elapsed) as f64 / w as f64 + current as f64,
    };
    changed(done, s, next, State::SlidingWindow)
}

fn sliding_log(
    p: WindowParams,
    s: &SlidingLogState,
    now: Nanos,
    reserved_at: Nanos,
    refund: u64,
    debit: u64,
) -> (Committed, Option<State>) {
    let window = p.window_ns();
    let live_from = s
        .entries
        .iter()
        .position(|t| t.saturating_add(window) > now)
        .unwrap_or(s.entries.len());
    let mut entries: std::collections::VecDeque<Nanos> =
        s.entries.iter().skip(live_from).copied().collect();
    // Entries are sorted: those not newer than the reservation are a prefix.
    let upto = entries.partition_point(|t| *t <= reserved_at);
    let refunded = refund.min(upto as u64);
    let cut = upto - refunded as usize;
    entries.drain(cut..upto);
    let live = entries.len() as u64;
    let fits = debit.min(p.capacity.saturating_sub(live));
    let at = entries.back().map_or(now, |newest| now.max(*newest));
    entries.extend(std::iter::repeat_n(at, fits as usize));
    let done = Committed {
        refunded,
        debited: debit,
        overshoot: debit - fits,
        level: entries.len() as f64,
    };
    let moved = refunded > 0 || fits > 0;
    (
        done,
        moved.then_some(State::SlidingLog(SlidingLogState { entries })),
    )
}

/// Longest request id of a commit: enough for a UUID, Envoy's `x-request-id` or a trace id.
pub const MAX_COMMIT_ID_LEN: usize = 128;

/// How long a store remembers a commit's request id, in milliseconds: a retry of the same commit
/// within it answers the first commit's numbers and changes nothing. An hour covers every retry
/// of a caller that waits seconds for an answer; a retry after it would be applied again.
pub const COMMIT_ID_TTL_MS: u64 = 3_600_000;

/// Checks a commit's request id: 1 to [`MAX_COMMIT_ID_LEN`] of `[A-Za-z0-9_.:-]` (no braces, so
/// the store's marker key keeps the state's hash tag; no spaces or separators of other keys).
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
