//! Commit of a reservation (`sluice_core::commit`) at fixed times: a table per algorithm of what
//! is given back and debited, and properties: a commit with actual = reserved changes nothing, a
//! refund never gives back more than reserved − actual, and after any history of reservations and
//! commits the meters never admitted more than the bound (capacity + elapsed / T + overshoot).

use proptest::prelude::*;
use sluice_core::commit::{commit, Commit, Committed};
use sluice_core::{MeterParams, Params, State, WindowParams};

const MS: u64 = 1_000_000;

fn meter(interval: u64, capacity: u64) -> MeterParams {
    MeterParams { interval, capacity }
}

fn window(window_ms: u64, capacity: u64) -> WindowParams {
    WindowParams {
        window_ms,
        capacity,
        calendar: None,
    }
}

/// The three meters on the same parameters.
fn meters(m: MeterParams) -> [Params; 3] {
    [
        Params::Gcra(m),
        Params::LeakyBucket(m),
        Params::TokenBucket(m),
    ]
}

fn all_params() -> Vec<Params> {
    let m = meter(1000, 10);
    let w = window(1000, 10);
    vec![
        Params::Gcra(m),
        Params::LeakyBucket(m),
        Params::TokenBucket(m),
        Params::FixedWindow(w),
        Params::SlidingWindow(w),
        Params::SlidingLog(w),
    ]
}

/// Reserves `q` at `at` from `state`; panics if denied.
fn reserve(p: &Params, state: &State, at: u64, q: u64) -> State {
    let (d, s) = p.decide(state, at, q);
    assert!(d.allowed, "{p:?} reserve {q} at {at}");
    s
}

fn c(reserved: u64, actual: u64, reserved_at: u64) -> Commit {
    Commit {
        reserved,
        actual,
        reserved_at,
    }
}

/// Reserves `reserved` from a fresh state at `now` and commits `actual` at once: the commit and
/// the state it left, if it changed.
fn committed_at_once(
    p: &Params,
    now: u64,
    reserved: u64,
    actual: u64,
) -> (Committed, Option<State>) {
    let s = reserve(p, &State::Fresh, now, reserved);
    commit(p, &s, now, c(reserved, actual, now))
}

/// What committing `c` at `now` over `state` gives back.
fn refunded(p: &Params, state: &State, now: u64, c: Commit) -> u64 {
    commit(p, state, now, c).0.refunded
}

/// What a commit moved: (refunded, debited, overshoot).
fn moved(done: &Committed) -> (u64, u64, u64) {
    (done.refunded, done.debited, done.overshoot)
}

#[test]
fn a_refund_right_after_the_reservation_gives_back_the_difference_everywhere() {
    let now = 5_000 * MS;
    for p in all_params() {
        let (done, next) = committed_at_once(&p, now, 8, 3);
        assert_eq!(moved(&done), (5, 0, 0), "{p:?}");
        let next = next.expect("changed");
        assert_eq!(p.decide(&next, now, 0).0.remaining, 7, "{p:?}");
        // Exactly what a reservation of 3 would have left.
        let direct = reserve(&p, &State::Fresh, now, 3);
        assert_eq!(
            p.decide(&direct, now, 0).0,
            p.decide(&next, now, 0).0,
            "{p:?}"
        );
    }
}

#[test]
fn actual_equal_to_reserved_changes_nothing() {
    for p in all_params() {
        let s = reserve(&p, &State::Fresh, 10 * MS, 4);
        let (done, next) = commit(&p, &s, 20 * MS, c(4, 4, 10 * MS));
        assert_eq!((done.refunded, done.debited), (0, 0));
        assert_eq!(next, None, "{p:?}");
    }
}

#[test]
fn a_debit_is_never_denied_and_what_does_not_fit_is_overshoot_carried_as_debt() {
    let now = 5_000 * MS;
    for p in all_params() {
        let (done, next) = committed_at_once(&p, now, 8, 13);
        assert_eq!(moved(&done), (0, 5, 3), "{p:?}");
        let next = next.expect("changed");
        let d = p.decide(&next, now, 0).0;
        assert_eq!(d.remaining, 0, "{p:?}");
        assert_eq!(done.level, 13.0, "{p:?}");
        assert_eq!(sluice_core::budget::debt(&p, &d), 3, "{p:?}");
        // A refund of another reservation pays the debt first: 2 back leave 1 owed.
        let (done, again) = commit(&p, &next, now, c(8, 6, now));
        assert_eq!(done.refunded, 2, "{p:?}");
        let d = p.decide(&again.expect("changed"), now, 0).0;
        assert_eq!(
            (d.remaining, sluice_core::budget::debt(&p, &d)),
            (0, 1),
            "{p:?}"
        );
    }
}

#[test]
fn the_debt_is_carried_up_to_the_bound_then_dropped() {
    use sluice_core::commit::carry_bound;
    use sluice_core::limits::{MAX_CARRIED_COUNT, MAX_CARRIED_LEVEL_NS};
    let now = 5_000 * MS;
    // A meter of 1 unit per day, capacity 10: 100 days of level at most, so 90 units of debt.
    let day = 86_400_000_000_000;
    let m = Params::LeakyBucket(meter(day, 10));
    assert_eq!(carry_bound(&m), MAX_CARRIED_LEVEL_NS);
    let s = reserve(&m, &State::Fresh, now, 10);
    let (done, next) = commit(&m, &s, now, c(0, 95, now));
    assert_eq!((done.debited, done.overshoot, done.level), (95, 95, 100.0));
    let d = m.decide(&next.expect("changed"), now, 0).0;
    assert_eq!(sluice_core::budget::debt(&m, &d), 90);
    // A window carries up to 14 million units; a sliding log one more capacity of entries.
    let w = Params::FixedWindow(window(1000, 10));
    assert_eq!(carry_bound(&w), MAX_CARRIED_COUNT);
    let (done, _) = commit(&w, &State::Fresh, now, c(0, MAX_CARRIED_COUNT + 5, now));
    assert_eq!(done.level, MAX_CARRIED_COUNT as f64);
    let log = Params::SlidingLog(window(1000, 10));
    let (done, _) = commit(&log, &State::Fresh, now, c(0, 25, now));
    assert_eq!((done.overshoot, done.level), (15, 20.0));
}

#[test]
fn meters_give_back_only_what_has_not_leaked_since_the_reservation() {
    // The example of the module docs: 10 per 10 µs, reserved 10 at 0, another request takes 10
    // at 10 µs, then the first commits 0: nothing comes back.
    let p = Params::Gcra(meter(1000, 10));
    let s = reserve(&p, &State::Fresh, 1_000_000, 10);
    let s = reserve(&p, &s, 1_010_000, 10);
    assert_eq!(refunded(&p, &s, 1_010_000, c(10, 0, 1_000_000)), 0);
    // Half way: 5 units' worth has leaked, 5 are still owed.
    for p in meters(meter(1000, 10)) {
        let s = reserve(&p, &State::Fresh, 1_000_000, 10);
        assert_eq!(refunded(&p, &s, 1_005_000, c(10, 0, 1_000_000)), 5, "{p:?}");
        // 4.5 units leaked: ⌈4.5⌉ = 5 are no longer surely owed.
        assert_eq!(refunded(&p, &s, 1_004_500, c(10, 0, 1_000_000)), 5, "{p:?}");
    }
}

#[test]
fn the_actual_cost_s_drain_time_is_a_grace_period() {
    // 10 reserved at 0, 5 used: the emptier meter (5 units) cannot run dry for 5 units' time,
    // so a commit within it gives back all 5; 2 units' time later, 2 fewer.
    for p in meters(meter(1000, 10)) {
        let s = reserve(&p, &State::Fresh, 1_000_000, 10);
        assert_eq!(refunded(&p, &s, 1_004_999, c(10, 5, 1_000_000)), 5, "{p:?}");
        assert_eq!(refunded(&p, &s, 1_007_000, c(10, 5, 1_000_000)), 3, "{p:?}");
        // Never more than the level holds.
        assert_eq!(refunded(&p, &s, 1_009_500, c(10, 5, 1_000_000)), 0, "{p:?}");
    }
}

#[test]
fn windows_refund_only_within_the_reservation_s_window() {
    for p in [
        Params::FixedWindow(window(1000, 10)),
        Params::SlidingWindow(window(1000, 10)),
    ] {
        let s = reserve(&p, &State::Fresh, 1_900 * MS, 8);
        // Same window: refunded.
        assert_eq!(
            refunded(&p, &s, 1_999 * MS, c(8, 2, 1_900 * MS)),
            6,
            "{p:?}"
        );
        // The next window: nothing to give back.
        let (done, next) = commit(&p, &s, 2_000 * MS, c(8, 2, 1_900 * MS));
        assert_eq!((done.refunded, next), (0, None), "{p:?}");
        // Another request's count in the new window is not refundable by an old reservation.
        let s2 = reserve(&p, &s, 2_100 * MS, 1);
        assert_eq!(
            refunded(&p, &s2, 2_200 * MS, c(8, 0, 1_900 * MS)),
            0,
            "{p:?}"
        );
    }
}

#[test]
fn sliding_log_never_removes_a_later_request_s_entries() {
    let p = Params::SlidingLog(window(1000, 10));
    let s = reserve(&p, &State::Fresh, 100 * MS, 3);
    let s = reserve(&p, &s, 200 * MS, 5);
    let s = reserve(&p, &s, 300 * MS, 2);
    // The request of 200 ms reserved 5 and used 1: its own 4 newest entries go.
    let (done, next) = commit(&p, &s, 400 * MS, c(5, 1, 200 * MS));
    assert_eq!(done.refunded, 4);
    let State::SlidingLog(log) = next.expect("changed") else {
        panic!("not a log")
    };
    let times: Vec<u64> = log.entries.iter().map(|t| t / MS).collect();
    assert_eq!(times, [100, 100, 100, 200, 300, 300]);
    // The request of 100 ms refunds 5 but holds only 3 entries at or before its time.
    assert_eq!(refunded(&p, &s, 400 * MS, c(5, 0, 100 * MS)), 3);
    // Expired entries are not refundable.
    assert_eq!(refunded(&p, &s, 1_150 * MS, c(3, 0, 100 * MS)), 0);
}

#[test]
fn a_refund_is_bounded_by_the_capacity() {
    let p = Params::TokenBucket(meter(1000, 10));
    let s = reserve(&p, &State::Fresh, MS, 10);
    assert_eq!(refunded(&p, &s, MS, c(1_000_000_000, 0, MS)), 10);
}

/// One step of a random history: a reservation, or a commit of the previous reservation.
#[derive(Debug, Clone)]
enum Step {
    Reserve { dt: u64, q: u64 },
    Commit { dt: u64, actual: u64 },
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            (0u64..3_000, 0u64..12).prop_map(|(dt, q)| Step::Reserve { dt, q }),
            (0u64..3_000, 0u64..12).prop_map(|(dt, actual)| Step::Commit { dt, actual }),
        ],
        1..40,
    )
}

/// Steps close together (at most 3 units' drain apart) and commits up to 16 on a capacity of
/// 10: debits beyond a full meter are common.
fn tight_steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        prop_oneof![
            (0u64..300, 0u64..12).prop_map(|(dt, q)| Step::Reserve { dt, q }),
            (0u64..300, 0u64..17).prop_map(|(dt, actual)| Step::Commit { dt, actual }),
        ],
        1..40,
    )
}

/// What a random history did to a meter.
struct Replayed {
    /// (time, units really used, an admission?) per entry: each admitted reservation at its
    /// time (less what its commit refunded), each debit at its commit's time.
    used: Vec<(u64, u64, bool)>,
    /// (reserved, actual, result) per commit made.
    commits: Vec<(u64, u64, Committed)>,
    /// The overshoot of all commits summed.
    overshoot: u64,
}

/// Plays `steps` on `p` from a fresh state at 1 ms: a reservation is kept when admitted; a
/// commit settles the last open reservation, if any.
fn replay(p: &Params, steps: Vec<Step>) -> Replayed {
    let mut state = State::Fresh;
    let mut now = 1_000_000u64;
    let mut out = Replayed {
        used: Vec::new(),
        commits: Vec::new(),
        overshoot: 0,
    };
    let mut open: Option<(usize, u64)> = None;
    for step in steps {
        match step {
            Step::Reserve { dt, q } => {
                now += dt;
                let (d, next) = p.decide(&state, now, q);
                if d.allowed && q > 0 {
                    state = next;
                    out.used.push((now, q, true));
                    open = Some((out.used.len() - 1, q));
                }
            }
            Step::Commit { dt, actual } => {
                now += dt;
                if let Some((i, reserved)) = open.take() {
                    let (done, next) = commit(p, &state, now, c(reserved, actual, out.used[i].0));
                    if let Some(next) = next {
                        state = next;
                    }
                    out.overshoot += done.overshoot;
                    // Refunded units leave the reservation; debited ones count at commit.
                    out.used[i].1 -= done.refunded;
                    if done.debited > 0 {
                        out.used.push((now, done.debited, false));
                    }
                    out.commits.push((reserved, actual, done));
                }
            }
        }
    }
    out
}

proptest! {
    /// Meters, with debt carried: over any span that ends with an admission, the units really
    /// used (each reservation at its actual cost, each debit at its commit) satisfy
    /// T × used ≤ T × capacity + span: nothing a commit debited is ever handed out again.
    #[test]
    fn meters_never_admit_units_already_spent(steps in tight_steps(), which in 0usize..3) {
        let p = meters(meter(100, 10))[which];
        let Replayed { used, .. } = replay(&p, steps);
        for i in 0..used.len() {
            let mut total = 0;
            for j in i..used.len() {
                total += used[j].1;
                let span = used[j].0 - used[i].0;
                if used[j].2 {
                    prop_assert!(
                        100 * total <= 100 * 10 + span,
                        "{:?} used {} in {} ns up to an admission", p, total, span
                    );
                }
            }
        }
    }

    /// Meters: over any two admissions i ≤ j, the units really used (reservations committed at
    /// their actual cost, taken at the reservation's time) satisfy T × used ≤ T × capacity +
    /// (t_j − t_i) + T × overshoot so far: the bound of the module docs.
    #[test]
    fn meters_hold_the_bound(steps in steps(), which in 0usize..3) {
        let p = meters(meter(100, 10))[which];
        let Replayed { used, commits, overshoot } = replay(&p, steps);
        for (reserved, actual, done) in commits {
            prop_assert!(done.refunded <= reserved.saturating_sub(actual));
            prop_assert_eq!(done.debited, actual.saturating_sub(reserved));
        }
        for i in 0..used.len() {
            let mut total = 0;
            for j in i..used.len() {
                total += used[j].1;
                let span = used[j].0 - used[i].0;
                prop_assert!(
                    100 * total <= 100 * (10 + overshoot) + span,
                    "{:?} used {} in {} ns, overshoot {}", p, total, span, overshoot
                );
            }
        }
    }

    /// Every algorithm: committed right after its reservation, a request leaves exactly what a
    /// reservation of its actual cost would have left.
    #[test]
    fn an_immediate_refund_equals_reserving_the_actual_cost(
        which in 0usize..6, reserved in 1u64..=10, actual in 0u64..=10, t in 0u64..5_000,
    ) {
        let p = all_params()[which];
        let now = 1_000 * MS + t * MS;
        let s = reserve(&p, &State::Fresh, now, reserved);
        let (done, next) = commit(&p, &s, now, c(reserved, actual, now));
        let after = next.unwrap_or(s);
        // A debit fills up to the actual cost here (it is at most the capacity).
        let direct = reserve(&p, &State::Fresh, now, actual);
        prop_assert_eq!(done.refunded, reserved.saturating_sub(actual));
        prop_assert_eq!(p.decide(&after, now, 0).0.remaining, p.decide(&direct, now, 0).0.remaining);
    }
}
