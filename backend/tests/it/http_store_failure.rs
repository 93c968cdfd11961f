//! When Redis goes away: decisions answer 503 quickly (counted in metrics), /readyz says not
//! ready, rules keep being served from the cache; when Redis comes back empty (a restart without
//! persistence), the cached rules are published again and decisions resume.

use crate::harness;
use crate::support;

use std::time::{Duration, Instant};

use harness::{eventually, Sluice};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_is_a_quick_503_and_a_restart_gets_the_rules_back() {
    let mut redis = support::RedisServer::start();
    let port = redis.port;
    let s = Sluice::start(harness::redis(&redis.url())).await;
    let rule = json!({"action": "post", "algorithm": "gcra", "capacity": 5, "rate": {"count": 10, "period": "1m"}, "mode": "enforce", "description": ""});
    assert_eq!(s.put_rule(rule.clone()).await.0, 200);
    assert_eq!(s.throttle("post", "u", 1).await.0, 200);

    redis.kill();

    let started = Instant::now();
    let (status, body) = s.throttle("post", "u", 1).await;
    let took = started.elapsed();
    assert_eq!(status, 503, "{body}");
    let code = body["error"].as_str().unwrap_or_default().to_owned();
    assert!(
        ["store_unavailable", "store_timeout", "overloaded"].contains(&code.as_str()),
        "{body}"
    );
    assert!(
        took < Duration::from_secs(3),
        "a store failure must answer quickly; took {took:?}"
    );
    crate::harness::get_with_status(&s.http, format!("{}/readyz", s.decision), 503).await;
    let metrics = s.metrics().await;
    let errors: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("sluice_store_errors_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert!(errors >= 1, "store errors counted: {metrics}");
    // Rules are still served from the cache.
    let (status, rules) = s.admin_get("/v1/rules").await;
    assert_eq!(status, 200);
    assert_eq!(rules["rules"][0], rule);

    // Redis comes back, empty.
    let redis = support::RedisServer::start_on_port(port);
    eventually(
        Duration::from_secs(15),
        "decisions resume after the restart",
        || async { (s.throttle("post", "u", 1).await.0 == 200).then_some(()) },
    )
    .await;
    eventually(
        Duration::from_secs(15),
        "cached rules republished to the restarted Redis",
        || async {
            (!redis
                .cli(&["--scan", "--pattern", "*rules*"])
                .trim()
                .is_empty())
            .then_some(())
        },
    )
    .await;
    // A new replica started now finds the rule in the store.
    let b = Sluice::start(harness::redis(&redis.url())).await;
    let (_, rules) = b.admin_get("/v1/rules").await;
    assert_eq!(rules["rules"][0], rule, "{rules}");
    let (_, answer) = b.throttle("post", "v", 1).await;
    assert_eq!(answer["allowed"], true);
    assert_eq!(answer["capacity"], 5);
    b.stop().await;
    s.stop().await;
}
