//! The storage conformance suite: the same cases over the memory store, Redis and Redis Cluster.
//! Each case uses its own actions, so cases may share one store.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_backend::store::{Activity, ManualClock, Store, StoreError};
use sluice_core::cell::CellArgs;
use sluice_core::{Action, Decision, Lease, LeaseGrant, Nanos, Rule, Span, State};

/// A round time far from the epoch (2027), aligned to the minute, where ns are not exact doubles.
pub const B: Nanos = 1_800_000_000_000_000_000;
const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// A rule from its JSON form.
pub fn rule(json: &str) -> Rule {
    Rule::from_json_str(json).unwrap_or_else(|e| panic!("test rule {json}: {e}"))
}

fn action(name: &str) -> Action {
    Action::parse(name).expect("valid action")
}

/// One table row: at, quantity → allowed, remaining, retry_after, reset_after, level.
type Row = (Nanos, u64, bool, u64, Option<u64>, u64, f64);

async fn check_table(store: &dyn Store, clock: &ManualClock, rule: &Rule, key: &str, rows: &[Row]) {
    for (i, &(at, q, allowed, remaining, retry, reset, level)) in rows.iter().enumerate() {
        clock.set(at);
        let d = store.throttle(rule, key, q).await.expect("store answers");
        let got = (
            d.allowed,
            d.remaining,
            d.retry_after,
            d.reset_after,
            d.level,
        );
        assert_eq!(
            got,
            (allowed, remaining, retry, reset, level),
            "{} row {i} (at B{:+} ns, q {q}) on {}",
            rule.algorithm(),
            at as i128 - B as i128,
            store.kind()
        );
        assert_eq!(d.capacity, rule.capacity());
    }
}

/// A lease of `max` units for `ttl`.
pub fn lease(max: u64, ttl: &str) -> Lease {
    Lease {
        max,
        ttl: Span::parse(ttl).expect("valid span"),
    }
}

/// One leased row: at, quantity → allowed, remaining, granted (units, ttl ms).
type LeaseRow = (Nanos, u64, bool, u64, Option<(u64, u64)>);

async fn check_lease_table(
    store: &dyn Store,
    clock: &ManualClock,
    rule: &Rule,
    l: Lease,
    rows: &[LeaseRow],
) {
    for (i, &(at, q, allowed, remaining, grant)) in rows.iter().enumerate() {
        clock.set(at);
        let got = store
            .throttle_leased(rule, "k", q, Some(l))
            .await
            .expect("store answers");
        assert_eq!(
            (got.decision.allowed, got.decision.remaining, got.grant),
            (
                allowed,
                remaining,
                grant.map(|(units, ttl_ms)| LeaseGrant { units, ttl_ms })
            ),
            "{} lease row {i} (at B{:+} ns, q {q}) on {}",
            rule.algorithm(),
            at as i128 - B as i128,
            store.kind()
        );
    }
}

/// Leases on every algorithm: half of what is left after the request, at most max, debited in
/// the same step; fixed_window grants end with the window.
pub async fn lease_tables(store: &dyn Store, clock: &ManualClock) {
    for algorithm in ["gcra", "leaky_bucket", "token_bucket"] {
        let r = rule(&format!(
            r#"{{"action":"l-{algorithm}","algorithm":"{algorithm}","capacity":10,"rate":{{"count":1,"period":"1s"}}}}"#
        ));
        check_lease_table(
            store,
            clock,
            &r,
            lease(64, "1s"),
            &[
                (B, 1, true, 5, Some((4, 1000))), // 9 left after q: 4 granted
                (B, 1, true, 2, Some((2, 1000))), // 4 left: 2 granted
                (B, 1, true, 1, None),            // 1 left: half is 0
                (B, 0, true, 1, None),            // a peek never leases
                (B, 2, false, 1, None),           // a denial never leases
                (B + 20 * S, 3, true, 4, Some((3, 1000))),
            ],
        )
        .await;
    }
    let r =
        rule(r#"{"action":"l-fixed","algorithm":"fixed_window","capacity":100,"window":"60s"}"#);
    check_lease_table(
        store,
        clock,
        &r,
        lease(64, "1s"),
        &[
            (B + 10 * S, 1, true, 50, Some((49, 1000))),
            (B + 59_600 * MS, 1, true, 25, Some((24, 400))), // 400 ms left in the window
            (B + 60 * S - MS / 2, 1, true, 24, None),        // under 1 ms left: no grant
            (B + 60 * S, 1, true, 50, Some((49, 1000))),
        ],
    )
    .await;
    let r = rule(r#"{"action":"l-log","algorithm":"sliding_log","capacity":10,"window":"1s"}"#);
    check_lease_table(
        store,
        clock,
        &r,
        lease(3, "250ms"),
        &[
            (B, 1, true, 6, Some((3, 250))), // max caps half of 9
            (B + 100 * MS, 1, true, 3, Some((2, 250))),
            // The 4 entries at B expired: 3 live, 6 left after q, 3 granted.
            (B + S, 1, true, 3, Some((3, 250))),
        ],
    )
    .await;
    let r =
        rule(r#"{"action":"l-window","algorithm":"sliding_window","capacity":100,"window":"1s"}"#);
    clock.set(B + S);
    store.throttle(&r, "k", 40).await.expect("store answers");
    check_lease_table(
        store,
        clock,
        &r,
        lease(64, "1s"),
        &[
            // At 2.5 s the previous 40 weigh 20: 79 left after q, 39 granted.
            (B + 2_500 * MS, 1, true, 40, Some((39, 1000))),
            (B + 2_500 * MS, 1, true, 20, Some((19, 1000))),
        ],
    )
    .await;
}

/// fixed_window over 30 and 365 days (envoyproxy/ratelimit's month and year), epoch-aligned, at
/// fixed times around a window edge: the reset in ns passes 2^53 for a year (the script returns
/// it as an exact decimal string), and a reset under 1 ms exercises the string's leading zeros.
pub async fn long_fixed_window_tables(store: &dyn Store, clock: &ManualClock) {
    // 2026-12-03T00:00Z = 693 × 30 days; 2026-12-18T00:00Z = 57 × 365 days.
    for (days, edge_s) in [(30u64, 1_796_256_000u64), (365, 1_797_552_000)] {
        let w = days * 86_400 * S;
        let e = edge_s * S;
        let r = rule(&format!(
            r#"{{"action":"t-fw{days}d","algorithm":"fixed_window","capacity":2,"window":"{days}d"}}"#
        ));
        check_table(
            store,
            clock,
            &r,
            "k",
            &[
                (e - 2_500_000_001, 1, true, 1, None, 2_500_000_001, 1.0),
                (e - 999_999, 1, true, 0, None, 999_999, 2.0),
                (e - 1, 1, false, 0, Some(1), 1, 2.0),
                (e, 2, true, 0, None, w, 2.0),
                (e + 123_456_789, 0, true, 0, None, w - 123_456_789, 2.0),
                (
                    e + 123_456_789,
                    1,
                    false,
                    0,
                    Some(w - 123_456_789),
                    w - 123_456_789,
                    2.0,
                ),
                (e + w - 1, 3, false, 0, None, 1, 2.0),
            ],
        )
        .await;
        // A lease far from the edge runs its whole ttl; near it, it ends with the window.
        let r = rule(&format!(
            r#"{{"action":"l-fw{days}d","algorithm":"fixed_window","capacity":100,"window":"{days}d"}}"#
        ));
        check_lease_table(
            store,
            clock,
            &r,
            lease(64, "1s"),
            &[
                (e + 7 * S + 1, 1, true, 50, Some((49, 1000))),
                (e + w - 400 * MS - 1, 1, true, 25, Some((24, 400))),
                (e + w, 1, true, 50, Some((49, 1000))),
            ],
        )
        .await;
    }
}

/// Hand-computed tables for every algorithm (see each row's comment for the arithmetic).
pub async fn tables(store: &dyn Store, clock: &ManualClock) {
    lease_tables(store, clock).await;
    long_fixed_window_tables(store, clock).await;
    // gcra: capacity 3, T = 1 s, tolerance 3 s.
    let r = rule(
        r#"{"action":"t-gcra","algorithm":"gcra","capacity":3,"rate":{"count":1,"period":"1s"}}"#,
    );
    check_table(
        store,
        clock,
        &r,
        "k",
        &[
            (B, 1, true, 2, None, S, 1.0),
            (B, 1, true, 1, None, 2 * S, 2.0),
            (B, 1, true, 0, None, 3 * S, 3.0),
            (B, 1, false, 0, Some(S), 3 * S, 3.0), // new_tat B+4s > B+3s
            (B + 500 * MS, 1, false, 0, Some(500 * MS), 2_500 * MS, 2.5),
            (B + S, 1, true, 0, None, 3 * S, 3.0),  // tat B+4s
            (B + S, 4, false, 0, None, 3 * S, 3.0), // more than the capacity: no retry
            (B + 2 * S, 0, true, 1, None, 2 * S, 2.0), // peek
            (B + 10 * S, 0, true, 3, None, 0, 0.0),
        ],
    )
    .await;

    // leaky_bucket: capacity 2, T = 100 ms, tolerance 200 ms.
    let r = rule(
        r#"{"action":"t-leaky","algorithm":"leaky_bucket","capacity":2,"rate":{"count":1,"period":"100ms"}}"#,
    );
    check_table(
        store,
        clock,
        &r,
        "k",
        &[
            (B, 2, true, 0, None, 200 * MS, 2.0),
            (B + 50 * MS, 1, false, 0, Some(50 * MS), 150 * MS, 1.5),
            (B + 100 * MS, 1, true, 0, None, 200 * MS, 2.0),
            // Time went back 50 ms: no leak, and every wait first catches up to `last`.
            (B + 50 * MS, 1, false, 0, Some(150 * MS), 250 * MS, 2.0),
            (B + S, 3, false, 2, None, 0, 0.0),
            (B + S, 0, true, 2, None, 0, 0.0),
        ],
    )
    .await;

    // token_bucket: capacity 4, 2 per second (T = 500 ms), fresh = full.
    let r = rule(
        r#"{"action":"t-token","algorithm":"token_bucket","capacity":4,"rate":{"count":2,"period":"1s"}}"#,
    );
    check_table(
        store,
        clock,
        &r,
        "k",
        &[
            (B, 3, true, 1, None, 1_500 * MS, 3.0),
            (B, 2, false, 1, Some(500 * MS), 1_500 * MS, 3.0),
            (B + 250 * MS, 1, true, 0, None, 1_750 * MS, 3.5),
            (B + 10 * S, 0, true, 4, None, 0, 0.0),
            (B + 10 * S, 5, false, 4, None, 0, 0.0),
        ],
    )
    .await;

    // fixed_window: capacity 2 per 60 s, windows aligned to the epoch (B is a minute boundary).
    let r = rule(r#"{"action":"t-fixed","algorithm":"fixed_window","capacity":2,"window":"60s"}"#);
    check_table(
        store,
        clock,
        &r,
        "k",
        &[
            (B + 10 * S, 1, true, 1, None, 50 * S, 1.0),
            (B + 20 * S, 1, true, 0, None, 40 * S, 2.0),
            (B + 30 * S, 1, false, 0, Some(30 * S), 30 * S, 2.0),
            (B + 30 * S, 3, false, 0, None, 30 * S, 2.0),
            (B + 60 * S, 2, true, 0, None, 60 * S, 2.0),
            (B + 59 * S, 1, false, 0, Some(61 * S), 61 * S, 2.0), // back in time: stays in the newer window
            (B + 120 * S + 1, 0, true, 2, None, 0, 0.0),
        ],
    )
    .await;

    // sliding_log: capacity 2 per 1 s.
    let r = rule(r#"{"action":"t-log","algorithm":"sliding_log","capacity":2,"window":"1s"}"#);
    check_table(
        store,
        clock,
        &r,
        "k",
        &[
            (B, 1, true, 1, None, S, 1.0),
            (B + 400 * MS, 1, true, 0, None, S, 2.0),
            (B + 500 * MS, 1, false, 0, Some(500 * MS), 900 * MS, 2.0),
            (B + S, 1, true, 0, None, S, 2.0), // B expired exactly now
            (B + 900 * MS, 1, false, 0, Some(500 * MS), 1_100 * MS, 2.0), // back in time
            (B + S, 2, false, 0, Some(S), S, 2.0),
            (B + S, 3, false, 0, None, S, 2.0),
            (B + 5 * S, 0, true, 2, None, 0, 0.0),
        ],
    )
    .await;

    // sliding_window: capacity 10 per 1000 ms.
    let r =
        rule(r#"{"action":"t-window","algorithm":"sliding_window","capacity":10,"window":"1s"}"#);
    check_table(
        store,
        clock,
        &r,
        "k",
        &[
            (B, 10, true, 0, None, 2 * S, 10.0),
            // 250 ms into the next window the previous 10 weigh 7.5: 2 fit (7500 <= 8000).
            (B + 1_250 * MS, 2, true, 0, None, 1_750 * MS, 9.5),
            // 1 more needs 10 x (1000 - e) <= 7 x 1000: e >= 300 ms, 50 ms from now.
            (B + 1_250 * MS, 1, false, 0, Some(50 * MS), 1_750 * MS, 9.5),
            (B + 1_300 * MS, 1, true, 0, None, 1_700 * MS, 10.0),
            (B + 1_300 * MS, 11, false, 0, None, 1_700 * MS, 10.0),
            (B + 3_500 * MS, 0, true, 10, None, 0, 0.0),
        ],
    )
    .await;
}

/// The redis-cell sequences of issue 2, calls 3 ms apart.
pub async fn cell_sequences(store: &dyn Store, clock: &ManualClock) {
    let mut at = B;
    let mut call = |key: &'static str, burst, count, period, q| {
        at += 3 * MS;
        (
            key,
            CellArgs::new(burst, count, period, q).expect("valid cell args"),
            at,
        )
    };
    let mut expect = Vec::new();
    expect.push((call("k", 15, 30, 60, 1), [0, 16, 15, -1, 2]));
    expect.push((call("k", 15, 30, 60, 1), [0, 16, 14, -1, 4]));
    for _ in 3..16 {
        let c = call("k", 15, 30, 60, 1);
        expect.push((c, [9, 9, 9, 9, 9])); // not checked (between the listed replies)
    }
    expect.push((call("k", 15, 30, 60, 1), [0, 16, 0, -1, 32]));
    expect.push((call("k", 15, 30, 60, 1), [1, 16, 0, 2, 32]));
    expect.push((call("k", 15, 30, 60, 5), [1, 16, 0, 10, 32]));
    expect.push((call("j", 15, 30, 60, 5), [0, 16, 11, -1, 10]));
    expect.push((call("j", 15, 30, 60, 5), [0, 16, 6, -1, 20]));
    expect.push((call("j", 15, 30, 60, 5), [0, 16, 1, -1, 30]));
    expect.push((call("j", 15, 30, 60, 5), [1, 16, 1, 8, 30]));
    expect.push((call("j", 15, 30, 60, 0), [0, 16, 1, -1, 30]));
    expect.push((call("m", 0, 30, 60, 1), [0, 1, 0, -1, 2]));
    expect.push((call("m", 0, 30, 60, 1), [1, 1, 0, 2, 2]));
    for (i, ((key, args, at), want)) in expect.into_iter().enumerate() {
        clock.set(at);
        let d = store.cell_throttle(key, args).await.expect("store answers");
        if want[0] != 9 {
            assert_eq!(
                args.reply(&d),
                want,
                "cell call {i} on {key} ({})",
                store.kind()
            );
        }
    }
}

/// Every algorithm's rule with random parameters in the validated ranges.
fn random_rule(rng: &mut StdRng, name: &str, algorithm: &str) -> Rule {
    let capacity: u64 = match rng.random_range(0..10) {
        0 => 1,
        1 => rng.random_range(100..=2_000),
        _ => rng.random_range(1..=12),
    };
    // fixed_window alone also takes envoyproxy/ratelimit's month and year (30 and 365 days).
    let spans: &[&str] = if algorithm == "fixed_window" {
        &[
            "1ms", "3ms", "7ms", "250ms", "1s", "1500ms", "60s", "1h", "7d", "30d", "365d",
        ]
    } else {
        &[
            "1ms", "3ms", "7ms", "250ms", "1s", "1500ms", "60s", "1h", "7d",
        ]
    };
    let span = spans[rng.random_range(0..spans.len())];
    let json = if matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket") {
        let count: u64 = [1, 2, 3, 7, 30, 1000][rng.random_range(0..6)];
        format!(
            r#"{{"action":"{name}","algorithm":"{algorithm}","capacity":{capacity},"rate":{{"count":{count},"period":"{span}"}}}}"#
        )
    } else {
        format!(
            r#"{{"action":"{name}","algorithm":"{algorithm}","capacity":{capacity},"window":"{span}"}}"#
        )
    };
    match Rule::from_json_str(&json) {
        Ok(rule) => rule,
        // Beyond the 90-day horizon: fall back to a small capacity, always valid.
        Err(_) => rule(&json.replace(&format!("\"capacity\":{capacity}"), "\"capacity\":3")),
    }
}

pub const ALGORITHMS: [&str; 6] = [
    "gcra",
    "leaky_bucket",
    "token_bucket",
    "fixed_window",
    "sliding_log",
    "sliding_window",
];

/// Random sequences where the store's decision must equal core's transition step by step:
/// quantity 0, quantities above the capacity, time going backwards, long idles, huge times; half
/// the steps with a lease, whose grant must equal core's too.
pub async fn randomized_against_core(
    store: &dyn Store,
    clock: &ManualClock,
    seed: u64,
    sequences: usize,
    steps: usize,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    for (a, algorithm) in ALGORITHMS.iter().enumerate() {
        let mut grants = 0;
        for n in 0..sequences {
            let rule = random_rule(&mut rng, &format!("rnd-{a}-{n}"), algorithm);
            let params = rule.params();
            let unit = params.policy_window_ns().max(1);
            let mut now: Nanos = if rng.random_bool(0.5) {
                B + rng.random_range(0..S * 3600)
            } else {
                rng.random_range(0..S)
            };
            let mut state = State::Fresh;
            // When the stored state stops meaning anything (written at + idle TTL), and the
            // latest time any operation has shown the store since that write: the memory store
            // sweeps expired entries at the times it is shown, so once that time passes the
            // expiry, the state may be gone, and a later step back in time (a clock step) may
            // rightly find the key fresh. Whether a sweep ran first depends on which shard the
            // key hashed to, so either answer is right then, and only then.
            let mut expires_at: Option<Nanos> = None;
            let mut shown_since_write: Nanos = 0;
            for step in 0..steps {
                match rng.random_range(0..20) {
                    0 => {} // same instant
                    // Backwards, by at most 7 days: stored times stay within the scripts' exact
                    // range (|t - now| < 2^53 ns, 104 days) given the 90-day horizon.
                    1 | 2 => {
                        now = now.saturating_sub(rng.random_range(0..=unit.min(7 * 86_400 * S)))
                    }
                    3 => {
                        now +=
                            rng.random_range(0..=(unit.saturating_mul(1000)).min(100_000_000 * S))
                    } // long idle
                    4 => now += rng.random_range(0..1_000),
                    _ => now += rng.random_range(0..=unit / 2 + 1),
                }
                let cap = params.capacity();
                let q = match rng.random_range(0..10) {
                    0 => 0,
                    1 => rng.random_range(cap + 1..=cap * 2 + 1),
                    2 | 3 => rng.random_range(1..=cap),
                    _ => 1,
                };
                // Half the steps ask for a lease (the script's twin of core's decide_leased).
                let lease = rng.random_bool(0.5).then(|| {
                    let max = [1, 2, 5, 64, 1_000, 100_000][rng.random_range(0..6)];
                    lease(
                        max,
                        ["1ms", "3ms", "250ms", "1s", "60s"][rng.random_range(0..5)],
                    )
                });
                shown_since_write = shown_since_write.max(now);
                let (mut want, mut change) = params.decide_leased(&state, now, q, lease);
                let got = if lease.is_some() {
                    clock.set(now);
                    store
                        .throttle_leased(&rule, "subject", q, lease)
                        .await
                        .expect("store answers")
                } else {
                    clock.set(now);
                    let decision = store
                        .throttle(&rule, "subject", q)
                        .await
                        .expect("store answers");
                    sluice_core::Leased::plain(decision)
                };
                let maybe_swept = expires_at.is_some_and(|at| shown_since_write >= at);
                if got != want && maybe_swept {
                    (want, change) = params.decide_leased(&State::Fresh, now, q, lease);
                }
                assert_eq!(
                    got, want,
                    "seed {seed}, {algorithm} sequence {n} step {step}: rule {} at {now} q {q} lease {lease:?}, state {state:?} ({})",
                    rule.to_json(),
                    store.kind()
                );
                if let Some(next) = change {
                    state = next;
                    expires_at = Some(now.saturating_add(params.idle_ttl_ns()));
                    shown_since_write = now;
                }
                grants += usize::from(want.grant.is_some());
            }
        }
        assert!(
            grants > 0,
            "{algorithm}: no step was granted a lease ({})",
            store.kind()
        );
    }
}

/// Every conformance check of this suite on one store, for the stores that are not run one check
/// per test in conformance.rs (a Redis Cluster, a Sentinel-managed Redis): one place lists them,
/// so a check added to the suite reaches every topology. `seed` varies the random sequences.
pub async fn whole_suite(store: Arc<dyn Store>, clock: &ManualClock, seed: u64) {
    tables(store.as_ref(), clock).await;
    cell_sequences(store.as_ref(), clock).await;
    awkward_subjects_are_independent(store.as_ref(), clock).await;
    peek_many_reports_without_writing(store.as_ref(), clock).await;
    rules_round_trip(store.as_ref()).await;
    activity_round_trip(store.as_ref()).await;
    touched_round_trip(store.as_ref()).await;
    randomized_against_core(store.as_ref(), clock, seed, 20, 30).await;
    concurrency_admits_exactly_the_bound(store.clone(), clock).await;
    commit_tables(store.as_ref(), clock).await;
    commit_randomized_against_core(store.as_ref(), clock, seed ^ 0xc0, 10).await;
    budget_figures(store.as_ref(), clock).await;
    budget_reset(store.as_ref(), clock).await;
    crate::debt_suite::budget_debt(store.as_ref(), clock).await;
}

/// 64 concurrent requests on one key at one instant admit exactly the capacity, per algorithm.
pub async fn concurrency_admits_exactly_the_bound(store: Arc<dyn Store>, clock: &ManualClock) {
    for algorithm in ALGORITHMS {
        let limit = if algorithm.ends_with("window") || algorithm == "sliding_log" {
            r#""window":"60s""#
        } else {
            r#""rate":{"count":1,"period":"60s"}"#
        };
        let rule = Arc::new(rule(&format!(
            r#"{{"action":"c-{algorithm}","algorithm":"{algorithm}","capacity":10,{limit}}}"#
        )));
        clock.set(B + 7 * MS);
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (store, rule) = (store.clone(), rule.clone());
                tokio::spawn(async move { store.throttle(&rule, "hot", 1).await })
            })
            .collect();
        let mut allowed = 0;
        for task in tasks {
            if task.await.expect("task").expect("store answers").allowed {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 10, "{algorithm} on {}", store.kind());

        // The same with leases: every unit debited once, as a request or in a grant.
        let rule = Arc::new(rule.as_ref().clone());
        let tasks: Vec<_> = (0..64)
            .map(|_| {
                let (store, rule) = (store.clone(), rule.clone());
                tokio::spawn(async move {
                    store
                        .throttle_leased(&rule, "leased", 1, Some(lease(4, "1s")))
                        .await
                })
            })
            .collect();
        let (mut debited, mut granted) = (0, 0);
        for task in tasks {
            let got = task.await.expect("task").expect("store answers");
            if got.decision.allowed {
                let units = got.grant.map_or(0, |g| g.units);
                assert!(units <= 4, "{algorithm}: a grant of {units} > max");
                debited += 1 + units;
                granted += units;
            }
        }
        assert_eq!(debited, 10, "{algorithm} with leases on {}", store.kind());
        assert!(
            granted > 0,
            "{algorithm}: nothing granted on {}",
            store.kind()
        );
    }
}

/// Long, non-ASCII, brace-holding, digest-like and empty subjects are limited, each on its own.
pub async fn awkward_subjects_are_independent(store: &dyn Store, clock: &ManualClock) {
    let long = "x".repeat(10 * 1024);
    let mut long2 = long.clone();
    long2.push('y');
    let digest_like = format!("h:{}", "0".repeat(64));
    let subjects = [
        long.as_str(),
        long2.as_str(),
        "用户-ünïcödé-🚀",
        "{a}",
        "a{b}c",
        "}",
        "{",
        "",
        "h:",
        digest_like.as_str(),
        "with space\nand newline",
    ];
    for algorithm in ALGORITHMS {
        let limit = if algorithm.ends_with("window") || algorithm == "sliding_log" {
            r#""window":"60s""#
        } else {
            r#""rate":{"count":1,"period":"60s"}"#
        };
        let rule = rule(&format!(
            r#"{{"action":"s-{algorithm}","algorithm":"{algorithm}","capacity":2,{limit}}}"#
        ));
        for (i, subject) in subjects.iter().enumerate() {
            for n in 0..3 {
                clock.set(B + MS);
                let d = store
                    .throttle(&rule, subject, 1)
                    .await
                    .expect("store answers");
                assert_eq!(
                    d.allowed,
                    n < 2,
                    "{algorithm}: subject #{i} request {n} ({})",
                    store.kind()
                );
            }
        }
    }
}

/// Peeks report levels and change nothing.
pub async fn peek_many_reports_without_writing(store: &dyn Store, clock: &ManualClock) {
    let rule = rule(
        r#"{"action":"peek","algorithm":"leaky_bucket","capacity":4,"rate":{"count":1,"period":"1s"}}"#,
    );
    clock.set(B);
    store.throttle(&rule, "a", 2).await.expect("store answers");
    let keys = vec!["a".to_string(), "b".to_string()];
    for _ in 0..2 {
        clock.set(B + 500 * MS);
        let levels = store.peek_many(&rule, &keys).await.expect("store answers");
        let got: Vec<(f64, u64)> = levels
            .iter()
            .map(|d: &Decision| (d.level, d.remaining))
            .collect();
        assert_eq!(got, vec![(1.5, 2), (0.0, 4)], "{}", store.kind());
    }
    assert!(store
        .peek_many(&rule, &[])
        .await
        .expect("store answers")
        .is_empty());
}

/// Rules: put, replace, delete and load round trips with increasing versions.
pub async fn rules_round_trip(store: &dyn Store) {
    let a = rule(
        r#"{"action":"r-a","algorithm":"gcra","capacity":16,"rate":{"count":30,"period":"60s"},"description":"replies"}"#,
    );
    let a2 = rule(
        r#"{"action":"r-a","algorithm":"sliding_log","capacity":5,"window":"60s","mode":"shadow"}"#,
    );
    let b = rule(r#"{"action":"r-b","algorithm":"fixed_window","capacity":100,"window":"1h"}"#);
    let v1 = store.put_rule(&a).await.expect("put");
    let v2 = store.put_rule(&b).await.expect("put");
    assert!(v2 > v1);
    let snap = store.load_rules().await.expect("load");
    assert_eq!(snap.version, Some(v2));
    assert!(snap.rules.contains(&a) && snap.rules.contains(&b));
    let v3 = store.put_rule(&a2).await.expect("put");
    assert!(v3 > v2);
    let snap = store.load_rules().await.expect("load");
    assert!(snap.rules.contains(&a2) && !snap.rules.contains(&a));
    let v4 = store
        .delete_rule(a.action())
        .await
        .expect("delete")
        .expect("existed");
    assert!(v4 > v3);
    assert_eq!(
        store.delete_rule(a.action()).await.expect("delete"),
        None,
        "deleting twice"
    );
    assert_eq!(
        store.rules_version().await.expect("version"),
        Some(v4),
        "a missed delete bumps nothing"
    );
    let snap = store.load_rules().await.expect("load");
    assert_eq!(
        (
            snap.version,
            snap.rules.contains(&b),
            snap.rules.contains(&a2)
        ),
        (Some(v4), true, false)
    );
}

/// Activity: counts add up, newest first, trimmed to the newest 200 keys.
pub async fn activity_round_trip(store: &dyn Store) {
    let act = action("act");
    let item = |key: &str, last_seen_ms, allowed, denied| Activity {
        action: act.clone(),
        key: key.to_string(),
        last_seen_ms,
        allowed,
        denied,
    };
    store
        .record_activity(&[item("k1", 1_000, 1, 0), item("k2", 2_000, 0, 1)])
        .await
        .expect("record");
    store
        .record_activity(&[item("k1", 3_000, 2, 1)])
        .await
        .expect("record");
    let recent = store.recent_activity(&act, 10).await.expect("recent");
    assert_eq!(
        recent,
        vec![item("k1", 3_000, 3, 1), item("k2", 2_000, 0, 1)],
        "{}",
        store.kind()
    );
    assert_eq!(
        store.recent_activity(&act, 1).await.expect("recent").len(),
        1
    );
    assert!(store
        .recent_activity(&action("quiet"), 10)
        .await
        .expect("recent")
        .is_empty());
    let many: Vec<Activity> = (0..250)
        .map(|i| item(&format!("m{i:03}"), 10_000 + i, 1, 0))
        .collect();
    store.record_activity(&many).await.expect("record");
    let recent = store.recent_activity(&act, 1_000).await.expect("recent");
    assert_eq!(recent.len(), 200, "{}", store.kind());
    assert_eq!(recent[0].key, "m249");
    assert_eq!(recent[199].key, "m050");
}

/// The index of touched actions: a time only rises, `since` bounds it inclusively, names with
/// odd characters come back as they went in, and an empty touch writes nothing.
pub async fn touched_round_trip(store: &dyn Store) {
    let names = ["t.a", "t:b-c_9", "T"];
    let acts: Vec<_> = names.iter().map(|n| action(n)).collect();
    let since = |at: u64| async move {
        let mut got: Vec<String> = store
            .touched_actions(at)
            .await
            .expect("touched")
            .iter()
            .map(|a| a.as_str().to_owned())
            .filter(|n| names.contains(&n.as_str()))
            .collect();
        got.sort();
        got
    };
    store.touch_actions(&[], 1).await.expect("an empty touch");
    store.touch_actions(&acts, 5_000).await.expect("touch");
    store
        .touch_actions(&acts[..1], 4_000)
        .await
        .expect("an older touch");
    store
        .touch_actions(&acts[1..2], 9_000)
        .await
        .expect("a newer touch");
    assert_eq!(since(0).await, ["T", "t.a", "t:b-c_9"], "{}", store.kind());
    assert_eq!(
        since(5_000).await,
        ["T", "t.a", "t:b-c_9"],
        "{}",
        store.kind()
    );
    assert_eq!(
        since(5_001).await,
        ["t:b-c_9"],
        "4,000 did not lower t.a's 5,000"
    );
    assert_eq!(since(9_001).await, Vec::<String>::new());
}

/// Unwraps a store error for matching.
pub fn err<T: std::fmt::Debug>(r: Result<T, StoreError>) -> StoreError {
    r.expect_err("an error")
}

/// Refunded, debited and overshoot of a commit.
fn moved(o: &sluice_backend::store::CommitOutcome) -> (u64, u64, u64) {
    let c = &o.committed;
    (c.refunded, c.debited, c.overshoot)
}

/// Commits at fixed times on every algorithm (`BudgetStore::commit`): a refund right after the
/// reservation gives back the difference, a debit past the capacity is overshoot, a retried id
/// changes nothing and answers the first numbers, and each answer is core's
/// (`sluice_core::commit::commit`) on the state the store holds.
pub async fn commit_tables(store: &dyn Store, clock: &ManualClock) {
    use sluice_core::budget::bounded_commit;
    use sluice_core::commit::{commit, Commit};
    for algorithm in ALGORITHMS {
        let limit = if matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket") {
            r#""rate":{"count":10,"period":"10s"}"#
        } else {
            r#""window":"10s""#
        };
        let r = rule(&format!(
            r#"{{"action":"commit-{algorithm}","algorithm":"{algorithm}","capacity":10,{limit}}}"#
        ));
        let params = r.params();
        let t = B + 1_500 * MS;
        clock.set(t);
        assert!(store.throttle(&r, "k", 8).await.expect("reserve").allowed);
        // The decision that reserves records it in flight: a commit refunds at most that.
        assert!(store
            .record_reservation(&r, "k", "req-1", 8)
            .await
            .expect("record"));
        let c = Commit {
            reserved: 8,
            actual: 3,
            reserved_at: t,
        };
        clock.set(t);
        let got = store.commit(&r, "k", "req-1", c).await.expect("commit");
        assert!(!got.duplicate, "{algorithm}");
        assert_eq!(moved(&got), (5, 0, 0), "{algorithm} ({})", store.kind());
        assert_eq!(got.committed.level, 3.0, "{algorithm} ({})", store.kind());
        clock.set(t);
        let peek = store.throttle(&r, "k", 0).await.expect("peek");
        assert_eq!(peek.remaining, 7, "{algorithm} ({})", store.kind());
        clock.set(t);
        // The same id again: nothing changes, the first numbers come back.
        let again = store.commit(&r, "k", "req-1", c).await.expect("retry");
        assert!(again.duplicate, "{algorithm} ({})", store.kind());
        assert_eq!(
            again.committed,
            got.committed,
            "{algorithm} ({})",
            store.kind()
        );
        clock.set(t);
        let peek = store.throttle(&r, "k", 0).await.expect("peek");
        assert_eq!(peek.remaining, 7, "{algorithm}: a retry refunded again");
        // A debit beyond the capacity: never denied; the rest is overshoot, carried as debt.
        let big = Commit {
            reserved: 1,
            actual: 10,
            reserved_at: t,
        };
        clock.set(t);
        assert!(store
            .record_reservation(&r, "k", "req-2", 1)
            .await
            .expect("record"));
        let got = store.commit(&r, "k", "req-2", big).await.expect("debit");
        assert_eq!(moved(&got), (0, 9, 2), "{algorithm} ({})", store.kind());
        assert_eq!(got.committed.level, 12.0, "{algorithm} ({})", store.kind());
        clock.set(t);
        let again = store.commit(&r, "k", "req-2", big).await.expect("retry");
        assert!(again.duplicate);
        assert_eq!(
            again.committed.debited, 9,
            "{algorithm}: a retry debited again"
        );
        // Each id is per (action, key): the same id on another key is a commit of its own, and
        // there no reservation was recorded under it: nothing is given back, all 3 are debited.
        let fresh = commit(&params, &State::Fresh, t, bounded_commit(c, None)).0;
        clock.set(t);
        let other = store
            .commit(&r, "other", "req-1", c)
            .await
            .expect("other key");
        assert_eq!(
            (other.committed, other.duplicate, other.unrecorded),
            (fresh, false, true),
            "{algorithm}"
        );
        assert_eq!(moved(&other), (0, 3, 0), "{algorithm} ({})", store.kind());
    }
}

/// Issue 40 (item 6): a key keeps at most `MAX_RECEIPTS_PER_KEY` commit receipts. Fresh ids
/// past it shed the oldest (counted in the outcome, for `sluice_commit_receipts_shed_total`):
/// a retry of a shed id applies again, one of a kept id is still a duplicate, and another key's
/// receipts are untouched.
pub async fn commit_receipts_are_bounded(store: &dyn Store, clock: &ManualClock) {
    use sluice_core::commit::Commit;
    use sluice_core::limits::MAX_RECEIPTS_PER_KEY;
    let r = rule(r#"{"action":"receipts","algorithm":"fixed_window","capacity":10,"window":"1h"}"#);
    let t = B + 1_500 * MS;
    clock.set(t);
    let nothing = Commit {
        reserved: 0,
        actual: 0,
        reserved_at: t,
    };
    let other = store
        .commit(&r, "other", "id0", nothing)
        .await
        .expect("commit");
    assert_eq!(other.receipts_shed, 0);
    let mut shed = 0;
    for i in 0..MAX_RECEIPTS_PER_KEY + 3 {
        let done = store
            .commit(&r, "k", &format!("id{i}"), nothing)
            .await
            .expect("commit");
        assert!(!done.duplicate, "id{i} ({})", store.kind());
        shed += done.receipts_shed;
    }
    assert_eq!(shed, 3, "({})", store.kind());
    let again = store.commit(&r, "k", "id0", nothing).await.expect("retry");
    assert!(!again.duplicate, "a shed receipt ({})", store.kind());
    let kept = store.commit(&r, "k", "id10", nothing).await.expect("retry");
    assert!(kept.duplicate, "a kept receipt ({})", store.kind());
    let other = store
        .commit(&r, "other", "id0", nothing)
        .await
        .expect("retry");
    assert!(other.duplicate, "another key's receipt ({})", store.kind());
}

/// Issue 40: a lease return (a `lease-` commit id, as the filter names it) has no reservation of
/// its own recorded; it gives back at most what the key's lease pool holds (the units granted as
/// leases and not yet given back), and spends it: a forged return after it, or on a key that
/// granted nothing, gives back nothing.
pub async fn lease_returns_are_bounded_by_the_grants(store: &dyn Store, clock: &ManualClock) {
    use sluice_core::commit::Commit;
    let r =
        rule(r#"{"action":"leasepool","algorithm":"fixed_window","capacity":10,"window":"1h"}"#);
    let t = B + 1_500 * MS;
    clock.set(t);
    // 5 debited for a lease grant (as the leased decision does), recorded in the pool.
    assert!(store.throttle(&r, "k", 5).await.expect("debit").allowed);
    store.record_lease_grant(&r, "k", 5).await.expect("grant");
    let back = |reserved, actual| Commit {
        reserved,
        actual,
        reserved_at: t,
    };
    let done = store
        .commit(&r, "k", "lease-0000000000000001", back(5, 2))
        .await
        .expect("return");
    assert_eq!(moved(&done), (3, 0, 0), "({})", store.kind());
    let forged = store
        .commit(&r, "k", "lease-0000000000000002", back(5, 0))
        .await
        .expect("forged");
    assert_eq!(
        moved(&forged),
        (0, 0, 0),
        "the pool is spent ({})",
        store.kind()
    );
    assert!(forged.unrecorded);
    assert_eq!(store.throttle(&r, "k", 0).await.expect("peek").remaining, 8);
    // A key that granted nothing gives nothing back to a return.
    assert!(store.throttle(&r, "none", 4).await.expect("debit").allowed);
    let forged = store
        .commit(&r, "none", "lease-0000000000000003", back(4, 0))
        .await
        .expect("forged");
    assert_eq!(moved(&forged), (0, 0, 0), "({})", store.kind());
}

/// Random interleavings of reservations (throttle calls) and commits of them, some retried,
/// where every commit's answer must equal core's commit on the state core's own transitions
/// reached: the Lua twin and the memory store held to `sluice_core::commit` step by step.
pub async fn commit_randomized_against_core(
    store: &dyn Store,
    clock: &ManualClock,
    seed: u64,
    sequences: usize,
) {
    use sluice_core::budget::bounded_commit;
    use sluice_core::commit::{commit, Commit, COMMIT_ID_TTL_MS};
    let mut rng = StdRng::seed_from_u64(seed);
    for (a, algorithm) in ALGORITHMS.iter().enumerate() {
        for n in 0..sequences {
            let rule = random_rule(&mut rng, &format!("crnd-{a}-{n}"), algorithm);
            let params = rule.params();
            let unit = params.policy_window_ns().max(1);
            let mut now: Nanos = B + rng.random_range(0..S * 3600);
            let mut state = State::Fresh;
            // Reservations decided and recorded in flight: (units, when, id).
            let mut open: Vec<(u64, Nanos, String)> = Vec::new();
            let mut last: Option<(String, Commit, sluice_core::commit::Committed, Nanos)> = None;
            for step in 0..30 {
                // Forward only, less than half an idle TTL per step: the memory store's sweeps
                // then never drop a state core still holds.
                now += match rng.random_range(0..4) {
                    0 => 0,
                    1 => rng.random_range(0..1_000),
                    _ => rng.random_range(0..=unit / 3 + 1),
                };
                let cap = params.capacity();
                let what = format!(
                    "seed {seed}, {algorithm} sequence {n} step {step}: rule {} at {now}, state {:.300} ({})",
                    rule.to_json(),
                    format!("{state:?}"),
                    store.kind()
                );
                match rng.random_range(0..5) {
                    0 | 1 => {
                        let q = rng.random_range(1..=cap);
                        let (want, change) = params.decide_change(&state, now, q);
                        clock.set(now);
                        let got = store.throttle(&rule, "s", q).await.expect("reserve");
                        assert_eq!(got, want, "{what} q {q}");
                        if let Some(next) = change {
                            state = next;
                            let id = format!("r-{step}");
                            clock.set(now);
                            let held = store.record_reservation(&rule, "s", &id, q).await;
                            assert!(held.expect("record"), "{what}");
                            open.push((q, now, id));
                        }
                    }
                    // A retry, within the mark's TTL (Redis keeps it by its own clock, the memory
                    // store by the times it is shown).
                    2 if last
                        .as_ref()
                        .is_some_and(|l| now - l.3 < COMMIT_ID_TTL_MS * MS) =>
                    {
                        let Some((id, c, first, _)) = last.clone() else {
                            continue;
                        };
                        clock.set(now);
                        let got = store.commit(&rule, "s", &id, c).await.expect("retry");
                        let zero = Commit {
                            reserved: 0,
                            actual: 0,
                            ..c
                        };
                        let level = commit(&params, &state, now, zero).0.level;
                        assert!(got.duplicate, "{what} retry of {id}");
                        assert_eq!(
                            moved(&got),
                            (first.refunded, first.debited, first.overshoot),
                            "{what} retry of {id}"
                        );
                        assert_eq!(got.committed.level, level, "{what} retry of {id}");
                    }
                    _ => {
                        // A claim with no record (a fresh id), or a recorded reservation's commit.
                        let (reserved, reserved_at, id, recorded) =
                            if open.is_empty() || rng.random_bool(0.2) {
                                let at = now.saturating_sub(rng.random_range(0..=unit));
                                (rng.random_range(0..=cap), at, format!("c-{step}"), None)
                            } else {
                                let (q, at, id) = open.remove(rng.random_range(0..open.len()));
                                (q, at, id, Some((q, at / MS)))
                            };
                        let actual = rng.random_range(0..=reserved * 2 + 1);
                        let c = Commit {
                            reserved,
                            actual,
                            reserved_at,
                        };
                        let (want, change) =
                            commit(&params, &state, now, bounded_commit(c, recorded));
                        clock.set(now);
                        let got = store.commit(&rule, "s", &id, c).await.expect("commit");
                        assert!(!got.duplicate, "{what}");
                        assert_eq!(got.committed, want, "{what} commit {c:?}");
                        if let Some(next) = change {
                            state = next;
                        }
                        last = Some((id, c, want, now));
                    }
                }
            }
        }
    }
}

/// The budget tests' rule for `algorithm`, action `<prefix>-<algorithm>`: capacity 1000 (100 for
/// sliding_log) per minute, and that capacity.
fn budget_rule(prefix: &str, algorithm: &str) -> (Rule, u64) {
    let limit = if matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket") {
        r#""rate":{"count":1000,"period":"60s"}"#
    } else {
        r#""window":"60s""#
    };
    let capacity = if algorithm == "sliding_log" {
        100
    } else {
        1000
    };
    let r = rule(&format!(
        r#"{{"action":"{prefix}-{algorithm}","algorithm":"{algorithm}","capacity":{capacity},{limit}}}"#
    ));
    (r, capacity)
}

/// A key's cost-budget record (sluice_core::budget), the same figures from every store: allowed
/// reservations held in flight until their commit (once: a retry removes nothing twice, a hold
/// after the commit holds nothing) or the in-flight bound; a commit's debit beyond its
/// reservation summed with its overshoot until the budget's end (a meter's: until its debt has
/// drained too); other keys untouched.
pub async fn budget_figures(store: &dyn Store, clock: &ManualClock) {
    use sluice_core::budget::budget_until_ms;
    use sluice_core::commit::Commit;
    use sluice_core::limits::RESERVATION_IN_FLIGHT_MS;
    use sluice_core::wire::KeyBudget;
    for algorithm in ALGORITHMS {
        let (r, capacity) = budget_rule("budget", algorithm);
        let (big, small) = (capacity / 2, capacity / 5);
        let t = B + 1_500 * MS;
        let t_ms = t / MS;
        let budget = |key: &'static str, ms: u64| {
            let r = r.clone();
            async move {
                clock.set(ms * MS);
                store.budget(&r, key).await.expect("budget")
            }
        };
        let name = format!("{algorithm} ({})", store.kind());
        assert_eq!(budget("k", t_ms).await, KeyBudget::default(), "{name}");
        for (id, units) in [("r1", big), ("r2", small)] {
            clock.set(t);
            assert!(
                store
                    .throttle(&r, "k", units)
                    .await
                    .expect("reserve")
                    .allowed
            );
            clock.set(t);
            assert!(
                store
                    .record_reservation(&r, "k", id, units)
                    .await
                    .expect("hold"),
                "{name}"
            );
        }
        let held = budget("k", t_ms).await;
        assert_eq!(
            (
                held.reserved_in_flight,
                held.reservations_in_flight,
                held.debited
            ),
            (big + small, 2, 0),
            "{name}"
        );
        // r1 commits more than it reserved: the debit fills the limit, the rest is overshoot
        // (carried as debt).
        let c = Commit {
            reserved: big,
            actual: big + capacity / 2,
            reserved_at: t,
        };
        clock.set(t);
        let done = store.commit(&r, "k", "r1", c).await.expect("commit");
        let (debited, overshoot) = (capacity / 2, capacity / 2 - (capacity - big - small));
        assert_eq!(
            (done.committed.debited, done.committed.overshoot),
            (debited, overshoot),
            "{name}"
        );
        let params = r.params();
        let after = [big, small]
            .into_iter()
            .fold(State::Fresh, |s, q| params.decide(&s, t, q).1);
        let after = sluice_core::commit::commit(&params, &after, t, c)
            .1
            .expect("debited");
        let until = budget_until_ms(&params, &after, t);
        if matches!(algorithm, "gcra" | "leaky_bucket" | "token_bucket") {
            // 1,200 units at 60 ms each: 72 s to drain (a full meter: 60 s).
            assert_eq!(until, t_ms + 72_000, "{name}");
        }
        let want = KeyBudget {
            reserved_in_flight: small,
            reservations_in_flight: 1,
            overshoot,
            debited,
            overshoot_until_ms: Some(until),
            // The record holds no debt: the key view reads it from the state (debt_suite.rs).
            debt: 0,
        };
        assert_eq!(budget("k", t_ms + 1).await, want, "{name}");
        // A retry of the commit removes nothing twice and adds nothing; a late hold holds nothing.
        clock.set(t + MS);
        let again = store.commit(&r, "k", "r1", c).await.expect("retry");
        assert!(again.duplicate, "{name}");
        clock.set(t + MS);
        assert!(
            !store
                .record_reservation(&r, "k", "r1", big)
                .await
                .expect("hold"),
            "{name}"
        );
        assert_eq!(budget("k", t_ms + 2).await, want, "{name}");
        // Other keys have records of their own.
        assert_eq!(budget("other", t_ms).await, KeyBudget::default(), "{name}");
        // The overshoot counts until its budget's end; r2, never committed, until the bound.
        assert_eq!(budget("k", until - 1).await.overshoot, overshoot, "{name}");
        let after = budget("k", until).await;
        assert_eq!(
            (after.overshoot, after.debited, after.overshoot_until_ms),
            (0, 0, None)
        );
        let last = t_ms + RESERVATION_IN_FLIGHT_MS - 1;
        assert_eq!(budget("k", last).await.reserved_in_flight, small, "{name}");
        assert_eq!(budget("k", last + 1).await, KeyBudget::default(), "{name}");
        // A commit of a reservation never held (no id sent) only debits.
        let plain = Commit {
            reserved: 0,
            actual: 1,
            reserved_at: t,
        };
        clock.set(t + 2 * MS);
        store
            .commit(&r, "k", "never-held", plain)
            .await
            .expect("commit");
        assert_eq!(
            budget("k", t_ms + 2).await.reservations_in_flight,
            1,
            "{name}"
        );
    }
}

/// A key reset (`DELETE /v1/keys`) leaves the key as if never seen, its cost-budget record
/// included: no reservation in flight, no overshoot. A commit of a reservation made before the
/// reset (held at the reset or not) changes nothing: it gives back no units of the reservations
/// made since, debits nothing into the new budget, and a retry of it is a duplicate. A
/// reservation made after the reset commits as usual.
pub async fn budget_reset(store: &dyn Store, clock: &ManualClock) {
    use sluice_core::commit::Commit;
    use sluice_core::wire::KeyBudget;
    for algorithm in ALGORITHMS {
        let (r, capacity) = budget_rule("reset", algorithm);
        let (big, small) = (capacity / 2, capacity / 5);
        let t = B + 1_500 * MS;
        let name = format!("{algorithm} ({})", store.kind());
        let reserve = |key: &'static str, units: u64, at: Nanos| {
            let r = r.clone();
            async move {
                clock.set(at);
                let d = store.throttle(&r, key, units).await.expect("reserve");
                assert!(d.allowed, "reserve {units}");
            }
        };
        let budget = |at: Nanos| {
            let r = r.clone();
            async move {
                clock.set(at);
                store.budget(&r, "k").await.expect("budget")
            }
        };
        // The levels of the reset key and of a twin that saw only what came after the reset.
        let levels = |at: Nanos| {
            let r = r.clone();
            async move {
                let keys = ["k".to_owned(), "twin".to_owned()];
                clock.set(at);
                let peeks = store.peek_many(&r, &keys).await.expect("peek");
                (peeks[0].level, peeks[1].level)
            }
        };
        // Before: r1 and r2 held in flight, r3 reserved with no id held, and a debit beyond
        // its reservation (r0) in the overshoot figures.
        for (id, units) in [("r1", big), ("r2", small)] {
            reserve("k", units, t).await;
            clock.set(t);
            assert!(store
                .record_reservation(&r, "k", id, units)
                .await
                .expect("hold"));
        }
        reserve("k", small, t).await;
        let over = Commit {
            reserved: 0,
            actual: capacity / 5,
            reserved_at: t,
        };
        clock.set(t);
        store.commit(&r, "k", "r0", over).await.expect("commit");
        let before = budget(t).await;
        assert_eq!(
            (before.reservations_in_flight, before.debited),
            (2, capacity / 5),
            "{name}"
        );

        clock.set(t + 10 * MS);
        let removed = store.reset_key(r.action(), "k").await.expect("reset");
        assert_eq!(removed, vec![r.algorithm()], "{name}");
        assert_eq!(
            budget(t + 10 * MS).await,
            KeyBudget::default(),
            "{name}: after the reset"
        );

        // After: r4 reserves and is held in the new budget (and the twin reserves as much).
        let t4 = t + 20 * MS;
        reserve("k", big, t4).await;
        reserve("twin", big, t4).await;
        clock.set(t4);
        assert!(store
            .record_reservation(&r, "k", "r4", big)
            .await
            .expect("hold"));
        // The twin's too: a commit gives back only what was recorded (issue 40).
        assert!(store
            .record_reservation(&r, "twin", "r4", big)
            .await
            .expect("hold"));
        let now = t + 30 * MS;
        // Commits of the reservations made before the reset change nothing, held or not, under
        // or over their reservation.
        for (id, reserved, actual) in [("r1", big, 0), ("r3", small, 0), ("r2", small, capacity)] {
            let c = Commit {
                reserved,
                actual,
                reserved_at: t,
            };
            clock.set(now);
            let done = store.commit(&r, "k", id, c).await.expect("commit");
            assert!(!done.duplicate, "{name}: {id}");
            assert_eq!(
                (
                    done.committed.refunded,
                    done.committed.debited,
                    done.committed.overshoot
                ),
                (0, 0, 0),
                "{name}: {id} from before the reset"
            );
            let (k, twin) = levels(now).await;
            assert_eq!(k, twin, "{name}: {id} left r4's units");
            clock.set(now);
            let again = store.commit(&r, "k", id, c).await.expect("retry");
            assert!(again.duplicate, "{name}: a retry of {id}");
        }
        let b = budget(now).await;
        assert_eq!(
            (
                b.reserved_in_flight,
                b.reservations_in_flight,
                b.debited,
                b.overshoot
            ),
            (big, 1, 0, 0),
            "{name}: only r4 in flight, no overshoot"
        );
        // The reservation made after the reset commits as usual.
        let c = Commit {
            reserved: big,
            actual: small,
            reserved_at: t4,
        };
        clock.set(now);
        let done = store.commit(&r, "k", "r4", c).await.expect("commit");
        assert_eq!(done.committed.refunded, big - small, "{name}: r4");
        clock.set(now);
        store.commit(&r, "twin", "r4", c).await.expect("commit");
        let (k, twin) = levels(now).await;
        assert_eq!(k, twin, "{name}");
        assert_eq!(budget(now).await, KeyBudget::default(), "{name}");
    }
}
