//! redis-cell parity: the table of issue 2, as observed on a real redis-cell, replayed through
//! `CellArgs` → `gcra::decide` → `cell::reply` at fixed times, calls 3 ms apart.
//!
//! redis-cell ran the calls a few milliseconds apart on a wall clock; here every call is exactly
//! 3 ms after the previous one, which is why its rounding rule (whole seconds plus one when at
//! least a millisecond is left over) turns e.g. 2 s − 3 ms into 2.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

use sluice_core::algorithms::gcra::{self, GcraState};
use sluice_core::cell::{reply, CellArgs};
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
        reply(&decision)
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
    assert_eq!(
        clock.throttle(&mut j, (15, 30, 60, 5)),
        [0, 16, 11, -1, 10],
        "1st"
    );
    assert_eq!(
        clock.throttle(&mut j, (15, 30, 60, 5)),
        [0, 16, 6, -1, 20],
        "2nd"
    );
    assert_eq!(
        clock.throttle(&mut j, (15, 30, 60, 5)),
        [0, 16, 1, -1, 30],
        "3rd"
    );
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
    assert_eq!(
        clock.throttle(&mut m, (0, 30, 60, 1)),
        [0, 1, 0, -1, 2],
        "1st"
    );
    assert_eq!(
        clock.throttle(&mut m, (0, 30, 60, 1)),
        [1, 1, 0, 2, 2],
        "2nd"
    );
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
    assert_eq!(field((15, 30, 60, 1_000_000_001)), "quantity");
    // 2 s per request × 10^7 requests: 231 days to drain, beyond the 90-day horizon.
    assert_eq!(field((10_000_000, 30, 60, 1)), "max_burst");
    // More than one per nanosecond.
    assert_eq!(field((0, 2_000_000_000, 1, 1)), "count");
    // Largest accepted burst at one per second: 90 days exactly.
    assert!(CellArgs::new(90 * 86_400 - 1, 1, 1, 1).is_ok());
    assert_eq!(field((90 * 86_400, 1, 1, 1)), "max_burst");
}
