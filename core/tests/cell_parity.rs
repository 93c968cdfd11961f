//! redis-cell parity: the table of issue 2, as observed on a real redis-cell, replayed through
//! `CellArgs` → `gcra::decide` → `CellArgs::reply` at fixed times, calls 3 ms apart; the long
//! periods of issue 10 (30 per year) and the exact bounds where redis-cell's i64 nanoseconds
//! overflow; and property tests against `redis_cell`, a transcription of redis-cell's own maths,
//! over the whole accepted range.
//!
//! redis-cell ran the calls a few milliseconds apart on a wall clock; here every call is exactly
//! 3 ms after the previous one, which is why its rounding rule (whole seconds plus one when at
//! least a millisecond is left over) turns e.g. 2 s − 3 ms into 2.

// An integration-test crate: clippy.toml lets #[test] functions unwrap, but not the helpers
// beside them, so the crate root allows it. A panic here is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use sluice_core::algorithms::gcra::{self, GcraState};
use sluice_core::cell::{reply, CellArgs};
use sluice_core::limits::{CELL_MAX_NS, CELL_MAX_PERIOD_S};
use sluice_core::time::{NANOS_PER_MILLI, NANOS_PER_SEC};

/// An arbitrary but fixed start: 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200 * NANOS_PER_SEC;
const STEP: u64 = 3 * NANOS_PER_MILLI;

/// One redis-cell key and a clock that advances 3 ms per call, shared across keys (as on a real
/// server, where all calls happen on one timeline).
struct Cell {
    now: u64,
}

impl Cell {
    fn new() -> Cell {
        Cell { now: T0 }
    }

    /// `CL.THROTTLE key max_burst count period quantity` against `state`; the clock then moves on.
    fn throttle(&mut self, state: &mut GcraState, args: (u64, u64, u64, u64)) -> [i64; 5] {
        let (max_burst, count, period, quantity) = args;
        let cell = CellArgs::new(max_burst, count, period, quantity).expect("valid arguments");
        let (decision, next) = gcra::decide(cell.params, *state, self.now, cell.quantity);
        *state = next;
        self.now += STEP;
        cell.reply(&decision)
    }
}

#[test]
fn k_15_30_60_burst_then_limit_then_quantity_5() {
    let mut clock = Cell::new();
    let mut k = GcraState::default();
    let mut replies = Vec::new();
    for _ in 0..17 {
        replies.push(clock.throttle(&mut k, (15, 30, 60, 1)));
    }
    assert_eq!(replies[0], [0, 16, 15, -1, 2], "1st");
    assert_eq!(replies[1], [0, 16, 14, -1, 4], "2nd");
    // Every call in between: remaining counts down by one, reset grows by 2 s.
    for (i, r) in replies.iter().enumerate().take(16) {
        let n = i as i64 + 1;
        assert_eq!(*r, [0, 16, 16 - n, -1, 2 * n], "call {n}");
    }
    assert_eq!(replies[15], [0, 16, 0, -1, 32], "16th");
    assert_eq!(replies[16], [1, 16, 0, 2, 32], "17th");
    assert_eq!(
        clock.throttle(&mut k, (15, 30, 60, 5)),
        [1, 16, 0, 10, 32],
        "quantity 5 on the exhausted key"
    );
}

#[test]
fn j_15_30_60_quantity_5_then_peek() {
    let mut clock = Cell::new();
    let mut j = GcraState::default();
    for (want, call) in [
        ([0, 16, 11, -1, 10], "1st"),
        ([0, 16, 6, -1, 20], "2nd"),
        ([0, 16, 1, -1, 30], "3rd"),
    ] {
        assert_eq!(clock.throttle(&mut j, (15, 30, 60, 5)), want, "{call}");
    }
    let before = j;
    assert_eq!(
        clock.throttle(&mut j, (15, 30, 60, 5)),
        [1, 16, 1, 8, 30],
        "4th"
    );
    assert_eq!(j, before, "a limited call stores nothing");
    assert_eq!(
        clock.throttle(&mut j, (15, 30, 60, 0)),
        [0, 16, 1, -1, 30],
        "quantity 0"
    );
    assert_eq!(j, before, "quantity 0 stores nothing");
}

#[test]
fn m_0_30_60_single_slot() {
    let mut clock = Cell::new();
    let mut m = GcraState::default();
    for (want, call) in [([0, 1, 0, -1, 2], "1st"), ([1, 1, 0, 2, 2], "2nd")] {
        assert_eq!(clock.throttle(&mut m, (0, 30, 60, 1)), want, "{call}");
    }
}

/// The whole table on one timeline, in the order of the issue, as one redis-cell would see it.
#[test]
fn the_issue_table_on_one_timeline() {
    let mut clock = Cell::new();
    let (mut k, mut j, mut m) = (
        GcraState::default(),
        GcraState::default(),
        GcraState::default(),
    );
    let mut k_replies = Vec::new();
    for _ in 0..17 {
        k_replies.push(clock.throttle(&mut k, (15, 30, 60, 1)));
    }
    assert_eq!(
        [k_replies[0], k_replies[1], k_replies[15], k_replies[16]],
        [
            [0, 16, 15, -1, 2],
            [0, 16, 14, -1, 4],
            [0, 16, 0, -1, 32],
            [1, 16, 0, 2, 32]
        ]
    );
    assert_eq!(clock.throttle(&mut k, (15, 30, 60, 5)), [1, 16, 0, 10, 32]);
    let j_replies: Vec<_> = (0..4)
        .map(|_| clock.throttle(&mut j, (15, 30, 60, 5)))
        .collect();
    assert_eq!(
        j_replies,
        vec![
            [0, 16, 11, -1, 10],
            [0, 16, 6, -1, 20],
            [0, 16, 1, -1, 30],
            [1, 16, 1, 8, 30]
        ]
    );
    assert_eq!(clock.throttle(&mut j, (15, 30, 60, 0)), [0, 16, 1, -1, 30]);
    assert_eq!(clock.throttle(&mut m, (0, 30, 60, 1)), [0, 1, 0, -1, 2]);
    assert_eq!(clock.throttle(&mut m, (0, 30, 60, 1)), [1, 1, 0, 2, 2]);
}

/// The ms rounding of the 5-tuple: a retry of 2 s − 3 ms shows as 2, of exactly 2 s as 2, of
/// 2 s + 1 ms as 3, and of 2 s + 999 µs (under a whole extra millisecond) still as 2.
#[test]
fn cell_seconds_round_up_only_on_a_whole_leftover_millisecond() {
    let args = CellArgs::new(0, 30, 60, 1).expect("valid");
    let (_, s) = gcra::decide(args.params, GcraState::default(), T0, 1);
    // The TAT is T0 + 2 s; at T0 − x a request must wait 2 s + x.
    for (back, secs) in [(0, 2), (999_999, 2), (NANOS_PER_MILLI, 3)] {
        let (d, _) = gcra::decide(args.params, s, T0 - back, 1);
        assert_eq!(reply(&d)[3], secs, "{back} ns earlier");
    }
}

#[test]
fn cell_arguments_are_validated_with_the_field_named() {
    let field = |a: (u64, u64, u64, u64)| {
        CellArgs::new(a.0, a.1, a.2, a.3)
            .map(|_| ())
            .unwrap_err()
            .field
    };
    assert_eq!(field((15, 0, 60, 1)), "count");
    assert_eq!(field((15, 30, 0, 1)), "period");
    // More than one per nanosecond.
    assert_eq!(field((0, 2_000_000_000, 1, 1)), "count");
    // Numbers redis-cell cannot read as i64.
    let above = CELL_MAX_NS + 1;
    assert_eq!(field((above, 1, 1, 1)), "max_burst");
    assert_eq!(field((0, above, 1, 1)), "count");
    assert_eq!(field((0, 1, above, 1)), "period");
    assert_eq!(field((0, 1, 1, above)), "quantity");
}

/// The exact bounds: the last argument list redis-cell computes without overflowing its i64
/// nanoseconds is accepted, the next one is refused.
#[test]
fn cell_arguments_are_refused_exactly_where_redis_cell_overflows() {
    let ok = |a: (u64, u64, u64, u64)| CellArgs::new(a.0, a.1, a.2, a.3).map_err(|e| e.field);
    // period × 10^9 ≤ i64::MAX.
    assert!(ok((0, 1, 9_223_372_036, 1)).is_ok());
    assert_eq!(ok((0, 1, 9_223_372_037, 1)), Err("period".into()));
    // T × (max_burst + 1) ≤ i64::MAX: at 1 per second, 9,223,372,036 back to back.
    assert!(ok((9_223_372_035, 1, 1, 1)).is_ok());
    assert_eq!(ok((9_223_372_036, 1, 1, 1)), Err("max_burst".into()));
    // max_burst + 1 itself overflows at i64::MAX, even at T = 1 ns.
    assert!(ok((CELL_MAX_NS - 1, 1_000_000_000, 1, 1)).is_ok());
    assert_eq!(
        ok((CELL_MAX_NS, 1_000_000_000, 1, 1)),
        Err("max_burst".into())
    );
    // T × quantity ≤ i64::MAX, whatever the capacity (T = 2 s here).
    assert!(ok((15, 30, 60, 4_611_686_018)).is_ok());
    assert_eq!(ok((15, 30, 60, 4_611_686_019)), Err("quantity".into()));
    // What the old 90-day cap refused: 2 s × 10^7 (231 days), and 30 per year.
    assert!(ok((10_000_000, 30, 60, 1)).is_ok());
    assert!(ok((15, 30, 31_536_000, 1)).is_ok());
}

/// redis-cell divides period × 10^9 by count in doubles: beyond 2^53 ns that differs from the
/// integer quotient (11 per year: ...091 ns, not ...090), and sluice uses the double quotient.
#[test]
fn the_emission_interval_is_redis_cells_double_division() {
    let interval = |count, period| CellArgs::new(0, count, period, 1).unwrap().params.interval;
    assert_eq!(interval(11, YEAR), 2_866_909_090_909_091);
    assert_eq!(interval(30, YEAR), 1_051_200_000_000_000);
    assert_eq!(interval(3, 9_223_372_036), 3_074_457_345_333_333_504);
    // period × 10^9 = 9,223,372,035,000,000,000 rounds up to a double 512 ns larger.
    assert_eq!(interval(1, 9_223_372_035), 9_223_372_035_000_000_512);
    assert_eq!(interval(30, 60), 2 * NANOS_PER_SEC);
}

/// Seconds in a 365-day year.
const YEAR: u64 = 31_536_000;

/// The issue's example: `CL.THROTTLE k 15 30 31536000 1` answers `0 16 15 -1 1051200` on
/// redis-cell. Then the rest of the burst, 3 ms apart: every TAT, tolerance and ttl here is
/// above 2^53 ns.
#[test]
fn k_15_30_per_year_answers_as_redis_cell() {
    let mut clock = Cell::new();
    let mut k = GcraState::default();
    let year = (15, 30, YEAR, 1);
    assert_eq!(clock.throttle(&mut k, year), [0, 16, 15, -1, 1_051_200]);
    for n in 2..=16 {
        assert_eq!(
            clock.throttle(&mut k, year),
            [0, 16, 16 - n, -1, n * 1_051_200],
            "call {n}"
        );
    }
    // Full: the next one waits one interval less the 48 ms that passed.
    assert_eq!(
        clock.throttle(&mut k, year),
        [1, 16, 0, 1_051_200, 16 * 1_051_200]
    );
    assert_eq!(
        clock.throttle(&mut k, (15, 30, YEAR, 0)),
        [0, 16, 0, -1, 16 * 1_051_200]
    );
    // A whole burst at once, and more than the burst (never: no retry).
    let mut j = GcraState::default();
    assert_eq!(
        clock.throttle(&mut j, (15, 30, YEAR, 16)),
        [0, 16, 0, -1, 16 * 1_051_200]
    );
    let mut m = GcraState::default();
    assert_eq!(
        clock.throttle(&mut m, (15, 30, YEAR, 17)),
        [1, 16, 16, -1, 0]
    );
}

/// The longest burst redis-cell holds at 1 per second: 9,223,372,036 back to back (a tolerance
/// 0.85 s short of i64::MAX ns), a TAT ~292 years ahead, decided to the nanosecond.
#[test]
fn the_longest_burst_is_exact() {
    let args = CellArgs::new(9_223_372_035, 1, 1, 1).unwrap();
    assert_eq!(args.params.tolerance(), 9_223_372_036_000_000_000);
    let full = GcraState {
        tat: Some(T0 + args.params.tolerance()),
    };
    let (d, _) = gcra::decide(args.params, full, T0, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(NANOS_PER_SEC));
    assert_eq!(d.remaining, 0);
    let (d, next) = gcra::decide(args.params, full, T0 + NANOS_PER_SEC, 1);
    assert!(d.allowed);
    assert_eq!(next.tat, Some(T0 + args.params.tolerance() + NANOS_PER_SEC));
    let (d, _) = gcra::decide(args.params, full, T0 + 1, 0);
    assert_eq!(d.reset_after, args.params.tolerance() - 1);
    assert_eq!(args.reply(&d), [0, 9_223_372_036, 0, -1, 9_223_372_036]);
}

/// redis-cell computes `remaining` from whole microseconds in doubles; `CellArgs::reply` does
/// too. With T = 1999 ns (500,250 per second), 10 intervals are 19 whole µs of 1 µs each: redis-cell
/// answers 19 remaining of a limit of 11 where 10 would be exact.
#[test]
fn remaining_is_redis_cells_microsecond_quotient() {
    let args = CellArgs::new(10, 500_250, 1, 1).unwrap();
    assert_eq!(args.params.interval, 1999);
    let (d, _) = gcra::decide(args.params, GcraState::default(), T0, 1);
    assert_eq!(d.remaining, 10);
    assert_eq!(reply(&d), [0, 11, 10, -1, 0]);
    assert_eq!(args.reply(&d), [0, 11, 19, -1, 0]);
    // Whole microseconds: the same as the exact count.
    let args = CellArgs::new(15, 30, 60, 1).unwrap();
    let (d, _) = gcra::decide(args.params, GcraState::default(), T0, 1);
    assert_eq!(args.reply(&d), reply(&d));
}

/// redis-cell's `CL.THROTTLE` (redis-cell-impl `RateLimiter::rate_limit` and the reply in
/// redis-cell `ThrottleCommand::run`), transcribed into i128 so that every place its i64
/// arithmetic would overflow shows as `None`.
mod redis_cell {
    const MAX: i128 = i64::MAX as i128;
    const E9: i128 = 1_000_000_000;

    /// T, tolerance, increment and limit, or `None` where redis-cell fails or overflows.
    pub fn params(args: (u64, u64, u64, u64)) -> Option<(i128, i128, i128, i128)> {
        let (max_burst, count, period, quantity) = args;
        let [max_burst, count, period, quantity] =
            [max_burst, count, period, quantity].map(i128::from);
        if [max_burst, count, period, quantity]
            .iter()
            .any(|&v| v > MAX)
        {
            return None; // "Couldn't parse as integer"
        }
        let ns = period * E9;
        if ns > MAX || ns == 0 || count == 0 {
            return None; // `whole_nanoseconds() as i64` wraps, or a zero rate
        }
        let t = i128::from((ns as i64 as f64 / count as i64 as f64) as i64);
        let limit = max_burst + 1;
        let (tolerance, increment) = (t * limit, t * quantity);
        if t == 0 || limit > MAX || tolerance > MAX || increment > MAX {
            return None;
        }
        Some((t, tolerance, increment, limit))
    }

    /// One call at `now` on a key holding `tat`: the reply and the TAT stored, or `None` when the
    /// stored TAT would pass i64::MAX ns (redis-cell wraps it).
    pub fn throttle(
        args: (u64, u64, u64, u64),
        tat: Option<i128>,
        now: i128,
    ) -> Option<([i64; 5], Option<i128>)> {
        let (t, tolerance, increment, limit) = params(args)?;
        // The key expires at its TAT: a TAT not after now reads as a missing key.
        let tat = tat.filter(|&tat| tat > now).unwrap_or(now);
        let new_tat = now.max(tat) + increment;
        let diff = now - (new_tat - tolerance);
        let (limited, retry, ttl, stored) = if diff < 0 {
            (
                true,
                (increment <= tolerance).then_some(-diff),
                tat - now,
                None,
            )
        } else if new_tat > MAX {
            return None;
        } else {
            (false, None, new_tat - now, Some(new_tat))
        };
        let next = tolerance - ttl;
        let remaining = if next > -t {
            ((next / 1000) as f64 / (t / 1000) as f64) as i64
        } else {
            0
        };
        // whole_seconds, plus one when subsec_milliseconds > 0.
        let secs = |d: i128| (d / E9 + i128::from((d % E9) / 1_000_000 > 0)) as i64;
        Some((
            [
                i64::from(limited),
                limit as i64,
                remaining,
                retry.map_or(-1, secs),
                secs(ttl),
            ],
            stored,
        ))
    }
}

fn any_cell_args() -> impl Strategy<Value = (u64, u64, u64, u64)> {
    let max_burst = prop_oneof![0..=20u64, 0..=1u64 << 40, any::<u64>()];
    let count = prop_oneof![1..=100u64, 1..=1u64 << 40, any::<u64>()];
    let period = prop_oneof![
        1..=120u64,
        Just(YEAR),
        1..=100 * YEAR,
        1..=CELL_MAX_PERIOD_S + 10
    ];
    let quantity = prop_oneof![0..=3u64, 0..=40u64, any::<u64>()];
    (max_burst, count, period, quantity)
}

/// Argument lists CellArgs accepts, spread over the whole range: capacity and quantity up to
/// i64::MAX / T, periods up to ~292 years.
fn accepted_cell_args() -> impl Strategy<Value = (u64, u64, u64, u64)> {
    let count = prop_oneof![1..=100u64, 1..=1u64 << 40];
    let period = prop_oneof![
        1..=120u64,
        Just(YEAR),
        1..=100 * YEAR,
        1..=CELL_MAX_PERIOD_S
    ];
    (count, period)
        .prop_filter_map("under 1 ns per request", |(count, period)| {
            let args = CellArgs::new(0, count, period, 0).ok()?;
            Some((count, period, args.params.interval))
        })
        .prop_flat_map(|(count, period, interval)| {
            let most = CELL_MAX_NS / interval;
            let max_burst = prop_oneof![0..=(most - 1).min(20), 0..=most - 1];
            // Small quantities too, but never above what the period allows (with a period of
            // ~97 years, 3 × its interval is already over i64::MAX ns).
            let quantity = prop_oneof![0..=3u64.min(most), 0..=most];
            (max_burst, quantity).prop_map(move |(max_burst, q)| (max_burst, count, period, q))
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// sluice accepts exactly the argument lists redis-cell computes without overflowing, with
    /// redis-cell's interval, capacity, tolerance and increment.
    #[test]
    fn cell_args_accept_exactly_what_redis_cell_computes(args in any_cell_args()) {
        let ours = CellArgs::new(args.0, args.1, args.2, args.3).ok();
        let theirs = redis_cell::params(args);
        prop_assert_eq!(ours.is_some(), theirs.is_some(), "{:?}", args);
        if let (Some(ours), Some((t, tolerance, increment, limit))) = (ours, theirs) {
            let p = ours.params;
            prop_assert_eq!(
                [p.interval, p.capacity, p.tolerance(), p.increment(ours.quantity)].map(i128::from),
                [t, limit, tolerance, increment]
            );
        }
    }
}

proptest! {
    /// On a timeline that only moves forward, core answers what redis-cell answers, call by call,
    /// over the whole accepted range: periods of centuries, bursts of 2^62, quantities of 2^62.
    #[test]
    fn core_answers_as_redis_cell(
        args in accepted_cell_args(),
        start in 0u64..=1u64 << 61,
        steps in prop::collection::vec((0u8..4, any::<u64>(), 0u64..=40), 1..40),
    ) {
        let cell = CellArgs::new(args.0, args.1, args.2, args.3).unwrap();
        let p = cell.params;
        let (mut now, mut ours, mut theirs) = (start, GcraState::default(), None);
        for (i, (kind, r, q)) in steps.into_iter().enumerate() {
            now = now.saturating_add(match kind {
                0 => 0,
                1 => r % 1_000_000_000,
                2 => r % p.interval.saturating_mul(2),
                _ => r % p.tolerance(),
            });
            // Mostly the generated quantity; some calls with a small one.
            let quantity = if i % 3 == 0 { q.min(p.capacity) } else { cell.quantity };
            let Ok(call) = CellArgs::new(args.0, args.1, args.2, quantity) else {
                continue;
            };
            let Some((want, stored)) = redis_cell::throttle((args.0, args.1, args.2, quantity), theirs, i128::from(now)) else {
                break; // redis-cell's stored TAT wraps past i64::MAX ns: its answers end here
            };
            let (decision, next) = gcra::decide(p, ours, now, quantity);
            prop_assert_eq!(call.reply(&decision), want, "call {} at {} q {}", i, now, quantity);
            ours = next;
            if stored.is_some() {
                theirs = stored;
            }
        }
    }
}
