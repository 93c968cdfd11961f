//! `POST /v1/cl.throttle` over HTTP on a real redis-server answers the redis-cell sequences of
//! issue 2 and the long periods of issue 10 (also on the memory store). Every answer there
//! tolerates calls a few milliseconds apart (seconds are rounded as redis-cell rounds them), so
//! the HTTP API needs no time parameter for them. Below the HTTP tests, the Redis store's cell
//! path (the gcra Lua script) is held equal to core at fixed times over redis-cell's whole range,
//! where times pass 2^53 ns.

use crate::harness;
use crate::support;

use std::time::Duration;

use harness::Sluice;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use sluice_backend::store::redis::{RedisConfig, RedisStore, RedisTarget};

use sluice_backend::store::{DecisionStore, ManualClock};
use sluice_backend::StoreChoice;
use sluice_core::algorithms::gcra::{self, GcraState};
use sluice_core::cell::CellArgs;
use sluice_core::limits::{CELL_MAX_NS, CELL_MAX_PERIOD_S};

async fn cell(
    s: &Sluice,
    key: &str,
    max_burst: u64,
    count: u64,
    period: u64,
    quantity: Option<u64>,
) -> Value {
    let mut body = json!({"key": key, "max_burst": max_burst, "count": count, "period": period});
    if let Some(q) = quantity {
        body["quantity"] = json!(q);
    }
    let (status, answer) = s.post_decision("/v1/cl.throttle", body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

#[tokio::test]
async fn cl_throttle_on_redis_answers_the_redis_cell_sequences() {
    let redis = support::RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;

    // `k 15 30 60`: 16 allowed with falling remaining and growing reset, then limited.
    assert_eq!(
        cell(&s, "k", 15, 30, 60, None).await,
        json!([0, 16, 15, -1, 2])
    );
    assert_eq!(
        cell(&s, "k", 15, 30, 60, None).await,
        json!([0, 16, 14, -1, 4])
    );
    for n in 3..=15u64 {
        assert_eq!(
            cell(&s, "k", 15, 30, 60, None).await,
            json!([0, 16, 16 - n, -1, 2 * n]),
            "call {n}"
        );
    }
    assert_eq!(
        cell(&s, "k", 15, 30, 60, None).await,
        json!([0, 16, 0, -1, 32]),
        "16th"
    );
    assert_eq!(
        cell(&s, "k", 15, 30, 60, None).await,
        json!([1, 16, 0, 2, 32]),
        "17th"
    );
    assert_eq!(
        cell(&s, "k", 15, 30, 60, Some(5)).await,
        json!([1, 16, 0, 10, 32]),
        "quantity 5 on the exhausted key"
    );

    // `j 15 30 60 5` on a fresh key, then a quantity-0 peek.
    assert_eq!(
        cell(&s, "j", 15, 30, 60, Some(5)).await,
        json!([0, 16, 11, -1, 10])
    );
    assert_eq!(
        cell(&s, "j", 15, 30, 60, Some(5)).await,
        json!([0, 16, 6, -1, 20])
    );
    assert_eq!(
        cell(&s, "j", 15, 30, 60, Some(5)).await,
        json!([0, 16, 1, -1, 30])
    );
    assert_eq!(
        cell(&s, "j", 15, 30, 60, Some(5)).await,
        json!([1, 16, 1, 8, 30])
    );
    assert_eq!(
        cell(&s, "j", 15, 30, 60, Some(0)).await,
        json!([0, 16, 1, -1, 30])
    );

    // `m 0 30 60`: capacity 1.
    assert_eq!(
        cell(&s, "m", 0, 30, 60, None).await,
        json!([0, 1, 0, -1, 2])
    );
    assert_eq!(cell(&s, "m", 0, 30, 60, None).await, json!([1, 1, 0, 2, 2]));

    // A quantity beyond the capacity can never pass: limited, retry -1 (redis-cell's answer).
    assert_eq!(
        cell(&s, "n", 0, 30, 60, Some(2)).await,
        json!([1, 1, 1, -1, 0])
    );

    s.stop().await;
}

#[tokio::test]
async fn cl_throttle_keys_live_apart_from_rule_keys() {
    let redis = support::RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    let (status, _) = s
        .put_rule(json!({"action": "k", "algorithm": "gcra", "capacity": 1, "rate": {"count": 1, "period": "1h"}}))
        .await;
    assert_eq!(status, 200);
    // Exhaust the rule for key "k" of action "k"; cl.throttle on key "k" is untouched.
    assert_eq!(s.throttle("k", "k", 1).await.1["allowed"], true);
    assert_eq!(s.throttle("k", "k", 1).await.1["allowed"], false);
    assert_eq!(
        cell(&s, "k", 0, 30, 60, None).await,
        json!([0, 1, 0, -1, 2])
    );
    s.stop().await;
}

/// Seconds in a 365-day year.
const YEAR: u64 = 31_536_000;

/// `CL.THROTTLE k 15 30 31536000 1` (30 per year) answers `0 16 15 -1 1051200` on redis-cell;
/// then the same burst as redis-cell runs it, bursts at once, and the exact bounds.
async fn long_periods_answer_as_redis_cell(s: &Sluice) {
    assert_eq!(
        cell(s, "y", 15, 30, YEAR, Some(1)).await,
        json!([0, 16, 15, -1, 1_051_200])
    );
    for n in 2..=16u64 {
        assert_eq!(
            cell(s, "y", 15, 30, YEAR, None).await,
            json!([0, 16, 16 - n, -1, n * 1_051_200]),
            "call {n}"
        );
    }
    // Full: one interval to wait (less the few ms that passed, rounded up as redis-cell does).
    assert_eq!(
        cell(s, "y", 15, 30, YEAR, None).await,
        json!([1, 16, 0, 1_051_200, 16 * 1_051_200])
    );
    assert_eq!(
        cell(s, "y16", 15, 30, YEAR, Some(16)).await,
        json!([0, 16, 0, -1, 16 * 1_051_200])
    );
    assert_eq!(
        cell(s, "y17", 15, 30, YEAR, Some(17)).await,
        json!([1, 16, 16, -1, 0])
    );
    // The longest burst redis-cell holds at 1 per second, and the longest period.
    assert_eq!(
        cell(s, "b", 9_223_372_035, 1, 1, None).await,
        json!([0, 9_223_372_036_u64, 9_223_372_035_u64, -1, 1])
    );
    assert_eq!(
        cell(s, "p", 0, 1, CELL_MAX_PERIOD_S, None).await,
        json!([0, 1, 0, -1, CELL_MAX_PERIOD_S])
    );
    // One more overflows redis-cell's i64 nanoseconds: refused, naming the argument.
    for (body, field) in [
        (
            json!({"key": "b", "max_burst": 9_223_372_036_u64, "count": 1, "period": 1}),
            "max_burst",
        ),
        (
            json!({"key": "p", "max_burst": 0, "count": 1, "period": CELL_MAX_PERIOD_S + 1}),
            "period",
        ),
        (
            json!({"key": "q", "max_burst": 0, "count": 30, "period": 60, "quantity": 4_611_686_019_u64}),
            "quantity",
        ),
    ] {
        let (status, answer) = s.post_decision("/v1/cl.throttle", body).await;
        assert_eq!(
            (status, answer["field"].as_str()),
            (400, Some(field)),
            "{answer}"
        );
    }
}

#[tokio::test]
async fn cl_throttle_long_periods_on_redis_answer_as_redis_cell() {
    let redis = support::RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    long_periods_answer_as_redis_cell(&s).await;
    s.stop().await;
}

#[tokio::test]
async fn cl_throttle_long_periods_on_memory_answer_as_redis_cell() {
    let s = Sluice::start(StoreChoice::Memory).await;
    long_periods_answer_as_redis_cell(&s).await;
    s.stop().await;
}

/// Random `CL.THROTTLE` arguments accepted by CellArgs, spread over redis-cell's whole range:
/// periods up to 292 years, capacities and quantities up to i64::MAX / T.
fn random_args(rng: &mut StdRng) -> (u64, u64, u64) {
    loop {
        let period = match rng.random_range(0..4) {
            0 => rng.random_range(1..=120),
            1 => YEAR,
            2 => rng.random_range(1..=100 * YEAR),
            _ => rng.random_range(1..=CELL_MAX_PERIOD_S),
        };
        let count = match rng.random_range(0..3) {
            0 => rng.random_range(1..=100),
            1 => rng.random_range(1..=1 << 20),
            _ => rng.random_range(1..=1 << 40),
        };
        let Ok(args) = CellArgs::new(0, count, period, 0) else {
            continue;
        };
        let most = CELL_MAX_NS / args.params.interval;
        let max_burst = match rng.random_range(0..3) {
            0 => rng.random_range(0..=(most - 1).min(20)),
            1 => most - 1,
            _ => rng.random_range(0..most),
        };
        return (max_burst, count, period);
    }
}

/// The gcra script on a real redis-server decides exactly as core, call by call, over random
/// argument lists across redis-cell's range and times that jump ahead by up to a tolerance (so
/// TATs lie centuries ahead), stand still, or step back. Fixed times: nothing sleeps.
#[tokio::test]
async fn redis_cell_path_matches_core_across_redis_cells_range() {
    let server = support::RedisServer::start();
    let mut config = RedisConfig::new(RedisTarget::Single(server.url()));
    config.timeout = Duration::from_secs(5);
    let clock = ManualClock::new(0);
    let store = RedisStore::connect(config)
        .await
        .expect("connect to the test redis-server")
        .with_clock(clock.clone());
    let mut rng = StdRng::seed_from_u64(0xce11);
    // 2024-01-01, where absolute times are far beyond 2^53 ns.
    let start: u64 = 1_704_067_200_000_000_000;
    for sequence in 0..60 {
        let (max_burst, count, period) = random_args(&mut rng);
        let key = format!("c{sequence}");
        let mut now = start + rng.random_range(0..1u64 << 60);
        let mut state = GcraState::default();
        for step in 0..25 {
            let base = CellArgs::new(max_burst, count, period, 0).expect("valid");
            let p = base.params;
            now = match rng.random_range(0..8) {
                0 => now,
                1 => now.saturating_sub(rng.random_range(0..=p.interval.min(1 << 50))),
                2 => now + rng.random_range(0..=p.tolerance() / 2),
                3 => now + rng.random_range(0..1_000_000_000),
                _ => now + rng.random_range(0..=p.interval.saturating_mul(2).min(1 << 62)),
            }
            // Up to 2262 (2^63 ns, where redis-cell's own times end): a TAT a whole tolerance
            // ahead still fits core's u64.
            .min(1 << 63);
            let quantity = match rng.random_range(0..6) {
                0 => 0,
                1 => rng.random_range(0..=CELL_MAX_NS / p.interval),
                2 => p.capacity,
                _ => rng.random_range(1..=p.capacity.min(3)),
            };
            let args = CellArgs::new(max_burst, count, period, quantity).expect("valid");
            let (want, next) = gcra::decide(p, state, now, quantity);
            clock.set(now);
            let got = store
                .cell_throttle(&key, args)
                .await
                .expect("store answers");
            assert_eq!(
                got, want,
                "sequence {sequence} step {step}: {max_burst} {count} {period} {quantity} at {now}, tat {:?}",
                state.tat
            );
            state = next;
        }
    }
}
