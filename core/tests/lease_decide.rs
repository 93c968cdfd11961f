//! Deciding with a lease ([`Params::decide_leased`]): tables per algorithm, properties on random
//! histories, and a simulation of two Envoys spending their grants that checks the bound stated
//! in docs/algorithms.md for each algorithm.
//!
//! Properties, at every step of a random history (requests with and without a lease, times
//! mostly forward, sometimes equal, sometimes stepping back):
//! - no lease: exactly [`Params::decide_change`];
//! - no grant: exactly [`Params::decide_change`] (a lease changes nothing unless it grants);
//! - a grant of k: the plain request was allowed with q ≥ 1; 1 ≤ k ≤ max and k ≤ remaining / 2;
//!   the answer and the new state are exactly those of a plain request of q + k, which is
//!   allowed (a grant never exceeds what a quantity-(q + k) decision admits); the answer's
//!   remaining is the plain one minus k; the ttl is the lease's, and for fixed_window never
//!   reaches past the window's end;
//! - the fallback is never taken: whenever [`units_for`] says k > 0, a grant of k comes back.

// An integration-test crate: clippy.toml lets #[test] functions unwrap, but not the helpers
// beside them, so the crate root allows it. A panic here is the failure report.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{json, Value};
use sluice_core::lease::grant_units;
use sluice_core::leased::{grant_ttl_ms, offer, units_for};
use sluice_core::limits::{MAX_LEASE_TTL_MS, MAX_LEASE_UNITS};
use sluice_core::time::NANOS_PER_MILLI;
use sluice_core::{Algorithm, Lease, LeaseGrant, Params, Rule, Span, State};

const MS: u64 = NANOS_PER_MILLI;
/// Midnight UTC, 2024-01-01: aligned to every window used here.
const T0: u64 = 1_704_067_200_000 * MS;

fn rule(value: Value) -> Rule {
    Rule::from_json(&value).expect("valid rule")
}

fn lease(max: u64, ttl: &str) -> Lease {
    Lease {
        max,
        ttl: Span::parse(ttl).unwrap(),
    }
}

// ---------------------------------------------------------------------------------------------
// Tables: (at ms after T0, quantity) → (allowed, remaining, granted units, ttl ms).

type Row = (u64, u64, bool, u64, Option<(u64, u64)>);

fn run(name: &str, p: Params, l: Lease, mut state: State, rows: &[Row]) {
    for (i, &(at_ms, q, allowed, remaining, grant)) in rows.iter().enumerate() {
        let (got, change) = p.decide_leased(&state, T0 + at_ms * MS, q, Some(l));
        let want_grant = grant.map(|(units, ttl_ms)| LeaseGrant { units, ttl_ms });
        assert_eq!(
            (got.decision.allowed, got.decision.remaining, got.grant),
            (allowed, remaining, want_grant),
            "{name} row {} (t={at_ms} ms, q={q})",
            i + 1
        );
        if let Some(next) = change {
            state = next;
        }
    }
}

fn meter(algorithm: &str) -> Params {
    // Capacity 10, one per second.
    rule(
        json!({"action": "a", "algorithm": algorithm, "capacity": 10,
        "rate": {"count": 1, "period": "1s"}}),
    )
    .params()
}

#[test]
fn meters_grant_half_of_what_is_left_capped_at_max() {
    for algorithm in ["gcra", "leaky_bucket", "token_bucket"] {
        run(
            algorithm,
            meter(algorithm),
            lease(64, "1s"),
            State::Fresh,
            &[
                // 9 left after the request: 4 granted (half, rounded down), 5 left.
                (0, 1, true, 5, Some((4, 1000))),
                // 4 left after: 2 granted, 2 left.
                (0, 1, true, 2, Some((2, 1000))),
                // 1 left after: half of it is 0, so no grant and the plain answer.
                (0, 1, true, 1, None),
                (0, 1, true, 0, None),
                (0, 1, false, 0, None),
                // A peek never leases.
                (0, 0, true, 0, None),
                // 3 s later 3 have drained: q = 2 leaves 1, no grant.
                (3000, 2, true, 1, None),
                // 10 s later the funnel is empty: q = 3 leaves 7, 3 granted; max caps nothing.
                (13_000, 3, true, 4, Some((3, 1000))),
            ],
        );
        run(
            algorithm,
            meter(algorithm),
            lease(2, "250ms"),
            State::Fresh,
            &[
                // 9 left: half is 4, max 2 caps it.
                (0, 1, true, 7, Some((2, 250))),
                // More than the capacity: denied, nothing granted.
                (0, 11, false, 7, None),
            ],
        );
    }
}

#[test]
fn fixed_window_grants_stop_at_the_window_end() {
    let p =
        rule(json!({"action": "a", "algorithm": "fixed_window", "capacity": 100, "window": "60s"}))
            .params();
    run(
        "fixed_window",
        p,
        lease(64, "1s"),
        State::Fresh,
        &[
            // 99 left: min(64, 49) = 49 granted, 50 left.
            (10_000, 1, true, 50, Some((49, 1000))),
            // 49 left: 24 granted.
            (10_000, 1, true, 25, Some((24, 1000))),
            // 400 ms before the window's end: the ttl is 400 ms.
            (59_600, 1, true, 12, Some((12, 400))),
            // 1 ms left: a 1 ms grant.
            (59_999, 1, true, 6, Some((5, 1))),
            // A new window: 99 left again, the full ttl.
            (60_000, 1, true, 50, Some((49, 1000))),
        ],
    );
    // The ttl is whole milliseconds rounded down: 1.5 ms left gives 1 ms.
    let (l, _) = p.decide_leased(
        &State::Fresh,
        T0 + 60_000 * MS - 3 * MS / 2,
        1,
        Some(lease(8, "1s")),
    );
    assert_eq!(
        l.grant,
        Some(LeaseGrant {
            units: 8,
            ttl_ms: 1
        })
    );
    // Under 1 ms left: nothing could be spent, so nothing is granted: the plain answer.
    let now = T0 + 60_000 * MS - MS / 2;
    let (l, change) = p.decide_leased(&State::Fresh, now, 1, Some(lease(8, "1s")));
    assert_eq!(l.grant, None);
    assert_eq!((l.decision, change), p.decide_change(&State::Fresh, now, 1));
}

#[test]
fn sliding_log_records_every_granted_unit() {
    let p =
        rule(json!({"action": "a", "algorithm": "sliding_log", "capacity": 10, "window": "1s"}))
            .params();
    let (l, next) = p.decide_leased(&State::Fresh, T0, 1, Some(lease(64, "1s")));
    assert_eq!(
        (l.decision.remaining, l.grant),
        (
            5,
            Some(LeaseGrant {
                units: 4,
                ttl_ms: 1000
            })
        )
    );
    let Some(State::SlidingLog(log)) = next else {
        panic!("a sliding log state");
    };
    assert_eq!(log.entries.len(), 5, "one entry per debited unit");
}

#[test]
fn sliding_window_counts_the_weighted_previous_window() {
    let p = rule(
        json!({"action": "a", "algorithm": "sliding_window", "capacity": 100, "window": "1s"}),
    )
    .params();
    // 40 in window 1; at 2.5 s they weigh 20: 80 left, 79 after the request, 39 granted.
    let (_, s) = p.decide_change(&State::Fresh, T0 + 1_000 * MS, 40);
    run(
        "sliding_window",
        p,
        lease(64, "1s"),
        s.unwrap(),
        &[
            (2_500, 1, true, 40, Some((39, 1000))),
            (2_500, 1, true, 20, Some((19, 1000))),
        ],
    );
}

#[test]
fn only_enforced_rules_lease_and_only_to_callers_that_ask() {
    let base = json!({"action": "a", "algorithm": "gcra", "capacity": 10,
        "rate": {"count": 1, "period": "1s"}, "lease": {"max": 8, "ttl": "1s"}});
    let leased = rule(base.clone());
    assert_eq!(offer(&leased, true), Some(lease(8, "1s")));
    assert_eq!(offer(&leased, false), None, "a caller that did not ask");
    let mut shadow = base.clone();
    shadow["mode"] = json!("shadow");
    assert_eq!(offer(&rule(shadow), true), None, "shadow rules never lease");
    let mut plain = base;
    plain.as_object_mut().unwrap().remove("lease");
    assert_eq!(offer(&rule(plain), true), None, "no lease on the rule");
}

#[test]
fn units_for_is_the_grant_rule() {
    let p = meter("gcra");
    let l = lease(64, "1s");
    let (d, _) = p.decide(&State::Fresh, T0, 1);
    assert_eq!(units_for(&p, l, 1, &d), grant_units(64, 9));
    assert_eq!(units_for(&p, l, 0, &d), 0, "a peek");
    let (denied, _) = p.decide(&State::Fresh, T0, 11);
    assert_eq!(units_for(&p, l, 11, &denied), 0, "a denial");
    assert_eq!(grant_ttl_ms(&p, l, &d), 1000);
}

// ---------------------------------------------------------------------------------------------
// Properties on random histories

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn algorithm_json(i: usize, capacity: u64, scale_ms: u64, count: u64) -> Value {
    let algorithm = Algorithm::ALL[i].name();
    if Algorithm::ALL[i].uses_rate() {
        json!({"action": "a", "algorithm": algorithm, "capacity": capacity,
            "rate": {"count": count, "period": format!("{scale_ms}ms")}})
    } else {
        json!({"action": "a", "algorithm": algorithm, "capacity": capacity,
            "window": format!("{scale_ms}ms")})
    }
}

/// Small rules (many denials and edges) and large ones (capacities near the limits).
fn any_params() -> impl Strategy<Value = Params> {
    let small = (0..6usize, 1..=40u64, 1..=2000u64, 1..=5u64);
    let large = (
        0..6usize,
        1_000..=10_000u64,
        1_000..=86_400_000u64,
        1..=1000u64,
    );
    prop_oneof![3 => small, 1 => large].prop_filter_map("valid", |(i, cap, scale, count)| {
        Rule::from_json(&algorithm_json(i, cap, scale, count))
            .ok()
            .map(|r| r.params())
    })
}

fn any_lease() -> impl Strategy<Value = Option<Lease>> {
    let max = prop_oneof![1..=8u64, 1..=MAX_LEASE_UNITS, Just(MAX_LEASE_UNITS)];
    let ttl = prop_oneof![1..=2000u64, Just(MAX_LEASE_TTL_MS)];
    prop_oneof![
        1 => Just(None),
        4 => (max, ttl).prop_map(|(max, ttl)| Some(Lease { max, ttl: Span::from_millis(ttl).unwrap() })),
    ]
}

/// (kind, gap in thousandths of the rule's scale, quantity kind, lease).
fn history(max: usize) -> impl Strategy<Value = Vec<(u8, u32, u8, Option<Lease>)>> {
    prop::collection::vec((0..16u8, 0..=3000u32, 0..8u8, any_lease()), 1..=max)
}

fn check_step(
    p: &Params,
    state: &State,
    now: u64,
    q: u64,
    lease: Option<Lease>,
) -> Result<Option<State>, TestCaseError> {
    let (plain, plain_change) = p.decide_change(state, now, q);
    let (got, change) = p.decide_leased(state, now, q, lease);
    let Some(l) = lease else {
        prop_assert_eq!(
            (got.decision, got.grant, &change),
            (plain, None, &plain_change)
        );
        return Ok(change);
    };
    let k = units_for(p, l, q, &plain);
    match got.grant {
        None => {
            prop_assert_eq!(
                k,
                0,
                "units_for said {} but nothing was granted (the fallback)",
                k
            );
            prop_assert_eq!((got.decision, &change), (plain, &plain_change));
        }
        Some(g) => {
            prop_assert!(plain.allowed && q >= 1);
            prop_assert_eq!(g.units, k);
            prop_assert!(g.units >= 1 && g.units <= l.max);
            prop_assert!(
                g.units <= plain.remaining / 2,
                "{} > half of {}",
                g.units,
                plain.remaining
            );
            let (total, total_change) = p.decide_change(state, now, q + g.units);
            prop_assert!(total.allowed, "the q + k decision must admit");
            prop_assert_eq!(got.decision, total);
            prop_assert_eq!(&change, &total_change);
            prop_assert_eq!(got.decision.remaining, plain.remaining - g.units);
            prop_assert!(g.ttl_ms >= 1 && g.ttl_ms <= l.ttl.millis());
            if let Params::FixedWindow(w) = p {
                let end = (now / w.window_ns() + 1) * w.window_ns();
                let start_of_stored = match state {
                    State::FixedWindow(s) => s.start,
                    _ => 0,
                };
                // (After a clock step back the window is the stored one, which ends later.)
                let end = end.max(start_of_stored + w.window_ns());
                prop_assert!(now + g.ttl_ms * MS <= end, "the grant outlives its window");
            }
        }
    }
    Ok(change)
}

proptest! {
    #![proptest_config(config(400))]

    #[test]
    fn leased_decisions_are_plain_decisions_of_q_plus_k(p in any_params(), t0 in (1u64 << 40)..(1u64 << 61), steps in history(40)) {
        let scale = (p.policy_window_ns() / p.capacity()).max(1);
        let mut now = t0;
        let mut state = State::Fresh;
        for (kind, gap, q_kind, lease) in steps {
            let gap = u64::from(gap) * (scale / 1000) + u64::from(gap) * (scale % 1000) / 1000;
            now = match kind {
                0 | 1 => now,
                2 => now.saturating_sub(gap),
                3 => now + p.policy_window_ns() * (gap % 3) + gap,
                _ => now + gap,
            };
            let q = match q_kind {
                0 => 0,
                1..=4 => 1,
                5 => 2,
                6 => 3,
                _ => p.capacity() + 1,
            };
            if let Some(next) = check_step(&p, &state, now, q, lease)? {
                state = next;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Two Envoys spending grants: the bound of docs/algorithms.md

/// One Envoy's live grant: units left and when it expires.
#[derive(Default, Clone, Copy)]
struct Held {
    units: u64,
    expires: u64,
}

/// Replays requests (time, which Envoy) through Envoys that admit from their grant while it
/// lasts and otherwise call out (quantity 1, leasing). Returns the admission times and the
/// number of callouts that were allowed.
fn simulate(p: &Params, l: Lease, requests: &[(u64, usize)]) -> (Vec<u64>, usize) {
    let mut held = [Held::default(); 2];
    let mut state = State::Fresh;
    let mut admitted = Vec::new();
    let mut callouts = 0;
    for &(t, e) in requests {
        let h = &mut held[e];
        if h.units > 0 && t < h.expires {
            h.units -= 1;
            admitted.push(t);
            continue;
        }
        let (got, change) = p.decide_leased(&state, t, 1, Some(l));
        if let Some(next) = change {
            state = next;
        }
        if got.decision.allowed {
            callouts += 1;
            admitted.push(t);
        }
        *h = got.grant.map_or_else(Held::default, |g| Held {
            units: g.units,
            expires: t + g.ttl_ms * MS,
        });
    }
    (admitted, callouts)
}

/// The bound per algorithm, with E = 2 Envoys each holding at most one grant of at most `max`.
fn check_leased_bound(p: &Params, l: Lease, admitted: &[u64]) -> Result<(), TestCaseError> {
    let ttl = l.ttl.millis() * MS;
    let held = 2 * l.max;
    let count_in =
        |from: u64, to: u64| admitted.iter().filter(|&&t| t >= from && t <= to).count() as u64;
    match *p {
        Params::Gcra(m) | Params::LeakyBucket(m) | Params::TokenBucket(m) => {
            // Over [a, b]: C + ⌊(b − a + ttl) / T⌋.
            for (i, &a) in admitted.iter().enumerate() {
                for &b in &admitted[i..] {
                    let n = count_in(a, b);
                    let bound = m.capacity + (b - a + ttl) / m.interval;
                    prop_assert!(
                        n <= bound,
                        "{} admitted in [{}, {}], bound {}",
                        n,
                        a,
                        b,
                        bound
                    );
                }
            }
        }
        Params::FixedWindow(w) => {
            // Never more than the capacity in one window.
            for &t in admitted {
                let start = t - t % w.window_ns();
                let n = count_in(start, start + w.window_ns() - 1);
                prop_assert!(
                    n <= w.capacity,
                    "{} in one window of capacity {}",
                    n,
                    w.capacity
                );
            }
        }
        Params::SlidingLog(w) => {
            // Over any window W: at most C + units held, and at most C × ⌈(W + ttl) / W⌉.
            let window = w.window_ns();
            for &t in admitted {
                let n = count_in(t.saturating_sub(window - 1), t);
                let bound = (w.capacity + held).min(w.capacity * (window + ttl).div_ceil(window));
                prop_assert!(n <= bound, "{} in a window, bound {}", n, bound);
            }
        }
        Params::SlidingWindow(w) => {
            // Per aligned window: at most C + units held at its start.
            for &t in admitted {
                let start = t - t % w.window_ns();
                let n = count_in(start, start + w.window_ns() - 1);
                prop_assert!(
                    n <= w.capacity + held,
                    "{} in one window, bound {}",
                    n,
                    w.capacity + held
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn two_envoys_spending_grants_stay_within_the_stated_bound(
        i in 0..6usize, cap in 1..=30u64, scale_ms in 1..=200u64, count in 1..=5u64,
        max in 1..=16u64, ttl_ms in 1..=400u64, t0 in (1u64 << 40)..(1u64 << 61),
        gaps in prop::collection::vec((0..=3000u64, 0..2usize), 1..=150),
    ) {
        let Ok(rule) = Rule::from_json(&algorithm_json(i, cap, scale_ms, count)) else {
            return Ok(());
        };
        let p = rule.params();
        let l = Lease { max, ttl: Span::from_millis(ttl_ms).unwrap() };
        let step = (p.policy_window_ns() / p.capacity()).max(1);
        let mut t = t0;
        let requests: Vec<(u64, usize)> = gaps
            .iter()
            .map(|&(gap, e)| {
                t += gap * step / 1000;
                (t, e)
            })
            .collect();
        let (admitted, _) = simulate(&p, l, &requests);
        check_leased_bound(&p, l, &admitted)?;
    }
}

/// Two Envoys hammering one key of capacity C per hour: the whole quota is admitted, never more,
/// with far fewer callouts than requests.
#[test]
fn two_envoys_hammering_admit_exactly_the_capacity() {
    for i in 0..6 {
        let capacity = if i == 4 { 1_000 } else { 10_000 };
        let p = Rule::from_json(&algorithm_json(i, capacity, 3_600_000, capacity))
            .unwrap()
            .params();
        let l = lease(64, "1s");
        // One request every 50 µs, alternating Envoys, for 2 s: 40,000 requests.
        let requests: Vec<(u64, usize)> = (0..40_000u64)
            .map(|n| (T0 + n * 50_000, (n % 2) as usize))
            .collect();
        let (admitted, callouts) = simulate(&p, l, &requests);
        let algorithm = Algorithm::ALL[i].name();
        // The meters refill 1 unit every 360 ms: about 5 more over the 2 s.
        let refill = if Algorithm::ALL[i].uses_rate() {
            (2_000 + 1_000) / 360
        } else {
            0
        };
        let n = admitted.len() as u64;
        assert!(
            n <= capacity + refill,
            "{algorithm}: {n} admitted for capacity {capacity}"
        );
        assert!(
            n + 2 * 64 >= capacity,
            "{algorithm}: only {n} admitted of {capacity}"
        );
        assert!(
            callouts * 10 < admitted.len(),
            "{algorithm}: {callouts} allowed callouts for {n} admissions"
        );
    }
}
