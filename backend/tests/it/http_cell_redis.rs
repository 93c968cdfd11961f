//! `POST /v1/cl.throttle` over HTTP on a real redis-server answers the redis-cell sequences of
//! issue 2. Every answer there tolerates calls a few milliseconds apart (seconds are rounded as
//! redis-cell rounds them), so the HTTP API needs no time parameter for them.

use crate::harness;
use crate::support;

use harness::Sluice;
use serde_json::{json, Value};

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
