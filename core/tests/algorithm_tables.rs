//! Per-algorithm tables at fixed times: a sequence of (time, quantity) from a fresh key, and for
//! each call the expected allowed, remaining, retry_after, reset_after and level.
//!
//! Times are milliseconds after T0 (midnight UTC, 2024-01-01), which is aligned to every window
//! used here, so "window 1" of a 1 s window is [T0 + 1000 ms, T0 + 2000 ms).

// An integration-test crate: clippy.toml lets #[test] functions unwrap, but not the helpers
// beside them, so the crate root allows it. A panic here is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use sluice_core::{Decision, Params, Rule, State};

const MS: u64 = 1_000_000;
const T0: u64 = 1_704_067_200_000 * MS;

/// One call and what it must answer. Durations in milliseconds.
struct Row {
    at_ms: u64,
    quantity: u64,
    allowed: bool,
    remaining: u64,
    retry_ms: Option<u64>,
    reset_ms: u64,
    level: f64,
}

#[allow(clippy::too_many_arguments)]
const fn row(
    at_ms: u64,
    quantity: u64,
    allowed: bool,
    remaining: u64,
    retry_ms: Option<u64>,
    reset_ms: u64,
    level: f64,
) -> Row {
    Row {
        at_ms,
        quantity,
        allowed,
        remaining,
        retry_ms,
        reset_ms,
        level,
    }
}

fn params(rule: Value) -> Params {
    Rule::from_json(&rule).expect("valid rule").params()
}

fn decide(p: &Params, state: &State, at_ms: u64, quantity: u64) -> (Decision, State) {
    p.decide(state, T0 + at_ms * MS, quantity)
}

/// Runs the rows in order from a fresh key, checking every field of every decision.
fn run(name: &str, p: Params, rows: &[Row]) -> State {
    let mut state = State::Fresh;
    for (i, r) in rows.iter().enumerate() {
        let (d, next) = decide(&p, &state, r.at_ms, r.quantity);
        let got = (d.allowed, d.remaining, d.retry_after, d.reset_after);
        let want = (
            r.allowed,
            r.remaining,
            r.retry_ms.map(|m| m * MS),
            r.reset_ms * MS,
        );
        assert_eq!(
            got,
            want,
            "{name} row {} (t={} ms, q={}): (allowed, remaining, retry, reset)",
            i + 1,
            r.at_ms,
            r.quantity
        );
        assert!(
            (d.level - r.level).abs() < 1e-9,
            "{name} row {}: level {} != {}",
            i + 1,
            d.level,
            r.level
        );
        assert_eq!(d.capacity, p.capacity());
        if !d.allowed || r.quantity == 0 {
            assert_eq!(
                next,
                state,
                "{name} row {}: a denial or a peek must not change state",
                i + 1
            );
        }
        state = next;
    }
    state
}

// ---------------------------------------------------------------------------------------------
// fixed_window

#[test]
fn fixed_window_table() {
    let p =
        params(json!({"action": "a", "algorithm": "fixed_window", "capacity": 3, "window": "1s"}));
    run(
        "fixed_window",
        p,
        &[
            row(0, 1, true, 2, None, 1000, 1.0),
            row(900, 2, true, 0, None, 100, 3.0),
            // Full: the same request waits for the window edge at 1000 ms.
            row(999, 1, false, 0, Some(1), 1, 3.0),
            // The edge: a fresh count. 6 requests passed within 100 ms (900..1000): the documented
            // burst of 2 × capacity across a window edge.
            row(1000, 3, true, 0, None, 1000, 3.0),
            // More than the capacity can never pass: no retry_after.
            row(1500, 4, false, 0, None, 500, 3.0),
            // Two windows later: idle.
            row(2500, 0, true, 3, None, 0, 0.0),
        ],
    );
}

#[test]
fn fixed_window_admits_twice_its_capacity_across_an_edge() {
    let p =
        params(json!({"action": "a", "algorithm": "fixed_window", "capacity": 5, "window": "60s"}));
    let mut state = State::Fresh;
    let mut admitted = 0;
    // 5 at the last millisecond of window 0, 5 at the first of window 1: 10 within 1 ms.
    for at_ms in [59_999, 60_000] {
        let (d, next) = decide(&p, &state, at_ms, 5);
        assert!(d.allowed, "at {at_ms} ms");
        admitted += 5;
        state = next;
    }
    assert_eq!(admitted, 2 * p.capacity());
    // But never more than capacity inside one clock-aligned window.
    let (d, _) = decide(&p, &state, 119_999, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(MS));
}

// ---------------------------------------------------------------------------------------------
// sliding_log

#[test]
fn sliding_log_table() {
    let p =
        params(json!({"action": "a", "algorithm": "sliding_log", "capacity": 3, "window": "1s"}));
    run(
        "sliding_log",
        p,
        &[
            row(0, 1, true, 2, None, 1000, 1.0),
            row(100, 1, true, 1, None, 1000, 2.0),
            row(200, 1, true, 0, None, 1000, 3.0),
            // Full: the oldest entry (0 ms) expires at 1000 ms.
            row(300, 1, false, 0, Some(700), 900, 3.0),
            row(999, 1, false, 0, Some(1), 201, 3.0),
            // Entry 0 has expired exactly (0 + 1000 is not > 1000): one slot.
            row(1000, 1, true, 0, None, 1000, 3.0),
            // Two slots need entries 100 and 200 gone: at 1200 ms.
            row(1050, 2, false, 0, Some(150), 950, 3.0),
            // Entry 100 has gone: one free slot, and the second needs entry 200 gone.
            row(1199, 2, false, 1, Some(1), 801, 2.0),
            row(1200, 2, true, 0, None, 1000, 3.0),
            row(1200, 4, false, 0, None, 1000, 3.0),
        ],
    );
}

#[test]
fn sliding_log_is_exact_where_fixed_window_bursts() {
    // Same traffic as fixed_window_admits_twice_its_capacity_across_an_edge.
    let p =
        params(json!({"action": "a", "algorithm": "sliding_log", "capacity": 5, "window": "60s"}));
    let (d, s) = decide(&p, &State::Fresh, 59_999, 5);
    assert!(d.allowed);
    let (d, _) = decide(&p, &s, 60_000, 5);
    assert!(!d.allowed, "no window of 60 s may hold more than 5");
    assert_eq!(d.retry_after, Some(59_999 * MS));
}

// ---------------------------------------------------------------------------------------------
// sliding_window

#[test]
fn sliding_window_table() {
    let p = params(
        json!({"action": "a", "algorithm": "sliding_window", "capacity": 10, "window": "1s"}),
    );
    run(
        "sliding_window",
        p,
        &[
            // Window 1 (1000..2000 ms) takes 10. Reset: when window 1 stops weighing, at 3000 ms.
            row(1100, 10, true, 0, None, 1900, 10.0),
            // Full in window 1; in window 2 the previous 10 weigh 10 × (1000 − e) / 1000, and one
            // more fits when that is ≤ 9: e ≥ 100 ms, at 2100 ms.
            row(1500, 1, false, 0, Some(600), 1500, 10.0),
            // 25% into window 2 the previous 10 weigh 7.5: 2 more fit (9.5 ≤ 10)...
            row(2250, 2, true, 0, None, 1750, 9.5),
            // ...a third needs 7 ≥ 10 × (1000 − e) / 1000: e ≥ 300 ms.
            row(2250, 1, false, 0, Some(50), 1750, 9.5),
            row(2300, 1, true, 0, None, 1700, 10.0),
            // At 60% the previous weighs 4: 3 of 10 free (remaining rounds the weight up).
            row(2600, 0, true, 3, None, 1400, 7.0),
            row(2600, 11, false, 3, None, 1400, 7.0),
            // Window 3: window 2's 3 weigh 3 × 0.5.
            row(3500, 0, true, 8, None, 500, 1.5),
            // Window 5: idle.
            row(5000, 0, true, 10, None, 0, 0.0),
        ],
    );
}

#[test]
fn sliding_window_weighs_the_previous_window_where_fixed_window_would_not() {
    let sliding = params(
        json!({"action": "a", "algorithm": "sliding_window", "capacity": 10, "window": "1s"}),
    );
    let fixed =
        params(json!({"action": "a", "algorithm": "fixed_window", "capacity": 10, "window": "1s"}));
    let (_, s) = decide(&sliding, &State::Fresh, 1999, 10);
    let (_, f) = decide(&fixed, &State::Fresh, 1999, 10);
    // 1 ms into window 2: the previous 10 still weigh 9.99.
    assert!(decide(&fixed, &f, 2001, 10).0.allowed);
    assert!(!decide(&sliding, &s, 2001, 1).0.allowed);
    // Halfway through window 2 they weigh 5: exactly 5 more fit.
    assert!(decide(&sliding, &s, 2500, 5).0.allowed);
    assert!(!decide(&sliding, &s, 2500, 6).0.allowed);
}

// ---------------------------------------------------------------------------------------------
// The three meters: one table, because they are the same meter seen three ways.

/// Capacity 3, one request per second, continuous leak/refill.
fn meter_rows() -> Vec<Row> {
    vec![
        row(0, 3, true, 0, None, 3000, 3.0),
        // 1.5 requests have drained.
        row(1500, 1, true, 0, None, 2500, 2.5),
        // Half a request more has drained since: 2.0 + 1 fits. (The textbook funnel that skips
        // the leak until a whole request has drained would still be at 3 and deny this.)
        row(2000, 1, true, 0, None, 3000, 3.0),
        // 2.75 + 1 is 0.75 too much: wait 750 ms.
        row(2250, 1, false, 0, Some(750), 2750, 2.75),
        row(2250, 0, true, 0, None, 2750, 2.75),
        row(2999, 1, false, 0, Some(1), 2001, 2.001),
        row(3000, 1, true, 0, None, 3000, 3.0),
        // Long idle: empty, never below zero.
        row(10_000, 2, true, 1, None, 2000, 2.0),
        row(10_000, 4, false, 1, None, 2000, 2.0),
        row(10_500, 0, true, 1, None, 1500, 1.5),
    ]
}

fn meter(algorithm: &str) -> Params {
    params(
        json!({"action": "a", "algorithm": algorithm, "capacity": 3, "rate": {"count": 1, "period": "1s"}}),
    )
}

#[test]
fn gcra_table() {
    run("gcra", meter("gcra"), &meter_rows());
}

#[test]
fn leaky_bucket_table() {
    run("leaky_bucket", meter("leaky_bucket"), &meter_rows());
}

#[test]
fn token_bucket_table() {
    run("token_bucket", meter("token_bucket"), &meter_rows());
}

#[test]
fn leaky_bucket_leaks_between_whole_requests() {
    let p = meter("leaky_bucket");
    let (_, s) = decide(&p, &State::Fresh, 0, 3);
    let (d, s) = decide(&p, &s, 1500, 1);
    assert!(d.allowed);
    // Only half a request has leaked since 1500 ms, but the leak at 1500 ms kept its half.
    let (d, _) = decide(&p, &s, 2000, 1);
    assert!(
        d.allowed,
        "the half request leaked before 1500 ms must not be lost"
    );
    // And 1 ns of leak already shows in the level.
    let (d, _) = decide(&p, &s, 1500, 0);
    let (d2, _) = p.decide(&s, T0 + 1500 * MS + 1, 0);
    assert!(d2.level < d.level);
}

#[test]
fn token_bucket_refills_continuously_not_in_whole_tokens() {
    let p = meter("token_bucket");
    let (_, s) = decide(&p, &State::Fresh, 0, 3);
    // 999 ms after emptying: 0.999 tokens, one request must wait exactly 1 ms.
    let (d, _) = decide(&p, &s, 999, 1);
    assert_eq!(d.retry_after, Some(MS));
    assert!((d.level - 2.001).abs() < 1e-9);
    // A partial refill is never thrown away by a request that takes a whole token.
    let (_, s) = decide(&p, &s, 1500, 1);
    assert!(decide(&p, &s, 2000, 1).0.allowed);
}

/// A small deterministic pseudo-random generator (no dependency, same sequence every run).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

#[test]
fn gcra_leaky_bucket_and_token_bucket_admit_the_same_requests() {
    for (capacity, count, period) in [
        (1, 1, "1s"),
        (3, 1, "1s"),
        (16, 30, "60s"),
        (7, 1000, "1s"),
        (100, 3, "7ms"),
    ] {
        let rule = |algorithm: &str| {
            params(
                json!({"action": "a", "algorithm": algorithm, "capacity": capacity,
                "rate": {"count": count, "period": period}}),
            )
        };
        let all = [rule("gcra"), rule("leaky_bucket"), rule("token_bucket")];
        let interval = match all[0] {
            Params::Gcra(m) => m.interval,
            _ => unreachable!(),
        };
        let mut states = [State::Fresh, State::Fresh, State::Fresh];
        let mut rng = Lcg(capacity * 1_000 + count);
        let mut now = T0;
        let (mut allowed, mut denied) = (0, 0);
        for _ in 0..3_000 {
            // Gaps from 0 up to about two intervals, often exactly equal times.
            now += rng.next(2 * interval + 1) * u64::from(rng.next(4) != 0);
            let quantity = rng.next(capacity + 2);
            let decisions: Vec<Decision> = all
                .iter()
                .zip(states.iter_mut())
                .map(|(p, s)| {
                    let (d, next) = p.decide(s, now, quantity);
                    *s = next;
                    d
                })
                .collect();
            for d in &decisions[1..] {
                let a = &decisions[0];
                assert_eq!(
                    (d.allowed, d.remaining, d.retry_after, d.reset_after),
                    (a.allowed, a.remaining, a.retry_after, a.reset_after),
                    "{capacity} per {count}/{period} at {now}, quantity {quantity}"
                );
                assert!((d.level - a.level).abs() < 1e-6);
            }
            if decisions[0].allowed {
                allowed += 1;
            } else {
                denied += 1;
            }
        }
        assert!(
            allowed > 100 && denied > 100,
            "the traffic must exercise both answers: {allowed}/{denied}"
        );
    }
}
