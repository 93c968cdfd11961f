//! Which token bucket Envoy enforces for a rule, and its split among the Envoys holding a key.
//!
//! Envoy's quota filter enforces only a token bucket `(max_tokens b, tokens_per_fill n,
//! fill_interval F)`, F read as whole seconds (a sub-second one never empties: docs/rlqs.md).
//! Over any interval of length w it admits at most `b + n w / F`. Per algorithm, with capacity
//! C, emission interval T, window W:
//!
//! | algorithm | b | n / F |
//! |---|---|---|
//! | gcra, leaky_bucket, token_bucket | C | the largest ≤ 1 / T with F ≤ [`MAX_FILL_INTERVAL_S`] (exact when T is whole seconds) |
//! | fixed_window (also calendar), sliding_window, sliding_log | max(1, ⌊C / [`WINDOW_BURST_DIVISOR`]⌋) | the largest ≤ (C − b) / W |
//!
//! For a window algorithm that keeps `b + (n / F) W ≤ C`: no interval of length W, aligned or
//! not, admits more than C. The price: the long-run rate is (C − b) / W, not C / W.

use crate::params::{MeterParams, Params, WindowParams};
use crate::time::{NANOS_PER_MILLI, NANOS_PER_SEC};

/// Longest `fill_interval` sent, in seconds: the rate is searched among n / F with F up to this,
/// so a rate under one per this long rounds down to no refill.
pub const MAX_FILL_INTERVAL_S: u32 = 3_600;

/// A window algorithm's burst is its capacity over this (at least 1): the rest of the window's
/// capacity is spread as refill.
pub const WINDOW_BURST_DIVISOR: u64 = 10;

/// An Envoy token bucket: what one assignment carries (`TokenBucket` in `envoy.type.v3`), or
/// the whole of a rule before it is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shape {
    /// `max_tokens`: the burst, and what a fresh bucket starts with.
    pub max_tokens: u32,
    /// `tokens_per_fill`: always sent (unset reads as 0 in Envoy 1.40).
    pub tokens_per_fill: u32,
    /// `fill_interval` in whole seconds, at least 1.
    pub fill_interval_s: u32,
}

impl Shape {
    /// The most this bucket admits over any interval of `w_ns`, from full.
    pub fn admits_within(self, w_ns: u64) -> u128 {
        u128::from(self.max_tokens)
            + u128::from(self.tokens_per_fill) * u128::from(w_ns)
                / (u128::from(self.fill_interval_s) * u128::from(NANOS_PER_SEC))
    }

    /// Refill earned over `elapsed_ns`, in billionths of a token (exact: no drift when paid
    /// tick by tick).
    pub fn refill_nano_units(self, elapsed_ns: u64) -> u128 {
        u128::from(self.tokens_per_fill) * u128::from(elapsed_ns) / u128::from(self.fill_interval_s)
    }
}

/// The token bucket of a rule's parameters, for all Envoys together.
pub fn shape(params: &Params) -> Shape {
    match params {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => meter(*m),
        Params::FixedWindow(w) | Params::SlidingWindow(w) | Params::SlidingLog(w) => window(*w),
    }
}

fn clamp_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn meter(m: MeterParams) -> Shape {
    let (n, f) = best_rate(u128::from(NANOS_PER_SEC), u128::from(m.interval.max(1)));
    Shape {
        max_tokens: clamp_u32(m.capacity),
        tokens_per_fill: n,
        fill_interval_s: f,
    }
}

/// The burst of a window algorithm's token bucket.
pub fn window_burst(capacity: u64) -> u64 {
    (capacity / WINDOW_BURST_DIVISOR).max(1).min(capacity)
}

fn window(w: WindowParams) -> Shape {
    let b = window_burst(w.capacity);
    // (C − b) per W: per second that is (C − b) × 1000 / W_ms.
    let (n, f) = best_rate(
        u128::from(w.capacity - b) * u128::from(NANOS_PER_SEC / NANOS_PER_MILLI),
        u128::from(w.window_ms.max(1)),
    );
    Shape {
        max_tokens: clamp_u32(b),
        tokens_per_fill: n,
        fill_interval_s: f,
    }
}

/// The token bucket of a rule's parameters for all Envoys together when `holders` Envoy buckets
/// hold the key. An Envoy bucket with `max_tokens` 0 admits nothing whatever its rate, so a
/// window algorithm's burst (max(1, C / 10): one unit for "10 per minute") grows to one unit per
/// holder, up to C, and its refill shrinks to keep `b + (n / F) W ≤ C`, on the same fill
/// interval F as [`shape`] (Envoy does not replace a bucket whose fill interval alone changed).
/// Meters keep their shape (their burst is C already); with more holders than burst units
/// [`crate::rlqs::rebalance::by_demand`] rotates the units among them.
pub fn shape_for(params: &Params, holders: usize) -> Shape {
    let base = shape(params);
    let (Params::FixedWindow(w) | Params::SlidingWindow(w) | Params::SlidingLog(w)) = params else {
        return base;
    };
    let holders = u64::try_from(holders).unwrap_or(u64::MAX);
    let b = window_burst(w.capacity).max(holders.min(w.capacity));
    if b <= u64::from(base.max_tokens) {
        return base;
    }
    // (C − b) per W on the fixed F: n ≤ (C − b) × F × 1000 / W_ms.
    let n = u128::from(w.capacity - b) * u128::from(base.fill_interval_s) * 1_000
        / u128::from(w.window_ms.max(1));
    Shape {
        max_tokens: clamp_u32(b),
        tokens_per_fill: u32::try_from(n)
            .unwrap_or(u32::MAX)
            .min(base.tokens_per_fill),
        fill_interval_s: base.fill_interval_s,
    }
}

/// The largest n / F ≤ num / den (tokens per second) with F in 1..=[`MAX_FILL_INTERVAL_S`],
/// the smallest such F on a tie; (0, 1) when even F at its longest earns no whole token.
fn best_rate(num: u128, den: u128) -> (u32, u32) {
    let mut best: (u128, u128) = (0, 1);
    for f in 1..=u128::from(MAX_FILL_INTERVAL_S) {
        let n = (f * num / den).min(u128::from(u32::MAX));
        if n * best.1 > best.0 * f {
            best = (n, f);
        }
        if n * den == f * num {
            break;
        }
    }
    (
        u32::try_from(best.0).unwrap_or(u32::MAX),
        u32::try_from(best.1).unwrap_or(1),
    )
}

/// The shares of `total` among `holders` Envoys: equal, the remainders to the first ones, so
/// Σ `max_tokens` = b and Σ `tokens_per_fill` = n, all with the same fill interval. No holders,
/// no shares.
pub fn split(total: Shape, holders: usize) -> Vec<Shape> {
    let Ok(k) = u32::try_from(holders) else {
        return Vec::new();
    };
    (0..k)
        .map(|i| {
            let part = |v: u32| v / k + u32::from(i < v % k);
            Shape {
                max_tokens: part(total.max_tokens),
                tokens_per_fill: part(total.tokens_per_fill),
                fill_interval_s: total.fill_interval_s,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rule;

    fn of(json: &str) -> Shape {
        shape(&Rule::from_json_str(json).unwrap().params())
    }

    fn tb(b: u32, n: u32, f: u32) -> Shape {
        Shape {
            max_tokens: b,
            tokens_per_fill: n,
            fill_interval_s: f,
        }
    }

    #[test]
    fn meters_map_directly() {
        for alg in ["gcra", "leaky_bucket", "token_bucket"] {
            let s = of(&format!(
                r#"{{"action":"a","algorithm":"{alg}","capacity":20,"rate":{{"count":10,"period":"1s"}}}}"#
            ));
            assert_eq!(s, tb(20, 10, 1), "{alg}");
        }
        // One per 2 s: T whole seconds → F = T.
        let s = of(
            r#"{"action":"a","algorithm":"gcra","capacity":16,"rate":{"count":30,"period":"60s"}}"#,
        );
        assert_eq!(s, tb(16, 1, 2));
        // 3 per 7 s: exact with F = 7.
        let s = of(
            r#"{"action":"a","algorithm":"gcra","capacity":5,"rate":{"count":3,"period":"7s"}}"#,
        );
        assert_eq!(s, tb(5, 3, 7));
    }

    #[test]
    fn a_rate_never_rounds_up() {
        // 1000 per 3 s = 333.33…/s: T truncates to 3 ms, 1/T = 333.33…; n / F ≤ that.
        let s = of(
            r#"{"action":"a","algorithm":"gcra","capacity":5,"rate":{"count":1000,"period":"3s"}}"#,
        );
        assert_eq!(s, tb(5, 1000, 3));
        // 7 per 1.5 s: T = 214_285_714 ns, slightly more than 1.5/7 s, so 7 per 1.5 s is not
        // allowed exactly; whatever is chosen stays at or under 1/T.
        let s = of(
            r#"{"action":"a","algorithm":"gcra","capacity":5,"rate":{"count":7,"period":"1500ms"}}"#,
        );
        let t = 1_500_000_000u128 / 7;
        assert!(u128::from(s.tokens_per_fill) * t <= u128::from(s.fill_interval_s) * 1_000_000_000);
        assert!(s.tokens_per_fill > 0);
    }

    #[test]
    fn windows_never_admit_more_than_capacity_in_any_window() {
        for (alg, c, w) in [
            ("fixed_window", 100u64, "60s"),
            ("sliding_window", 7, "10s"),
            ("sliding_log", 1000, "1h"),
            ("fixed_window", 1, "1s"),
            ("fixed_window", 5, "7d"),
        ] {
            let s = of(&format!(
                r#"{{"action":"a","algorithm":"{alg}","capacity":{c},"window":"{w}"}}"#
            ));
            let w_ns = crate::duration::Span::parse(w).unwrap().nanos();
            assert!(
                s.admits_within(w_ns) <= u128::from(c),
                "{alg} {c}/{w}: {s:?}"
            );
            assert_eq!(u64::from(s.max_tokens), window_burst(c));
            assert!(s.fill_interval_s >= 1);
        }
        assert_eq!(
            of(r#"{"action":"a","algorithm":"fixed_window","capacity":100,"window":"60s"}"#),
            tb(10, 3, 2),
            "b = 10, then 90 per 60 s = 1.5/s = 3 per 2 s"
        );
    }

    #[test]
    fn a_rate_under_one_per_longest_fill_gives_no_refill() {
        let s = of(r#"{"action":"a","algorithm":"fixed_window","capacity":2,"window":"7d"}"#);
        assert_eq!(s, tb(1, 0, 1));
    }

    #[test]
    fn shares_add_up_to_the_whole_and_one_holder_gets_all() {
        let total = tb(20, 10, 1);
        assert_eq!(split(total, 1), vec![total]);
        assert_eq!(split(total, 0), Vec::<Shape>::new());
        for k in 1..=25 {
            let shares = split(total, k);
            assert_eq!(shares.len(), k);
            let b: u32 = shares.iter().map(|s| s.max_tokens).sum();
            let n: u32 = shares.iter().map(|s| s.tokens_per_fill).sum();
            assert_eq!((b, n), (20, 10), "{k} holders");
            assert!(shares.iter().all(|s| s.fill_interval_s == 1));
        }
        assert_eq!(split(total, 3), vec![tb(7, 4, 1), tb(7, 3, 1), tb(6, 3, 1)]);
    }

    #[test]
    fn a_window_gives_each_holder_a_burst_unit_within_its_capacity() {
        let rule = |json: &str| Rule::from_json_str(json).unwrap().params();
        // "10 per minute": b = 1 alone, so a second Envoy's equal split was 0 (every request
        // it saw denied). With two holders b = 2 on the same F, the refill shrinks.
        let ten = rule(r#"{"action":"a","algorithm":"fixed_window","capacity":10,"window":"60s"}"#);
        assert_eq!(shape_for(&ten, 1), tb(1, 3, 20));
        assert_eq!(shape_for(&ten, 2), tb(2, 2, 20));
        assert!(split(shape_for(&ten, 2), 2)
            .iter()
            .all(|s| s.max_tokens >= 1));
        for k in 0..=12 {
            let s = shape_for(&ten, k);
            assert!(s.admits_within(60 * NANOS_PER_SEC) <= 10, "{k}: {s:?}");
            assert_eq!(s.fill_interval_s, 20, "{k}");
            assert_eq!(u64::from(s.max_tokens), (k as u64).clamp(1, 10), "{k}");
        }
        // Past C holders the burst stays C (rebalance rotates it).
        assert_eq!(shape_for(&ten, 50), tb(10, 0, 20));
        // A window already wide enough, and meters, are unchanged.
        let wide =
            rule(r#"{"action":"a","algorithm":"sliding_log","capacity":100,"window":"60s"}"#);
        assert_eq!(shape_for(&wide, 4), shape(&wide));
        let meter = rule(
            r#"{"action":"a","algorithm":"gcra","capacity":1,"rate":{"count":1,"period":"60s"}}"#,
        );
        assert_eq!(shape_for(&meter, 5), shape(&meter));
    }

    #[test]
    fn refill_is_paid_exactly_tick_by_tick() {
        let s = tb(5, 3, 2);
        let ticks: u128 = (0..10).map(|_| s.refill_nano_units(1_000_000_000)).sum();
        assert_eq!(ticks, 15 * u128::from(NANOS_PER_SEC), "3 per 2 s over 10 s");
        assert_eq!(s.admits_within(10 * NANOS_PER_SEC), 5 + 15);
    }
}
