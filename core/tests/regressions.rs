//! Regression tests, each named after the behaviour it pins. Those whose doc comment names a fix
//! failed before it (found by core/tests/properties.rs); the others pin a promise of
//! docs/algorithms.md.

// An integration-test crate: clippy.toml lets #[test] functions unwrap, but not the helpers
// beside them, so the crate root allows it. A panic here is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_core::algorithms::{gcra, leaky_bucket, token_bucket};
use sluice_core::{Algorithm, Limit, Mode, Params, Rate, Rule, Span, State};

/// The meter of the clock-step-back regressions: 2 requests, one per 1000 ns.
const STEPPED_BACK: sluice_core::MeterParams = sluice_core::MeterParams {
    interval: 1000,
    capacity: 2,
};

fn rule_params(algorithm: Algorithm) -> Params {
    let limit = if algorithm.uses_rate() {
        Limit::Rate(Rate {
            count: 1,
            period: Span::parse("1s").expect("span"),
        })
    } else {
        Limit::Window(Span::parse("1s").expect("span"))
    };
    Rule::new("a", algorithm, 2, limit, Mode::Enforce, "")
        .expect("valid")
        .params()
}

/// `Params::decide` used to turn `State::Fresh` into an equivalent default of the algorithm
/// (`FixedWindow { start: 0, count: 0 }`, `TokenBucket(full)`, ...) on a peek, breaking "quantity 0
/// never changes state".
#[test]
fn peeking_a_fresh_key_leaves_it_fresh() {
    for algorithm in Algorithm::ALL {
        let (d, next) = rule_params(algorithm).decide(&State::Fresh, 1_000_000_000_000, 0);
        assert!(d.allowed, "{algorithm}");
        assert_eq!(next, State::Fresh, "{algorithm}");
    }
}

/// Same fix: a denial (here a quantity above the capacity) of a fresh key returned a non-fresh
/// state, breaking "a denial never changes state".
#[test]
fn a_denial_of_a_fresh_key_leaves_it_fresh() {
    for algorithm in Algorithm::ALL {
        let (d, next) = rule_params(algorithm).decide(&State::Fresh, 1_000_000_000_000, 3);
        assert!(!d.allowed, "{algorithm}");
        assert_eq!(next, State::Fresh, "{algorithm}");
    }
}

/// A peek under a rule whose algorithm changed hands back the old state untouched (it is still
/// read as fresh by the new algorithm).
#[test]
fn peeking_under_a_changed_algorithm_keeps_the_stored_state() {
    let (_, gcra_state) = rule_params(Algorithm::Gcra).decide(&State::Fresh, 5, 1);
    let (_, next) = rule_params(Algorithm::SlidingWindow).decide(&gcra_state, 5, 0);
    assert_eq!(next, gcra_state);
}

/// leaky_bucket treats a clock step back as no time passing: the level is as it was at `last`.
/// Its retry_after used to ignore that the clock first has to get back to `last`, so the same
/// request was still denied at now + retry_after.
#[test]
fn leaky_bucket_retry_after_waits_for_the_clock_to_catch_up_after_a_step_back() {
    let p = STEPPED_BACK;
    let (_, full) = leaky_bucket::decide(p, leaky_bucket::LeakyState::default(), 10_000, 2);
    // 1000 ns earlier than the last admission: nothing has leaked, one request is 1000 too much.
    let (d, _) = leaky_bucket::decide(p, full, 9_000, 1);
    assert_eq!(d.retry_after, Some(2_000));
    assert!(!leaky_bucket::decide(p, full, 9_000 + 1_999, 1).0.allowed);
    assert!(leaky_bucket::decide(p, full, 9_000 + 2_000, 1).0.allowed);
}

/// Same for reset_after: the funnel is empty at last + level, not at now + level.
#[test]
fn leaky_bucket_reset_after_waits_for_the_clock_to_catch_up_after_a_step_back() {
    let p = STEPPED_BACK;
    let (_, full) = leaky_bucket::decide(p, leaky_bucket::LeakyState::default(), 10_000, 2);
    let (d, _) = leaky_bucket::decide(p, full, 9_000, 0);
    assert_eq!(d.reset_after, 3_000);
    assert!((d.level - 2.0).abs() < 1e-12);
    assert_eq!(leaky_bucket::decide(p, full, 12_000, 0).0.level, 0.0);
}

/// token_bucket, the same clock-step-back fix for retry_after.
#[test]
fn token_bucket_retry_after_waits_for_the_clock_to_catch_up_after_a_step_back() {
    let p = STEPPED_BACK;
    let (_, empty) = token_bucket::decide(p, token_bucket::TokenState::full(p), 10_000, 2);
    let (d, _) = token_bucket::decide(p, empty, 9_000, 1);
    assert_eq!(d.retry_after, Some(2_000));
    assert!(!token_bucket::decide(p, empty, 9_000 + 1_999, 1).0.allowed);
    assert!(token_bucket::decide(p, empty, 9_000 + 2_000, 1).0.allowed);
}

/// token_bucket, the same clock-step-back fix for reset_after.
#[test]
fn token_bucket_reset_after_waits_for_the_clock_to_catch_up_after_a_step_back() {
    let p = STEPPED_BACK;
    let (_, empty) = token_bucket::decide(p, token_bucket::TokenState::full(p), 10_000, 2);
    let (d, _) = token_bucket::decide(p, empty, 9_000, 0);
    assert_eq!(d.reset_after, 3_000);
    assert_eq!(token_bucket::decide(p, empty, 12_000, 0).0.remaining, 2);
}

/// docs/algorithms.md promises a per-key state of at most 40 bytes in the memory store (plus 8
/// bytes per sliding_log entry).
#[test]
fn per_key_state_stays_within_forty_bytes() {
    assert!(
        std::mem::size_of::<State>() <= 40,
        "State is {} bytes",
        std::mem::size_of::<State>()
    );
    assert_eq!(std::mem::size_of::<sluice_core::Nanos>(), 8);
}

/// gcra used to add the increment to the absolute TAT (`max(now, tat) + increment`) and compare
/// it with `now + tolerance`, both saturating at u64::MAX: with a 292-year tolerance (what
/// `cl.throttle` now accepts, as redis-cell does) and a TAT that far ahead, retry_after came out
/// short, and a request 1 ns before its time saw both sides saturate and was admitted. It now
/// works relative to now, where nothing exceeds tolerance + increment < 2^64.
#[test]
fn gcra_is_exact_with_a_tat_centuries_ahead() {
    let p = sluice_core::MeterParams {
        interval: i64::MAX as u64,
        capacity: 1,
    };
    let now = 1 << 62;
    let full = gcra::GcraState {
        tat: Some(now + p.tolerance()),
    };
    let (d, next) = gcra::decide(p, full, now, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(p.interval));
    assert_eq!(d.reset_after, p.tolerance());
    assert_eq!(next, full);
    let (d, _) = gcra::decide(p, full, now + p.interval - 1, 1);
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(1));
}
