//! 64 concurrent HTTP clients hammering one key admit exactly the algorithm's bound (capacity,
//! for a fresh key with a long window or a rate that leaks one unit per hour), for all six
//! algorithms, on the memory store and on a real redis-server.

use crate::harness;
use crate::support;

use std::sync::Arc;

use harness::{long_rule, Sluice, ALGORITHMS};
use serde_json::json;
use sluice_backend::StoreChoice;

const CLIENTS: usize = 64;
const CAPACITY: u64 = 100;
/// Each client sends this many requests: 64 × 4 = 256 > 2.5 × capacity.
const PER_CLIENT: usize = 4;

async fn hammer(s: &Sluice, action: &str) -> (u64, u64) {
    let url = Arc::new(format!("{}/v1/throttle", s.decision));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CLIENTS {
        // One connection pool per client: 64 truly concurrent HTTP clients.
        let http = harness::client();
        let url = url.clone();
        let action = action.to_owned();
        tasks.spawn(async move {
            let (mut allowed, mut denied) = (0u64, 0u64);
            for _ in 0..PER_CLIENT {
                let r = http
                    .post(url.as_str())
                    .json(&json!({"action": action, "key": "the-one-key"}))
                    .send()
                    .await
                    .expect("decision request");
                assert_eq!(r.status().as_u16(), 200, "every request gets a decision");
                let body: serde_json::Value = r.json().await.expect("json");
                if body["allowed"] == true {
                    allowed += 1;
                } else {
                    denied += 1;
                }
            }
            (allowed, denied)
        });
    }
    let mut total = (0, 0);
    while let Some(r) = tasks.join_next().await {
        let (a, d) = r.expect("client task");
        total.0 += a;
        total.1 += d;
    }
    total
}

async fn exact_bound_for_every_algorithm(s: &Sluice) {
    for algorithm in ALGORITHMS {
        let action = format!("hammer-{algorithm}");
        let (status, body) = s.put_rule(long_rule(&action, algorithm, CAPACITY)).await;
        assert_eq!(status, 200, "{body}");
        let (allowed, denied) = hammer(s, &action).await;
        assert_eq!(allowed + denied, (CLIENTS * PER_CLIENT) as u64);
        assert_eq!(
            allowed, CAPACITY,
            "{algorithm}: admitted {allowed}, bound is {CAPACITY}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_get_exactly_the_bound_on_memory() {
    let s = Sluice::start(StoreChoice::Memory).await;
    exact_bound_for_every_algorithm(&s).await;
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_get_exactly_the_bound_on_redis() {
    let redis = support::RedisServer::start();
    let s = Sluice::start(harness::redis(&redis.url())).await;
    exact_bound_for_every_algorithm(&s).await;
    s.stop().await;
}
