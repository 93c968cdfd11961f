//! Property tests of the six algorithms and of the rule's JSON form.
//!
//! Every case builds a valid rule (small capacities and windows so that cases are interesting,
//! or values near the limits of `core/src/limits.rs`), then replays a random history of requests
//! from a fresh key: times mostly increasing, sometimes equal, occasionally stepping back (a
//! clock step), quantities from 0 to just above the capacity. At every step, from the state the
//! history reached, it checks:
//!
//! - (b) after a denial with `retry_after = Some(r)`, the same request is still denied at
//!   `now + r − 1 ns` and allowed at `now + r`;
//! - (c) quantity 0 returns the input state and reports the level the request sees: a denial
//!   reports the same level and remaining, an admission of q reports level + q and remaining − q;
//!   and a request of q ≥ 1 passes exactly when q ≤ remaining;
//! - a denial returns the input state; a quantity above the capacity is denied with no retry;
//! - `reset_after` is exact: at `now + reset_after` a peek finds the key idle (level 0, remaining
//!   = capacity), and 1 ns before it is not yet idle.
//!
//! and at the end of the history, (a): no algorithm admitted more than its bound, where each
//! admission happens at its "effective time", the latest time of any admission so far (the
//! algorithms treat a clock stepping back as no time passing):
//! - meters: for every pair of admissions i ≤ j, T × (quantity admitted from i to j) ≤
//!   T × capacity + (t_j − t_i);
//! - fixed_window and sliding_window: ≤ capacity in each clock-aligned window, and for
//!   sliding_window, previous × (W − elapsed) ≤ (capacity − current) × W at every admission;
//! - sliding_log: ≤ capacity in every half-open interval (t − W, t] (and so in every [a, a + W)).
//!
//! (d) rules survive JSON round trips, and spans survive display/parse.

use proptest::prelude::*;
use sluice_core::limits::{
    MAX_CAPACITY, MAX_FIXED_WINDOW_SPAN_MS, MAX_HORIZON_NS, MAX_QUANTITY, MAX_RATE_COUNT,
    MAX_SLIDING_LOG_CAPACITY, MAX_SPAN_MS,
};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::{Algorithm, Decision, Limit, Mode, Params, Rate, Rule, Span, State};

const CASES: u32 = 500;

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Rules

fn build(
    algorithm: Algorithm,
    capacity: u64,
    count: u64,
    period_ms: u64,
    window_ms: u64,
) -> Option<Rule> {
    let limit = if algorithm.uses_rate() {
        Limit::Rate(Rate {
            count,
            period: Span::from_millis(period_ms)?,
        })
    } else {
        Limit::Window(Span::from_millis(window_ms)?)
    };
    Rule::new("act", algorithm, capacity, limit, Mode::Enforce, "").ok()
}

fn algorithm() -> impl Strategy<Value = Algorithm> {
    (0..6usize).prop_map(|i| Algorithm::ALL[i])
}

/// Small capacities, windows and periods: many denials, edges and refills per history.
fn small_rule() -> impl Strategy<Value = Rule> {
    (algorithm(), 1..=8u64, 1..=5u64, 1..=20u64, 1..=20u64)
        .prop_filter_map("valid", |(a, cap, count, period, window)| {
            build(a, cap, count, period, window)
        })
}

/// Values near the limits: the largest capacities, 7-day windows, bursts near the 90-day horizon.
fn large_rule() -> impl Strategy<Value = Rule> {
    let count = prop_oneof![Just(1u64), 1..=MAX_RATE_COUNT, Just(MAX_RATE_COUNT)];
    let period = prop_oneof![Just(MAX_SPAN_MS), 1..=MAX_SPAN_MS];
    (
        algorithm(),
        0..=1000u64,
        count,
        period,
        MAX_SPAN_MS - 1000..=MAX_SPAN_MS,
    )
        .prop_filter_map("valid", |(a, slack, count, period_ms, window_ms)| {
            let capacity = if a.uses_rate() {
                let interval = period_ms * NANOS_PER_MILLI / count;
                if interval == 0 {
                    return None;
                }
                (MAX_HORIZON_NS / interval)
                    .min(MAX_CAPACITY)
                    .saturating_sub(slack)
                    .max(1)
            } else {
                let max = if a == Algorithm::SlidingLog {
                    MAX_SLIDING_LOG_CAPACITY
                } else {
                    MAX_CAPACITY
                };
                max - slack
            };
            build(a, capacity, count, period_ms, window_ms)
        })
}

fn any_params() -> impl Strategy<Value = Params> {
    prop_oneof![4 => small_rule(), 1 => large_rule()].prop_map(|r| r.params())
}

// ---------------------------------------------------------------------------------------------
// Histories

/// One step of a history, in raw numbers scaled to the rule when replayed.
#[derive(Debug, Clone, Copy)]
struct Step {
    /// 0–1: same time; 2: back; 3: a jump of whole windows; otherwise forward.
    kind: u8,
    /// Gap in thousandths of the rule's "scale" (window or drain time per request).
    gap: u32,
    /// 0: zero; 1: one; 2: up to 3; otherwise a fraction (thousandths, up to 1.1) of capacity.
    q_kind: u8,
    q: u32,
}

fn steps(max: usize) -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (0..16u8, 0..=3000u32, 0..8u8, 0..=1100u32).prop_map(|(kind, gap, q_kind, q)| Step {
            kind,
            gap,
            q_kind,
            q,
        }),
        1..=max,
    )
}

/// A request: when and how much.
#[derive(Debug, Clone, Copy)]
struct Request {
    now: u64,
    quantity: u64,
}

/// Turns raw steps into requests for `p`, starting at `t0`.
fn requests(p: &Params, t0: u64, steps: &[Step]) -> Vec<Request> {
    let cap = p.capacity();
    let span = p.policy_window_ns();
    let scale = (span / cap).max(1);
    let mut now = t0;
    steps
        .iter()
        .map(|s| {
            let gap = u64::from(s.gap) * (scale / 1000) + u64::from(s.gap) * (scale % 1000) / 1000;
            now = match s.kind {
                0 | 1 => now,
                2 => now.saturating_sub(gap),
                3 => now + span * u64::from(s.gap % 3) + gap,
                _ => now + gap,
            };
            let quantity = match s.q_kind {
                0 => 0,
                1 => 1,
                2 => u64::from(s.q % 4),
                _ => (cap * u64::from(s.q)).div_ceil(1000),
            };
            Request { now, quantity }
        })
        .collect()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The per-step checks (b), (c), denials, reset; returns what was admitted.
fn replay(p: &Params, reqs: &[Request]) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let cap = p.capacity();
    let mut state = State::Fresh;
    let mut admitted = Vec::new();
    let mut effective = 0u64;
    for r in reqs {
        let (now, q) = (r.now, r.quantity);
        let (d, next) = p.decide(&state, now, q);
        prop_assert_eq!(d.capacity, cap);

        // (c) A peek changes nothing and sees what the request sees.
        let (peek, after_peek) = p.decide(&state, now, 0);
        prop_assert_eq!(&after_peek, &state, "quantity 0 changed the state");
        prop_assert_eq!(p.decide(&state, now, 0).0, peek, "two peeks differ");
        if q >= 1 {
            prop_assert_eq!(
                d.allowed,
                q <= peek.remaining,
                "allowed must mean q <= remaining: {:?} vs {:?}",
                d,
                peek
            );
        }
        if d.allowed {
            prop_assert!(
                close(d.level, peek.level + q as f64),
                "level {} != peek {} + {}",
                d.level,
                peek.level,
                q
            );
            prop_assert_eq!(d.remaining, peek.remaining - q);
            prop_assert_eq!(d.retry_after, None);
        } else {
            prop_assert!(
                close(d.level, peek.level),
                "a denial reports level {} but a peek {}",
                d.level,
                peek.level
            );
            prop_assert_eq!(d.remaining, peek.remaining);
            prop_assert_eq!(&next, &state, "a denial changed the state");
        }

        // A quantity above the capacity can never pass.
        let (over, over_state) = p.decide(&state, now, cap + 1);
        prop_assert!(
            !over.allowed && over.retry_after.is_none(),
            "capacity + 1: {:?}",
            over
        );
        prop_assert_eq!(&over_state, &state);

        // (b) retry_after is exact.
        if let Some(retry) = d.retry_after {
            prop_assert!(retry > 0);
            let (early, _) = p.decide(&state, now + retry - 1, q);
            prop_assert!(
                !early.allowed,
                "allowed 1 ns before retry_after {} (now {}, q {})",
                retry,
                now,
                q
            );
            let (on_time, _) = p.decide(&state, now + retry, q);
            prop_assert!(
                on_time.allowed,
                "denied at retry_after {} (now {}, q {}): {:?}",
                retry,
                now,
                q,
                on_time
            );
        } else if !d.allowed {
            prop_assert!(
                q > cap,
                "denied with no retry_after although q {} <= capacity {}",
                q,
                cap
            );
        }

        // reset_after is exact: idle then, not idle 1 ns before.
        let idle_at = now + peek.reset_after;
        let (idle, _) = p.decide(&state, idle_at, 0);
        prop_assert!(
            idle.level == 0.0 && idle.remaining == cap,
            "not idle at reset_after {}: {:?}",
            peek.reset_after,
            idle
        );
        if peek.reset_after > 0 {
            let (busy, _) = p.decide(&state, idle_at - 1, 0);
            prop_assert!(
                busy.level > 0.0,
                "already idle 1 ns before reset_after {}",
                peek.reset_after
            );
        }

        if d.allowed && q > 0 {
            effective = effective.max(now);
            admitted.push((effective, q));
        }
        state = next;
    }
    Ok(admitted)
}

/// (a) The bound of each algorithm over everything admitted, at effective times.
fn check_bound(p: &Params, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    match *p {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => {
            let t = u128::from(m.interval);
            for i in 0..admitted.len() {
                let mut sum = 0u128;
                for j in i..admitted.len() {
                    sum += u128::from(admitted[j].1);
                    let span = u128::from(admitted[j].0 - admitted[i].0);
                    prop_assert!(
                        sum * t <= t * u128::from(m.capacity) + span,
                        "admitted {} in {} ns (T = {}, capacity {})",
                        sum,
                        span,
                        t,
                        m.capacity
                    );
                }
            }
        }
        Params::FixedWindow(w) => {
            let window = w.window_ns();
            for (i, &(t, _)) in admitted.iter().enumerate() {
                let in_window: u64 = admitted[..=i]
                    .iter()
                    .filter(|(u, _)| u / window == t / window)
                    .map(|x| x.1)
                    .sum();
                prop_assert!(
                    in_window <= w.capacity,
                    "{} in one fixed window of capacity {}",
                    in_window,
                    w.capacity
                );
            }
        }
        Params::SlidingWindow(w) => {
            let ms = |t: u64| t / NANOS_PER_MILLI;
            for (i, &(t, _)) in admitted.iter().enumerate() {
                let index = ms(t) / w.window_ms;
                let elapsed = ms(t) % w.window_ms;
                let sum_in = |k: u64| -> u64 {
                    admitted[..=i]
                        .iter()
                        .filter(|(u, _)| ms(*u) / w.window_ms == k)
                        .map(|x| x.1)
                        .sum()
                };
                let current = sum_in(index);
                let previous = if index > 0 { sum_in(index - 1) } else { 0 };
                prop_assert!(
                    current <= w.capacity,
                    "{} in one window of capacity {}",
                    current,
                    w.capacity
                );
                prop_assert!(
                    u128::from(previous) * u128::from(w.window_ms - elapsed)
                        <= u128::from(w.capacity - current) * u128::from(w.window_ms),
                    "weighted count over capacity: previous {}, current {}, elapsed {} of {} ms",
                    previous,
                    current,
                    elapsed,
                    w.window_ms
                );
            }
        }
        Params::SlidingLog(w) => {
            let window = w.window_ns();
            for (i, &(t, _)) in admitted.iter().enumerate() {
                let in_window: u64 = admitted[..=i]
                    .iter()
                    .filter(|(u, _)| u + window > t)
                    .map(|x| x.1)
                    .sum();
                prop_assert!(
                    in_window <= w.capacity,
                    "{} in ({} - W, {}] for capacity {}",
                    in_window,
                    t,
                    t,
                    w.capacity
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(CASES))]

    /// (a), (b), (c), denials and reset_after on random histories.
    #[test]
    fn histories_respect_every_property(p in any_params(), t0 in (1u64 << 40)..(1u64 << 61), steps in steps(40)) {
        let reqs = requests(&p, t0, &steps);
        let admitted = replay(&p, &reqs)?;
        check_bound(&p, &admitted)?;
    }

    /// A denial cache is sound: an admission between a denial and its retry time (another caller,
    /// a smaller quantity) never lets the denied request through before now + retry_after.
    #[test]
    fn a_write_never_shortens_a_denial(
        p in any_params(), t0 in (1u64 << 40)..(1u64 << 61), steps in steps(30),
        at in 0u64..1000, q2 in 1u64..=3, probe in 0u64..1000,
    ) {
        let reqs = requests(&p, t0, &steps);
        let mut state = State::Fresh;
        for r in reqs {
            let (d, next) = p.decide(&state, r.now, r.quantity);
            if let Some(retry) = d.retry_after {
                // An admission at some moment within the denial...
                let write_at = r.now + retry * at / 1000;
                let (w, written) = p.decide(&state, write_at, q2);
                if w.allowed {
                    // ...after which the denied request stays denied until now + retry_after.
                    let later = write_at + (r.now + retry - 1 - write_at) * probe / 1000;
                    for t in [write_at, later, r.now + retry - 1] {
                        prop_assert!(!p.decide(&written, t, r.quantity).0.allowed,
                            "q {} denied at {} for {} ns, but allowed at {} after admitting {} at {}",
                            r.quantity, r.now, retry, t, q2, write_at);
                    }
                }
            }
            state = next;
        }
    }

    /// Only forward time, many requests per window: the bound is approached, not just respected.
    #[test]
    fn dense_forward_histories_hit_their_bound(p in small_rule().prop_map(|r| r.params()), t0 in 0u64..(1u64 << 61), steps in steps(60)) {
        let forward: Vec<Step> = steps.into_iter().map(|s| Step { kind: if s.kind == 2 { 0 } else { s.kind }, ..s }).collect();
        let reqs = requests(&p, t0, &forward);
        let admitted = replay(&p, &reqs)?;
        check_bound(&p, &admitted)?;
    }

    /// gcra, leaky_bucket and token_bucket admit exactly the same requests, with the same
    /// remaining, retry and reset, on the same traffic (time not going back).
    #[test]
    fn the_three_meters_agree(capacity in 1..=8u64, count in 1..=5u64, period_ms in 1..=20u64, t0 in 0u64..(1u64 << 61), steps in steps(60)) {
        let rules: Vec<Params> = [Algorithm::Gcra, Algorithm::LeakyBucket, Algorithm::TokenBucket]
            .into_iter()
            .map(|a| build(a, capacity, count, period_ms, 0).map(|r| r.params()))
            .collect::<Option<_>>()
            .ok_or_else(|| TestCaseError::reject("invalid"))?;
        let forward: Vec<Step> = steps.into_iter().map(|s| Step { kind: if s.kind == 2 { 0 } else { s.kind }, ..s }).collect();
        let reqs = requests(&rules[0], t0, &forward);
        let mut states = vec![State::Fresh; 3];
        for r in reqs {
            let ds: Vec<Decision> = rules.iter().zip(states.iter_mut()).map(|(p, s)| {
                let (d, next) = p.decide(s, r.now, r.quantity);
                *s = next;
                d
            }).collect();
            for d in &ds[1..] {
                prop_assert_eq!(
                    (d.allowed, d.remaining, d.retry_after, d.reset_after),
                    (ds[0].allowed, ds[0].remaining, ds[0].retry_after, ds[0].reset_after)
                );
                prop_assert!(close(d.level, ds[0].level));
            }
        }
    }

    /// No panic for any time up to 2^62 in any order and any quantity up to 10^9.
    #[test]
    fn decisions_never_panic(
        p in any_params(),
        calls in prop::collection::vec((0u64..=(1u64 << 62), prop_oneof![0u64..=16, 0u64..=MAX_QUANTITY, Just(MAX_QUANTITY)]), 1..30),
    ) {
        let mut state = State::Fresh;
        for (now, quantity) in calls {
            let quantity = if matches!(p, Params::SlidingLog(_)) && quantity > p.capacity() && quantity % 2 == 0 {
                quantity % (p.capacity() + 1) // keep sliding_log admissions (one entry each) bounded
            } else {
                quantity
            };
            let (d, next) = p.decide(&state, now, quantity);
            prop_assert!(d.level.is_finite());
            state = next;
        }
    }

    /// A rule wrong for the stored state's algorithm (the rule changed) treats it as fresh.
    #[test]
    fn a_state_of_another_algorithm_counts_as_fresh(a in any_params(), b in any_params(), now in 0u64..(1u64 << 61), q in 0u64..=3) {
        let (_, sa) = a.decide(&State::Fresh, now, 1);
        if a.algorithm() != b.algorithm() {
            let (d1, _) = b.decide(&sa, now, q);
            let (d2, _) = b.decide(&State::Fresh, now, q);
            prop_assert_eq!(d1, d2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// (d) JSON round trips

fn any_span() -> impl Strategy<Value = Span> {
    let units = prop_oneof![
        Just(1u64),
        Just(1_000),
        Just(60_000),
        Just(3_600_000),
        Just(86_400_000)
    ];
    prop_oneof![
        (1..=MAX_SPAN_MS).prop_map(Some),
        (units, 1..=10_000u64).prop_map(|(u, n)| Some(u * n)),
    ]
    .prop_filter_map("in range", |ms| ms.and_then(Span::from_millis))
}

fn any_rule() -> impl Strategy<Value = Rule> {
    (
        "[A-Za-z0-9_.:-]{1,64}",
        algorithm(),
        prop_oneof![1..=10u64, 1..=MAX_CAPACITY],
        prop_oneof![1..=10u64, 1..=MAX_RATE_COUNT],
        any_span(),
        prop_oneof![Just(Mode::Enforce), Just(Mode::Shadow)],
        prop_oneof![Just(String::new()), "\\PC{0,40}", ".{0,300}"],
    )
        .prop_filter_map(
            "valid",
            |(action, algorithm, capacity, count, span, mode, description)| {
                let capacity = if algorithm == Algorithm::SlidingLog {
                    capacity.min(MAX_SLIDING_LOG_CAPACITY)
                } else {
                    capacity
                };
                let limit = if algorithm.uses_rate() {
                    Limit::Rate(Rate {
                        count,
                        period: span,
                    })
                } else {
                    Limit::Window(span)
                };
                Rule::new(&action, algorithm, capacity, limit, mode, &description).ok()
            },
        )
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn rules_survive_json_round_trips(rule in any_rule()) {
        prop_assert_eq!(Rule::from_json(&rule.to_json()), Ok(rule.clone()));
        let text = serde_json::to_string(&rule).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back: Rule = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&back, &rule);
        prop_assert_eq!(Rule::from_json_str(&text), Ok(rule.clone()));
        // Pretty-printed text too, and the params follow the rule.
        let pretty = serde_json::to_string_pretty(&rule).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(Rule::from_json_str(&pretty).map(|r| r.params()), Ok(rule.params()));
    }

    #[test]
    fn spans_survive_display_and_parse(span in any_span()) {
        let text = span.to_string();
        prop_assert_eq!(Span::parse(&text), Ok(span));
        prop_assert_eq!(text.parse::<Span>(), Ok(span));
        let json = serde_json::to_string(&span).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(serde_json::from_str::<Span>(&json).ok(), Some(span));
        // Displayed in the largest exact unit: the number never ends in a whole larger unit.
        let digits: u64 = text.trim_end_matches(char::is_alphabetic).parse().map_err(|_| TestCaseError::fail("digits"))?;
        let unit = &text[text.len() - text.trim_start_matches(char::is_numeric).len()..];
        let next_up = match unit { "ms" => Some(1000), "s" | "m" => Some(60), "h" => Some(24), _ => None };
        if let Some(n) = next_up {
            prop_assert!(!digits.is_multiple_of(n), "{} is not in its largest exact unit", text);
        }
    }

    #[test]
    fn span_parse_accepts_any_in_range_number_of_any_unit(n in 0u64..=1_000_000_000, unit in prop_oneof![Just("ms"), Just("s"), Just("m"), Just("h"), Just("d")]) {
        let per = match unit { "ms" => 1, "s" => 1000, "m" => 60_000, "h" => 3_600_000, _ => 86_400_000 };
        let parsed = Span::parse(&format!("{n}{unit}"));
        let ms = n * per;
        prop_assert_eq!(parsed.is_ok(), (1..=MAX_FIXED_WINDOW_SPAN_MS).contains(&ms));
        if let Ok(span) = parsed {
            prop_assert_eq!(span.millis(), ms);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The generators are interesting: a property over histories that never deny would prove little.

#[test]
fn generated_histories_exercise_denials_retries_and_clock_steps_for_every_algorithm() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    use std::collections::HashMap;

    let mut runner = TestRunner::deterministic();
    let strategy = (any_params(), (1u64 << 40)..(1u64 << 61), steps(40));
    // Per algorithm: [cases, admissions, denials with a retry, denials with none, steps back, large cases]
    let mut seen: HashMap<Algorithm, [u64; 6]> = HashMap::new();
    for _ in 0..600 {
        let (p, t0, raw) = strategy.new_tree(&mut runner).expect("generate").current();
        let counts = seen.entry(p.algorithm()).or_default();
        counts[0] += 1;
        counts[5] += u64::from(p.capacity() > 1000);
        let reqs = requests(&p, t0, &raw);
        counts[4] += reqs.windows(2).filter(|w| w[1].now < w[0].now).count() as u64;
        let mut state = State::Fresh;
        for r in &reqs {
            let (d, next) = p.decide(&state, r.now, r.quantity);
            match (d.allowed, d.retry_after) {
                (true, _) => counts[1] += 1,
                (false, Some(_)) => counts[2] += 1,
                (false, None) => counts[3] += 1,
            }
            state = next;
        }
    }
    for algorithm in Algorithm::ALL {
        let c = seen.get(&algorithm).copied().unwrap_or_default();
        assert!(c[0] >= 40, "{algorithm}: only {} cases", c[0]);
        assert!(
            c[1] >= 200 && c[2] >= 100 && c[3] >= 10,
            "{algorithm}: admitted {}, retry {}, never {}",
            c[1],
            c[2],
            c[3]
        );
        assert!(c[4] >= 20, "{algorithm}: only {} clock steps back", c[4]);
        assert!(c[5] >= 5, "{algorithm}: only {} large cases", c[5]);
    }
}
